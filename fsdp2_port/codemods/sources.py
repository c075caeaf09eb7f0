"""Finding and reading Python files.

- Discovery skips symlinks, non-``.py`` files and tool/venv/build directories, except a path
  named explicitly on the command line (a symlinked file or directory given is followed);
  files are deduplicated by real path, so one file given twice is read once; a directory that
  cannot be listed is a problem, never skipped in silence; so is a ``.py`` that is not a
  regular file (a FIFO, a device, a socket), which is never opened; results are sorted.
- Reading keeps what writing needs to restore byte for byte: the encoding (PEP 263 cookie or
  UTF-8 BOM) and, because text is decoded without newline translation, CRLF and CR line ends.
  Writing is ``writes``'.
"""

from __future__ import annotations

import ast
import functools
import io
import os
import stat
import tokenize
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from fsdp2_port.codemods import trees
from fsdp2_port.codemods.assumptions import SKIPPED_DIRS

from .assumed import either_way


@dataclass(frozen=True)
class Decoded:
    """A file's text and the encoding it was read with (written back in it)."""

    text: str
    encoding: str


class UnreadableSource(Exception):
    """The file cannot be read or decoded as Python source."""


def discover(paths: list[str]) -> tuple[list[str], list[str]]:
    """``(files, problems)``: the ``.py`` files under ``paths`` (each real file once, under
    the first spelling met) and one message per path or directory that cannot be read."""
    files: dict[str, str] = {}
    problems: list[str] = []
    for path in paths:
        try:
            status = os.stat(path)
        except OSError as error:
            if os.path.lexists(path) and isinstance(error, FileNotFoundError):
                problems.append(f"{path}: a broken symbolic link")
            elif isinstance(error, FileNotFoundError):
                problems.append(f"{path}: no such file or directory")
            else:
                problems.append(f"{path}: cannot read: {error.strerror or error}")
            continue
        if stat.S_ISDIR(status.st_mode):
            for full in _walk(path, problems):
                files.setdefault(os.path.realpath(full), full)
        elif not stat.S_ISREG(status.st_mode):
            problems.append(_special(path, status))
        elif path.endswith(".py") or os.path.realpath(path).endswith(".py"):
            files.setdefault(os.path.realpath(path), os.path.normpath(path))
    return sorted(files.values()), problems


def _special(path: str, status: os.stat_result) -> str:
    mode = status.st_mode
    kind = (
        "a FIFO"
        if stat.S_ISFIFO(mode)
        else "a character device"
        if stat.S_ISCHR(mode)
        else "a block device"
        if stat.S_ISBLK(mode)
        else "a socket"
        if stat.S_ISSOCK(mode)
        else "a special file"
    )
    return f"{path}: not a regular file ({kind}): skipped"


def _walk(root: str, problems: list[str]) -> Iterator[str]:
    def unreadable(error: OSError) -> None:
        problems.append(f"{error.filename}: cannot read directory: {error.strerror or error}")

    for directory, dirs, names in os.walk(root, onerror=unreadable):
        dirs[:] = sorted(
            d
            for d in dirs
            if not either_way(SKIPPED_DIRS, d)
            and not os.path.islink(os.path.join(directory, d))
            and not os.path.exists(os.path.join(directory, d, "pyvenv.cfg"))
        )
        for name in names:
            if not name.endswith(".py"):
                continue
            full = os.path.normpath(os.path.join(directory, name))
            try:
                status = os.lstat(full)
            except OSError:
                continue  # gone meanwhile
            if stat.S_ISREG(status.st_mode):
                yield full
            elif not stat.S_ISLNK(status.st_mode):
                problems.append(_special(full, status))


def decode(data: bytes) -> Decoded:
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return Decoded(data.decode(encoding), encoding)
    except (SyntaxError, UnicodeDecodeError, LookupError) as error:
        raise UnreadableSource(f"cannot decode: {error}") from error


def tree_of(data: bytes) -> ast.Module | None:
    """The tree of a file's bytes (``trees.parse`` of its decoded text), None when they do not
    decode or parse."""
    try:
        return trees.parse(decode(data).text)
    except (UnreadableSource, SyntaxError, ValueError, RecursionError):
        return None


def read_bytes(path: str) -> bytes:
    """The bytes of the regular file ``path`` (anything else is never read: a FIFO would
    block, a device never end)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as handle:
            status = os.fstat(fd)
            if not stat.S_ISREG(status.st_mode):
                raise UnreadableSource(_special(path, status).partition(": ")[2])
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
        return tree_of(self.data)


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
