"""Writing a ``--write`` run: compare-and-swap, one transaction even across a crash.

- A file is replaced only while it holds the bytes the run read (their sha256, taken when the
  run read it). A file changed since is left alone and named, and no file of the run is
  written: files already replaced are put back.
- The run's journal (``journal``: this user's private record, never read from a tree) names
  each file, its staged copy and its backup; it is saved before the first copy is staged and
  again before the first file is replaced, and removed last.
- Every new file is staged and synced beside its original, created by this run (``O_EXCL``,
  never through a symbolic link) with the original's mode and, where this process may give
  them, its owner and group. A file is then replaced by rename, its old inode kept under a
  hard link until the swap is verified; a hard-linked file, or one whose owner or group the
  copy could not take, is overwritten in place (its inode, links, owner and group stay),
  first of all, after a full copy of its old bytes is staged: a failed write (a full disk)
  puts its old bytes back, and a crash leaves bytes the journal can tell from an edit.
- Signals that end a process politely are held back while files are replaced.
- Only regular files this run created are removed (at names that carry its token), never
  through a symbolic link.
- ``recover``: a later ``--write`` finishes a dead run's journal from its staged copies (every
  file must still hold its old or new bytes, or bytes the interrupted in-place write left);
  ``--check`` and a diff only report it.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import signal
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from fsdp2_port.codemods import journal
from fsdp2_port.codemods.journal import REPLACING, STAGING, TEMP_SUFFIX, Entry, Journal

_HELD_SIGNALS = tuple(
    getattr(signal, name)
    for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT")
    if hasattr(signal, name)
)
#: The granularity at which an interrupted write can leave a file (a disk sector).
_BLOCK = 512


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class _Changed(Exception):
    """A file no longer holds the bytes the run read."""


@dataclass
class _File:
    given: str  # as the run names it
    path: str  # its real path: a symbolic link named on the command line is written through
    data: bytes
    digest: str  # of the bytes the run read
    entry: Entry
    old: bytes = b""
    linked: bool = False  # its old inode is kept under the backup's name


def write_all(outputs: list[tuple[str, str, str, str]]) -> str | None:
    """Replace each ``(path, text, encoding, sha256 of the bytes the run read)`` as one
    transaction (see the module's doc): None, or why nothing was written."""
    if not outputs:
        return None
    token = journal.new_token()
    files: list[_File] = []
    seen: dict[tuple[int, int], _File] = {}  # hard links of one file: written once
    for given, text, encoding, digest in outputs:
        path = os.path.realpath(given)
        try:
            status = os.stat(path)
        except OSError as error:
            return _cannot(error)
        same = seen.get((status.st_dev, status.st_ino))
        if same is not None:
            if same.data != text.encode(encoding):
                return f"{same.given} and {given} are one file (hard links) migrated differently"
            continue
        name = os.path.basename(path)
        staged, backup = f".{name}.{token}{TEMP_SUFFIX}", f".{name}.{token}.old{TEMP_SUFFIX}"
        entry = Entry(path, staged, backup, digest, sha(text.encode(encoding)))
        files.append(_File(given, path, text.encode(encoding), digest, entry))
        seen[(status.st_dev, status.st_ino)] = files[-1]
    root = os.path.commonpath([os.path.dirname(f.path) for f in files])
    for f in files:
        f.entry.path = os.path.relpath(f.path, root)
    try:
        record = journal.begin(root, [f.entry for f in files], token)
    except OSError as error:
        return _cannot(error)
    try:
        problem = _stage_all(files, record)
    except OSError as error:
        problem = _cannot(error)
    except BaseException:
        _remove_copies(record)
        record.discard()
        raise
    with _signals_held():  # Ctrl-C now waits until the tree is whole and tidy again
        keep = False
        if problem is None:
            problem, keep = _commit(files, record)
        if keep:  # files may be half put back: the next --write finishes the run
            record.release()
            return problem
        _remove_copies(record)
        record.discard()
    return problem


def _stage_all(files: list[_File], record: Journal) -> str | None:
    """Stage every new file (and a full copy of each file written in place), checking that
    each still holds what the run read; then mark the journal as replacing."""
    for f in files:
        current = _read(f.path)
        if current is None or sha(current) != f.digest:
            return f"{f.given} changed since the run read it"
        f.old = current
        _, staged, backup = record.full(f.entry)
        status = os.stat(f.path)
        _stage(staged, f.data, status)
        f.entry.in_place = _needs_in_place(f.path, staged)
        if f.entry.in_place:
            _stage(backup, f.old, status)
    record.phase = REPLACING
    record.save()
    return None


def _stage(target: str, data: bytes, like: os.stat_result) -> None:
    """Create ``target`` (this run's own file: never an existing one, never through a link)
    holding ``data``, synced, with the mode and, where this process may give them, the owner
    and group of ``like``."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(target, flags, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
            with contextlib.suppress(OSError):
                os.fchown(handle.fileno(), like.st_uid, like.st_gid)
            os.fchmod(handle.fileno(), stat.S_IMODE(like.st_mode))
    except BaseException:
        os.unlink(target)
        raise


def _needs_in_place(path: str, staged: str) -> bool:
    """Hard-linked files, and files whose owner or group the copy could not take, are
    overwritten in place (which keeps the inode); all others are replaced by rename."""
    original, copy = os.stat(path), os.stat(staged)
    keeps_owner = (original.st_uid, original.st_gid) == (copy.st_uid, copy.st_gid)
    return (original.st_nlink > 1 or not keeps_owner) and os.access(path, os.W_OK)


def _commit(files: list[_File], record: Journal) -> tuple[str | None, bool]:
    """Replace every file, in-place ones first (the only writes that need room): ``(why
    nothing was written, whether the journal must stay)``. On a change or a failure, the
    files already replaced are put back."""
    done: list[_File] = []
    try:
        for f in sorted(files, key=lambda f: not f.entry.in_place):
            if f.entry.in_place:
                _write_in_place(f)
            else:
                _swap(f, record)
            done.append(f)
    except _Changed as changed:
        problem = f"{changed} changed since the run read it"
    except OSError as error:
        problem = _cannot(error)
    else:
        for directory in {os.path.dirname(f.path) for f in files}:
            journal.sync_directory(directory)
        return None, False
    try:
        _put_back(done, record)
    except OSError as error:
        return f"{problem}; then {_cannot(error)} while putting files back", True
    return problem, False


def _write_in_place(f: _File) -> None:
    with open(f.path, "r+b") as target:
        current = target.read()
        if sha(current) != f.digest:
            raise _Changed(f.given)
        try:
            _overwrite(target, f.data, len(current))
        except OSError:
            _overwrite(target, current, len(current))  # its blocks are still allocated
            raise


def _overwrite(handle, data: bytes, size: int) -> None:
    """``data`` over the open file ``handle`` (``size`` bytes now), synced; room for what
    it adds is claimed before its first byte changes."""
    if len(data) > size:
        try:
            os.posix_fallocate(handle.fileno(), size, len(data) - size)
        except OSError as error:
            if error.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                raise
    handle.seek(0)
    handle.write(data)
    handle.truncate(len(data))
    handle.flush()
    os.fsync(handle.fileno())


def _swap(f: _File, record: Journal) -> None:
    """Rename the staged copy over the file if it holds what the run read; its old inode is
    kept (a hard link) and checked after the rename, which catches a save in between."""
    path, staged, backup = record.full(f.entry)
    current = _read(path)
    if current is None or sha(current) != f.digest:
        raise _Changed(f.given)
    try:
        os.link(path, backup, follow_symlinks=False)
        f.linked = True
    except OSError:
        f.linked = False  # a file system without hard links: the check before is the last
    os.replace(staged, path)
    if f.linked:
        displaced = _read(backup)
        if displaced is None or sha(displaced) != f.digest:
            os.replace(backup, path)  # the user's save, back in place
            f.linked = False
            raise _Changed(f.given)


def _put_back(done: list[_File], record: Journal) -> None:
    """Every file of ``done`` as it was (the last replaced first)."""
    for f in reversed(done):
        path, staged, backup = record.full(f.entry)
        if f.entry.in_place:
            with open(path, "r+b") as target:
                _overwrite(target, f.old, len(f.data))
        elif f.linked:
            os.replace(backup, path)
        else:
            _stage(staged, f.old, os.stat(path))
            os.replace(staged, path)


def recover(paths: list[str], write: bool) -> tuple[list[str], list[str]]:
    """``(notes, problems)`` about the journals of interrupted runs over ``paths`` (their
    tree holds one of them, or lies inside one). With ``write``, a dead run's journal is
    finished (one that replaced nothing: its staged copies removed); without, nothing is
    changed and an unfinished run is a problem, since its tree may be half written."""
    notes: list[str] = []
    problems: list[str] = []
    for record, file in journal.found(paths):
        if record is None:
            notes.append(f"{file}: unreadable journal of a run, ignored")
            continue
        if not journal.take(record):
            problems.append(
                f"{record.root}: another fsdp2-port --write (pid {record.pid} on"
                f" {record.host}) is writing here"
            )
            continue
        try:
            if record.phase == STAGING:
                if write:
                    _remove_copies(record)
                    record.discard()
                    notes.append(
                        f"{record.root}: removed the staged copies of an interrupted --write"
                        " that had replaced nothing"
                    )
            elif not write:
                problems.append(
                    f"{record.root}: an interrupted --write is unfinished here (the tree may"
                    " be half written): rerun with --write to finish it"
                )
            else:
                note, problem = _replay(record)
                notes += [note] if note else []
                problems += [problem] if problem else []
        finally:
            record.release()
    return notes, problems


def _replay(record: Journal) -> tuple[str | None, str | None]:
    """Finish a dead run: every file must hold its new bytes, its old ones (then its staged
    copy must be whole), or what an interrupted in-place write of them leaves."""
    plan: list[tuple[Entry, bytes, bytes]] = []
    for entry in record.entries:
        path, staged, backup = record.full(entry)
        current = _read(path)
        if current is not None and sha(current) == entry.new:
            continue
        new = _read(staged)
        if new is None or sha(new) != entry.new:
            return None, (
                f"{record.root}: cannot finish an interrupted --write: the staged copy of"
                f" {path} is missing or damaged (its journal {record.file} is kept)"
            )
        old = _read(backup) if entry.in_place else None
        unchanged = current is not None and sha(current) == entry.old
        torn = (
            current is not None
            and old is not None
            and sha(old) == entry.old
            and _torn(current, old, new)
        )
        if not (unchanged or torn):
            return None, (
                f"{record.root}: cannot finish an interrupted --write: {path} was edited"
                f" since it read it (its journal {record.file} is kept)"
            )
        assert current is not None
        plan.append((entry, new, current))
    with _signals_held():
        for entry, new, current in plan:
            path, staged, _ = record.full(entry)
            if entry.in_place:
                with open(path, "r+b") as target:
                    _overwrite(target, new, len(current))
            else:
                os.replace(staged, path)
        for directory in {os.path.dirname(record.full(e)[0]) for e in record.entries}:
            journal.sync_directory(directory)
        _remove_copies(record)
        record.discard()
    return (
        f"{record.root}: finished an interrupted --write: {len(plan)} of"
        f" {len(record.entries)} files replaced now, the run is fully written",
        None,
    )


def _torn(current: bytes, old: bytes, new: bytes) -> bool:
    """Whether ``current`` is what an interrupted in-place write of ``new`` over ``old``
    can leave: each block the old or the new bytes (zeros where room was claimed past the
    old end), and a length between the two or the new one."""
    written = new + old[len(new) :]
    if len(current) != len(new) and not len(old) <= len(current) <= len(written):
        return False
    for start in range(0, len(current), _BLOCK):
        piece = current[start : start + _BLOCK]
        end = start + len(piece)
        if piece == written[start:end] or (end <= len(old) and piece == old[start:end]):
            continue
        if start >= len(old) and piece == bytes(len(piece)):
            continue
        return False
    return True


def _read(path: str) -> bytes | None:
    """The bytes of the regular file ``path`` (not through a link at its end); None when
    there is none."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return handle.read()


def _remove_copies(record: Journal) -> None:
    """Remove the run's staged copies and backups that are still there: regular files at the
    names this run created (they carry its token), never a link or what it points to."""
    for entry in record.entries:
        _, staged, backup = record.full(entry)
        for copy in (staged, backup):
            try:
                status = os.lstat(copy)
            except OSError:
                continue
            if stat.S_ISREG(status.st_mode):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(copy)


def _cannot(error: OSError) -> str:
    where = f" {error.filename}" if error.filename else ""
    return f"cannot write{where}: {error.strerror or error}"


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Hold SIGINT/SIGTERM/SIGHUP/SIGQUIT back (main thread, POSIX): they arrive after."""
    if (
        not hasattr(signal, "pthread_sigmask")
        or threading.current_thread() is not threading.main_thread()
    ):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
