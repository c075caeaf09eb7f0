"""A ``--write`` run's journal: its private record, never a command file.

- Journals live in this user's state directory (``$FSDP2_PORT_STATE_DIR``, else
  ``$XDG_STATE_HOME/fsdp2-port``, else ``~/.local/state/fsdp2-port``), which must be a
  directory of this user's that no one else can write; nothing in a source tree is ever read
  as a journal.
- A journal is bound to its run (a random token, in its name and in every staged copy's name)
  and to the run's tree (``root``, a real path); its entries name files by paths relative to
  ``root`` that are checked again when read: no absolute path, no ``..``, no symbolic link on
  the way, staged copies beside their file and carrying the token.
- A run holds an ``flock`` on its lock file for as long as it lives: a journal whose lock can
  be taken belongs to a dead run, whatever process now has its pid.
- Records are replaced atomically and synced: a crash leaves the previous one or the next.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import secrets
import socket
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field

STATE_VARIABLE = "FSDP2_PORT_STATE_DIR"
TEMP_SUFFIX = ".fsdp2-port.tmp"
FORMAT = 2
#: What a run is doing: staging copies (nothing replaced yet), or replacing files.
STAGING, REPLACING = "staging", "replacing"


class NotPrivate(OSError):
    """The state directory is not this user's own."""


@dataclass
class Entry:
    """One file of a run: ``path`` relative to the root, the names of its staged copy and of
    its backup (beside it), the sha256 of the bytes the run read and of those it writes, and
    whether it is written in place."""

    path: str
    staged: str
    backup: str
    old: str
    new: str
    in_place: bool = False


@dataclass
class Journal:
    root: str
    token: str
    entries: list[Entry]
    phase: str = STAGING
    pid: int = field(default_factory=os.getpid)
    host: str = field(default_factory=socket.gethostname)
    #: where it is kept, and its lock (an open descriptor while this process holds it)
    file: str = ""
    lock: int | None = None

    def full(self, entry: Entry) -> tuple[str, str, str]:
        """``(file, staged copy, backup)`` of ``entry`` as absolute paths."""
        path = os.path.join(self.root, entry.path)
        directory = os.path.dirname(path)
        return path, os.path.join(directory, entry.staged), os.path.join(directory, entry.backup)

    def save(self) -> None:
        """Write the record (atomically, synced) where ``file`` says."""
        record = {
            "fsdp2-port-journal": FORMAT,
            "root": self.root,
            "token": self.token,
            "phase": self.phase,
            "pid": self.pid,
            "host": self.host,
            "files": [vars(e) for e in self.entries],
        }
        directory = os.path.dirname(self.file)
        temporary = os.path.join(directory, f".{self.token}.{secrets.token_hex(4)}{TEMP_SUFFIX}")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            with os.fdopen(fd, "w") as handle:
                json.dump(record, handle, indent=1)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, self.file)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
        sync_directory(directory)

    def discard(self) -> None:
        """Remove the record, then its lock (released)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.file)
        sync_directory(os.path.dirname(self.file))
        with contextlib.suppress(FileNotFoundError):
            os.unlink(_lock_path(self.file))
        self.release()

    def release(self) -> None:
        if self.lock is not None:
            os.close(self.lock)  # closing the descriptor releases the flock
            self.lock = None


def state_dir(create: bool) -> str | None:
    """This user's state directory (created, mode 0700, when ``create``); None when it does
    not exist and is not to be created. Raises ``NotPrivate`` when it is a link, another
    user's, or writable by others."""
    configured = os.environ.get(STATE_VARIABLE)
    if configured:
        path = configured
    else:
        base = os.environ.get("XDG_STATE_HOME") or os.path.join(
            os.path.expanduser("~"), ".local", "state"
        )
        path = os.path.join(base, "fsdp2-port")
    path = os.path.abspath(path)
    if create:
        os.makedirs(path, mode=0o700, exist_ok=True)
    try:
        status = os.lstat(path)
    except FileNotFoundError:
        return None
    if (
        not stat.S_ISDIR(status.st_mode)
        or status.st_uid != os.geteuid()
        or status.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    ):
        raise NotPrivate(
            errno.EPERM,
            "not a directory of this user's that no one else can write, so not a place for"
            f" the run's journal (choose one with {STATE_VARIABLE})",
            path,
        )
    return path


def begin(root: str, entries: list[Entry], token: str) -> Journal:
    """A new run's journal, locked by this process and saved in the state directory."""
    directory = state_dir(create=True)
    assert directory is not None
    journal = Journal(root, token, entries, file=os.path.join(directory, f"{token}.json"))
    lock = os.open(
        _lock_path(journal.file), os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600
    )
    fcntl.flock(lock, fcntl.LOCK_EX)
    journal.lock = lock
    try:
        journal.save()
    except BaseException:
        journal.discard()
        raise
    return journal


def new_token() -> str:
    return secrets.token_hex(8)


def found(paths: list[str]) -> Iterator[tuple[Journal | None, str]]:
    """The journals in the state directory whose tree contains one of ``paths`` or lies
    inside one: ``(journal, file)``, journal None when the record cannot be read or does not
    hold what a journal must (its file is named for the message)."""
    try:
        directory = state_dir(create=False)
    except NotPrivate:
        return  # nothing of the run's can be there; begin() refuses to write there
    if directory is None:
        return
    reals = [os.path.realpath(p) for p in paths]
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".json") or name.startswith("."):
            continue
        file = os.path.join(directory, name)
        journal = _read(file)
        if journal is None:
            yield None, file
        elif any(_within(r, journal.root) or _within(journal.root, r) for r in reals):
            yield journal, file


def take(journal: Journal) -> bool:
    """Take the lock of another run's journal: False while that run lives."""
    try:
        lock = os.open(_lock_path(journal.file), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError:
        return False
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(lock)
        return False
    journal.lock = lock
    if not os.path.exists(journal.file):  # finished by another process meanwhile
        with contextlib.suppress(FileNotFoundError):
            os.unlink(_lock_path(journal.file))
        journal.release()
        return False
    return True


def _read(file: str) -> Journal | None:
    try:
        with open(file) as handle:
            record = json.load(handle)
        entries = [Entry(**e) for e in record["files"]]
        journal = Journal(
            str(record["root"]),
            str(record["token"]),
            entries,
            str(record["phase"]),
            int(record["pid"]),
            str(record["host"]),
            file=file,
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if record.get("fsdp2-port-journal") != FORMAT or not _sound(journal):
        return None
    return journal


def _sound(journal: Journal) -> bool:
    """Whether every entry names a file under the root (as a real path, no link on the way)
    and staged copies beside it that carry the run's token."""
    root = journal.root
    if not os.path.isabs(root) or os.path.realpath(root) != root or len(journal.token) < 16:
        return False
    for entry in journal.entries:
        parts = entry.path.split(os.sep)
        if os.path.isabs(entry.path) or ".." in parts or "" in parts:
            return False
        path = os.path.join(root, entry.path)
        if os.path.realpath(path) != path:
            return False
        name = os.path.basename(path)
        for copy in (entry.staged, entry.backup):
            if os.sep in copy or not (
                copy.startswith(f".{name}.{journal.token}.") and copy.endswith(TEMP_SUFFIX)
            ):
                return False
    return True


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _lock_path(file: str) -> str:
    return file[: -len(".json")] + ".lock"


def sync_directory(directory: str) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
