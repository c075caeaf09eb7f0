"""Finding, reading and crash-consistently replacing Python files.

- Discovery skips symlinks, non-``.py`` files and tool/venv/build directories, except a path
  named explicitly on the command line (a symlinked file or directory given is followed);
  files are deduplicated by real path, so one file given twice is read once; a directory that
  cannot be listed is a problem, never skipped in silence; results are sorted.
- Reading keeps what writing needs to restore byte for byte: the encoding (PEP 263 cookie or
  UTF-8 BOM) and, because text is decoded without newline translation, CRLF line ends.
- Writing a run (:func:`write_all`) is one transaction, even across a crash: every new file is
  staged and synced beside its original, then a journal naming each (original, staged copy,
  sha256 of the old and new bytes) is synced in the run's common directory, then each file is
  replaced (``os.replace`` of a copy carrying the original's owner, group and mode; or, for a
  hard-linked file or one whose owner cannot be given, an in-place overwrite, which keeps the
  inode), then the staged copies and the journal are removed. Signals that end a process
  politely are held back during the replace. A journal found by a later run
  (:func:`recover`) is finished from its staged copies, so the tree ends fully migrated.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import io
import json
import os
import signal
import socket
import stat
import tempfile
import threading
import tokenize
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from codemods.assumptions import SKIPPED_DIRS

JOURNAL = ".fsdp2-port-journal.json"
TEMP_SUFFIX = ".fsdp2-port.tmp"
_HELD_SIGNALS = tuple(
    getattr(signal, name)
    for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT")
    if hasattr(signal, name)
)


@dataclass(frozen=True)
class Decoded:
    """A file's text and the encoding it was read with (written back in it)."""

    text: str
    encoding: str


class UnreadableSource(Exception):
    """The file cannot be read or decoded as Python source."""


@dataclass
class Leftovers:
    """What earlier runs may have left where this one reads: journals and staged copies."""

    journals: set[str] = field(default_factory=set)
    temporaries: set[str] = field(default_factory=set)


def discover(paths: list[str], leftovers: Leftovers | None = None) -> tuple[list[str], list[str]]:
    """``(files, problems)``: the ``.py`` files under ``paths`` (each real file once, under
    the first spelling met) and one message per path or directory that cannot be read.
    ``leftovers`` collects journals and staged copies found on the way."""
    found = leftovers if leftovers is not None else Leftovers()
    files: dict[str, str] = {}
    problems: list[str] = []
    for path in paths:
        _note_around(path, found)
        if os.path.isfile(path):
            if path.endswith(".py") or os.path.realpath(path).endswith(".py"):
                files.setdefault(os.path.realpath(path), os.path.normpath(path))
        elif os.path.isdir(path):
            for full in _walk(path, problems, found):
                files.setdefault(os.path.realpath(full), full)
        elif os.path.lexists(path):
            problems.append(f"{path}: a broken symbolic link")
        else:
            problems.append(f"{path}: no such file or directory")
    return sorted(files.values()), problems


def _note_around(path: str, found: Leftovers) -> None:
    """Journals in the directories above ``path`` (a run over a subtree of an interrupted
    one), and staged copies of ``path`` beside it."""
    real = os.path.realpath(path)
    directory = real if os.path.isdir(real) else os.path.dirname(real)
    while True:
        journal = os.path.join(directory, JOURNAL)
        if os.path.isfile(journal):
            found.journals.add(journal)
        parent = os.path.dirname(directory)
        if parent == directory:
            break
        directory = parent
    if os.path.isfile(real):
        directory, name = os.path.split(real)
        with contextlib.suppress(OSError):
            for entry in os.listdir(directory):
                if entry.startswith(f".{name}.") and entry.endswith(TEMP_SUFFIX):
                    found.temporaries.add(os.path.join(directory, entry))


def _walk(root: str, problems: list[str], found: Leftovers) -> Iterator[str]:
    def unreadable(error: OSError) -> None:
        problems.append(f"{error.filename}: cannot read directory: {error.strerror or error}")

    for directory, dirs, names in os.walk(root, onerror=unreadable):
        dirs[:] = sorted(
            d
            for d in dirs
            if d not in SKIPPED_DIRS
            and not os.path.islink(os.path.join(directory, d))
            and not os.path.exists(os.path.join(directory, d, "pyvenv.cfg"))
        )
        for name in names:
            full = os.path.join(directory, name)
            if name == JOURNAL:
                found.journals.add(os.path.realpath(full))
            elif name.endswith(TEMP_SUFFIX) and name.startswith("."):
                found.temporaries.add(os.path.realpath(full))
            elif name.endswith(".py") and not os.path.islink(full):
                yield os.path.normpath(full)


def decode(data: bytes) -> Decoded:
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return Decoded(data.decode(encoding), encoding)
    except (SyntaxError, UnicodeDecodeError, LookupError) as error:
        raise UnreadableSource(f"cannot decode: {error}") from error


def read_bytes(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as error:
        raise UnreadableSource(f"cannot read: {error.strerror or error}") from error


@dataclass(frozen=True)
class FsdpFile:
    """A file of the run that mentions FSDP, for the passes over the whole run: its text, and
    its tree when a pass asks (parsed once; None when it does not parse: the analysis reports
    it)."""

    module: str
    package: bool
    data: bytes

    @functools.cached_property
    def tree(self) -> ast.Module | None:
        try:
            return ast.parse(decode(self.data).text)
        except (UnreadableSource, SyntaxError, ValueError, RecursionError):
            return None


def fsdp_files(
    paths: Iterable[str], module_name: Callable[[str], tuple[str, bool]]
) -> list[FsdpFile]:
    """Each file of the run that mentions FSDP (one that cannot be read is left out)."""
    found = []
    for path in paths:
        try:
            data = read_bytes(path)
        except UnreadableSource:
            continue
        if b"fsdp" in data or b"FSDP" in data:
            found.append(FsdpFile(*module_name(path), data))
    return found


def read_only(path: str) -> bool:
    """Whether the file's owner may not write it (mode bits only: root ignores them)."""
    try:
        return not os.stat(path).st_mode & stat.S_IWUSR
    except OSError:
        return False


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _file_sha(path: str) -> str | None:
    try:
        with open(path, "rb") as handle:
            return _sha(handle.read())
    except OSError:
        return None


def write_all(outputs: list[tuple[str, str, str]]) -> str | None:
    """Replace each ``(path, text, encoding)`` as one transaction (see the module's doc);
    owners, groups, modes and hard links are kept. A failure while staging replaces nothing
    (its message is returned); no temporary file outlives the call unless the process dies,
    and then the journal lets the next run finish the replace."""
    if not outputs:
        return None
    staged: list[dict] = []
    try:
        for path, text, encoding in outputs:
            data = text.encode(encoding)
            old = read_bytes(path)
            temporary = _stage(path, data)
            staged.append(
                {
                    "path": os.path.abspath(path),
                    "staged": temporary,
                    "old": _sha(old),
                    "new": _sha(data),
                    "in_place": _needs_in_place(path, temporary),
                }
            )
        journal = _write_journal(staged)
    except (OSError, UnreadableSource) as error:
        _remove(entry["staged"] for entry in staged)
        if isinstance(error, UnreadableSource):
            return str(error)
        return f"cannot write {error.filename or ''}: {error.strerror or error}".replace("  ", " ")
    except BaseException:
        _remove(entry["staged"] for entry in staged)
        raise
    with _signals_held():
        _commit(journal, staged)
    return None


def _stage(path: str, data: bytes) -> str:
    """A synced copy of ``data`` next to ``path``, with its mode and, where this process may
    give them, its owner and group: the temporary's path."""
    status = os.stat(path)
    directory, name = os.path.split(os.path.abspath(path))
    fd, temporary = tempfile.mkstemp(prefix=f".{name}.", suffix=TEMP_SUFFIX, dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if hasattr(os, "chown"):
            with contextlib.suppress(OSError):
                os.chown(temporary, status.st_uid, status.st_gid)
        os.chmod(temporary, stat.S_IMODE(status.st_mode))
    except BaseException:
        os.unlink(temporary)
        raise
    return temporary


def _needs_in_place(path: str, temporary: str) -> bool:
    """Hard-linked files, and files whose owner or group the copy could not take, are
    overwritten in place (which keeps the inode); all others are replaced by rename."""
    original, copy = os.stat(path), os.stat(temporary)
    keeps_owner = (original.st_uid, original.st_gid) == (copy.st_uid, copy.st_gid)
    return (original.st_nlink > 1 or not keeps_owner) and os.access(path, os.W_OK)


def _write_journal(entries: list[dict]) -> str:
    """The synced journal of a staged run, in the directory that holds all its files."""
    root = os.path.commonpath([os.path.dirname(e["path"]) for e in entries])
    journal = os.path.join(root, JOURNAL)
    if os.path.lexists(journal):
        raise OSError(
            17, "an interrupted run's journal is in the way (rerun to finish it)", journal
        )
    record = {
        "fsdp2-port-journal": 1,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "files": [
            {
                **e,
                "path": os.path.relpath(e["path"], root),
                "staged": os.path.relpath(e["staged"], root),
            }
            for e in entries
        ],
    }
    fd, temporary = tempfile.mkstemp(prefix=f"{JOURNAL}.", suffix=TEMP_SUFFIX, dir=root)
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(record, handle, indent=1)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, journal)
    except BaseException:
        _remove([temporary])
        raise
    _sync_directory(root)
    return journal


def _commit(journal: str, entries: list[dict]) -> None:
    """Replace every file from its staged copy, then remove the copies and the journal."""
    for entry in entries:
        _replace(entry["path"], entry["staged"], entry["in_place"])
    for directory in {os.path.dirname(e["path"]) for e in entries}:
        _sync_directory(directory)
    _remove(e["staged"] for e in entries)
    os.unlink(journal)
    _sync_directory(os.path.dirname(journal))


def _replace(path: str, staged: str, in_place: bool) -> None:
    if not in_place:
        os.replace(staged, path)
        return
    with open(staged, "rb") as source:
        data = source.read()
    with open(path, "r+b") as target:
        target.write(data)
        target.truncate()
        target.flush()
        os.fsync(target.fileno())


def recover(leftovers: Leftovers) -> tuple[list[str], list[str]]:
    """Finish what interrupted runs left: ``(notes, problems)``. A journal whose staged copies
    are all there (or whose files already hold their new bytes) is replayed, so its run ends
    fully written; one that cannot be replayed is left in place and reported. Staged copies no
    journal names (a run killed while staging, before anything was replaced) are removed."""
    notes: list[str] = []
    problems: list[str] = []
    named: set[str] = set()
    for journal in sorted(leftovers.journals):
        note, problem, staged = _replay(journal)
        named.update(staged)
        if note:
            notes.append(note)
        if problem:
            problems.append(problem)
    stale = sorted(t for t in leftovers.temporaries if t not in named and os.path.exists(t))
    _remove(stale)
    if stale:
        notes.append(
            f"removed {len(stale)} staged file(s) an interrupted run left before replacing"
            f" anything: {', '.join(stale)}"
        )
    return notes, problems


def _replay(journal: str) -> tuple[str | None, str | None, set[str]]:
    """``(note, problem, staged copies it names)`` for one journal."""
    root = os.path.dirname(journal)
    try:
        with open(journal) as handle:
            record = json.load(handle)
        entries = [
            {
                **e,
                "path": os.path.join(root, e["path"]),
                "staged": os.path.join(root, e["staged"]),
            }
            for e in record["files"]
        ]
    except (OSError, ValueError, KeyError, TypeError) as error:
        return None, f"{journal}: unreadable journal of an interrupted run: {error}", set()
    staged = {os.path.realpath(e["staged"]) for e in entries}
    if _alive(record):
        return None, f"{journal}: another run (pid {record['pid']}) is writing here", staged
    todo = []
    for entry in entries:
        current = _file_sha(entry["path"])
        if current == entry["new"]:
            continue
        if current != entry["old"] and not entry.get("in_place"):
            return (
                None,
                f"{journal}: cannot finish an interrupted run: {entry['path']} was edited since",
                staged,
            )
        if _file_sha(entry["staged"]) != entry["new"]:
            return (
                None,
                f"{journal}: cannot finish an interrupted run: the staged copy of"
                f" {entry['path']} is missing or damaged",
                staged,
            )
        todo.append(entry)
    with _signals_held():
        for entry in todo:
            _replace(entry["path"], entry["staged"], bool(entry.get("in_place")))
        for directory in {os.path.dirname(e["path"]) for e in todo}:
            _sync_directory(directory)
        _remove(e["staged"] for e in entries)
        os.unlink(journal)
        _sync_directory(root)
    return (
        f"{journal}: finished an interrupted --write: {len(todo)} of {len(entries)} files"
        " replaced now, the run is fully written",
        None,
        staged,
    )


def _alive(record: dict) -> bool:
    """Whether the run that wrote the journal may still be running (same host, live pid)."""
    pid = record.get("pid")
    if record.get("host") != socket.gethostname() or not isinstance(pid, int) or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return _not_a_zombie(pid)


def _not_a_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


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


def _sync_directory(directory: str) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _remove(paths) -> None:
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
