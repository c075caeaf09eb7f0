"""Finding, reading and atomically replacing Python files.

- Discovery skips symlinks, non-``.py`` files and tool/venv/build directories, except a path
  named explicitly on the command line; results are sorted, so runs are deterministic.
- Reading keeps what writing needs to restore byte for byte: the encoding (PEP 263 cookie or
  UTF-8 BOM) and, because text is decoded without newline translation, CRLF line ends.
- Writing goes to a temporary file in the same directory, takes the original's mode, and is
  moved over the original with ``os.replace``: readers see the old or the new file, never half.
"""

from __future__ import annotations

import io
import os
import stat
import tempfile
import tokenize
from dataclasses import dataclass

SKIPPED_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        ".venv",
        "venv",
        "build",
        "site-packages",
        "__pycache__",
        "node_modules",
        ".tox",
        ".nox",
        ".eggs",
    }
)


@dataclass(frozen=True)
class Source:
    text: str
    encoding: str


class UnreadableSource(Exception):
    """The file cannot be read or decoded as Python source."""


def discover(paths: list[str]) -> tuple[list[str], list[str]]:
    """``(files, problems)``: the ``.py`` files under ``paths`` and one message per bad path."""
    files: set[str] = set()
    problems = []
    for path in paths:
        if os.path.islink(path):
            continue
        if os.path.isfile(path):
            if path.endswith(".py"):
                files.add(os.path.normpath(path))
        elif os.path.isdir(path):
            files.update(_walk(path))
        else:
            problems.append(f"{path}: no such file or directory")
    return sorted(files), problems


def _walk(root: str):
    for directory, dirs, names in os.walk(root):
        dirs[:] = sorted(
            d
            for d in dirs
            if d not in SKIPPED_DIRS
            and not os.path.islink(os.path.join(directory, d))
            and not os.path.exists(os.path.join(directory, d, "pyvenv.cfg"))
        )
        for name in names:
            full = os.path.join(directory, name)
            if name.endswith(".py") and not os.path.islink(full):
                yield os.path.normpath(full)


def decode(data: bytes) -> Source:
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return Source(data.decode(encoding), encoding)
    except (SyntaxError, UnicodeDecodeError, LookupError) as error:
        raise UnreadableSource(f"cannot decode: {error}") from error


def read_bytes(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as error:
        raise UnreadableSource(f"cannot read: {error.strerror or error}") from error


def write_all(outputs: list[tuple[str, str, str]]) -> str | None:
    """Replace each ``(path, text, encoding)``, keeping modes: every new file is written and
    synced beside its original first, then all are renamed over them. A failure while staging
    replaces nothing (its message is returned); no temporary file outlives the call."""
    staged: list[tuple[str, str]] = []
    try:
        for path, text, encoding in outputs:
            staged.append((_stage(path, text.encode(encoding)), path))
    except OSError as error:
        for temporary, _ in staged:
            os.unlink(temporary)
        return f"cannot write {error.filename or ''}: {error.strerror or error}".replace("  ", " ")
    for temporary, path in staged:
        os.replace(temporary, path)
    return None


def _stage(path: str, data: bytes) -> str:
    """A synced copy of ``data`` next to ``path``, with its mode: the temporary's path."""
    mode = stat.S_IMODE(os.stat(path).st_mode)
    directory, name = os.path.split(os.path.abspath(path))
    fd, temporary = tempfile.mkstemp(prefix=f".{name}.", suffix=".fsdp2-port.tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, mode)
    except BaseException:
        os.unlink(temporary)
        raise
    return temporary
