"""Which module-level names only their own module reads, decided once for the whole run.

A module-level name is its module's own (a rewrite may respell or remove it) when no other
module can read it:

- any name of an entry script (``programs.entry_scripts``: it runs as its own program and
  no module of the run imports it);
- a private name (``_NAME``) that no other file of the run mentions: ``from lib import _MAP``
  or ``lib._MAP`` elsewhere reads it. A file that never names the module (its stem: ``lib``;
  a package's name for its ``__init__``; not as another package's, ``torch.distributed.fsdp``
  for a ``fsdp.py``) cannot import from it, so its words do not count, unless it imports from
  a package relative to itself (``from . import _MAP``: every ``__init__``'s names).

Code outside the run is trusted to keep to the convention: it imports neither an entry
script nor a private name.

With ``--whole-program`` the user says more: the files given are the whole program (an
application, not a library others import), so any module-level name no other file of the run
mentions is its module's own, unless another file star-imports a module of that name.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from fsdp2_port.codemods import programs, sources

_WORD = re.compile(rb"\b[A-Za-z_]\w*")
_STAR_IMPORT = re.compile(rb"^[ \t]*from[ \t]+[.\w]*?(\w+)[ \t]+import[ \t]+\*", re.MULTILINE)
#: ``.x`` (an attribute read); ``"x"`` / ``'x'`` (a name for ``getattr``).
_DOTTED = re.compile(rb"\.[ \t]*([A-Za-z_]\w*)")
_QUOTED = re.compile(rb"[\"']([A-Za-z_]\w*)[\"']")
#: A line that is a comment alone (StableCascade's ``# core.fsdp_defaults[...] = ...``): no read.
_COMMENT_LINE = re.compile(rb"^[ \t]*#[^\n]*", re.MULTILINE)
#: The module of a relative import, its dots aside (``from ..pkg.fsdp import``: ``pkg.fsdp``).
_RELATIVE_IMPORT = re.compile(rb"^[ \t]*from[ \t]+\.+([\w.]+)", re.MULTILINE)
#: ``from . import x``, ``from .. import x``: a name of a package ``__init__`` by no stem.
_PACKAGE_IMPORT = re.compile(rb"^[ \t]*from[ \t]+\.+[ \t]+import\b", re.MULTILINE)


@dataclass(frozen=True)
class Visibility:
    """One module's answer: ``entry_script``; ``shared``: its names another file of the run
    mentions (the private ones; every one with ``whole_program``); ``whole_program``: its
    public names are its own too, unless ``shared``."""

    entry_script: bool = False
    shared: frozenset[str] = frozenset()
    whole_program: bool = False
    #: With ``whole_program``: its words some other file mentions, whether or not it names
    #: this module (a value another file passes into this one is spelled there).
    elsewhere: frozenset[str] = frozenset()
    #: Its words another file reads as an attribute (``.x``) or spells as a string (``"x"``:
    #: ``getattr``), with how many files do: an instance of its classes may be read there.
    attributes_shared: Mapping[str, int] = field(default_factory=dict)

    def spelled_only_here(self, word: str) -> bool:
        """With ``whole_program``: no other file of the program mentions ``word``."""
        return self.whole_program and word not in self.elsewhere

    def own(self, name: str) -> bool:
        """Whether the module-level ``name`` is read only by its own module."""
        if self.entry_script:
            return True
        return (name.startswith("_") or self.whole_program) and name not in self.shared

    def own_attribute(self, name: str) -> bool:
        """Whether an attribute ``name`` of this module's instances is read only here: no other
        file reads ``.name`` or spells ``"name"`` (a local of that name elsewhere is no read
        of it)."""
        if self.entry_script:
            return True
        return (name.startswith("_") or self.whole_program) and name not in self.attributes_shared


def find(
    paths: Iterable[str], entry: frozenset[str], *, whole_program: bool = False
) -> dict[str, Visibility]:
    """Each path's ``Visibility`` in a run of these files (``entry``: its entry scripts,
    ``programs.entry_scripts``; ``whole_program``: nothing outside them imports them). Words
    stay bytes until a ``Visibility`` holds them."""
    paths = list(paths)
    words: dict[str, set[bytes]] = {}  # the words a file may own (private ones, or all)
    naming: dict[bytes, set[str]] = defaultdict(set)  # a word -> the files that mention it
    as_attribute: dict[bytes, set[str]] = defaultdict(set)  # read as ``.x`` / ``"x"`` there
    starred: set[bytes] = set()
    relative: set[str] = set()  # files with ``from . import``
    mentions: dict[str, _Mentions] = {}
    stems = frozenset(_stem(path).encode() for path in paths)
    for path in paths:
        try:
            data = sources.read_bytes(path)
        except sources.UnreadableSource:
            data = b""
        every = Counter(_WORD.findall(data))
        words[path] = set(every) if whole_program else {w for w in every if w[:1] == b"_"}
        for word in every if whole_program else words[path] | (stems & every.keys()):
            naming[word].add(path)
        dotted = Counter(_DOTTED.findall(data))
        code = _COMMENT_LINE.sub(b"", data)
        for word in (*_DOTTED.findall(code), *_QUOTED.findall(code)):
            as_attribute[word].add(path)
        mentions[path] = _Mentions(stems, every, dotted, data)
        starred.update(_STAR_IMPORT.findall(data))
        if _PACKAGE_IMPORT.search(data):
            relative.add(path)
    out = {}
    for path in paths:
        stem = _stem(path)
        name = stem.encode()
        # the other files that may import from this one
        parent = _parent(path)
        importers = {
            other for other in naming.get(name, ()) if mentions[other].names_module(stem, parent)
        } | (relative if _is_package(path) else set())
        importers.discard(path)
        # a module another file star-imports shares every name it has
        everything = whole_program and name in starred
        own = words[path]
        shared = {w for w in own if everything or not naming[w].isdisjoint(importers)}
        elsewhere = {w for w in own if len(naming[w]) > 1} if whole_program else set()
        elsewhere_read = {w: as_attribute.get(w, set()) - {path} for w in own}
        attributes = {w.decode("utf-8", "replace"): len(f) for w, f in elsewhere_read.items() if f}
        out[path] = Visibility(
            path in entry, _text(shared), whole_program, _text(elsewhere), attributes
        )
    return out


def _text(words: set[bytes]) -> frozenset[str]:
    return frozenset(w.decode("utf-8", "replace") for w in words)


def _stem(path: str) -> str:
    """The last part of a file's module name (a package's ``__init__``: the package's)."""
    parts = path.replace("\\", "/").removesuffix(".py").split("/")
    return parts[-2] if parts[-1] == "__init__" and len(parts) > 1 else parts[-1]


def _parent(path: str) -> str:
    """The name of the package directory a module's file is in (its ``__init__``: the one
    above)."""
    parts = path.replace("\\", "/").split("/")
    parts = parts[:-1] if parts[-1] == "__init__.py" else parts
    return parts[-2] if len(parts) > 1 else ""


class _Mentions:
    """How a file mentions the run's module stems: somewhere not after a dot (``import fsdp``,
    ``from pkg import fsdp``), in a relative import (``from .fsdp import``), after ``pkg.``."""

    def __init__(
        self, stems: frozenset[bytes], every: Counter[bytes], dotted: Counter[bytes], data: bytes
    ) -> None:
        mentioned = stems & every.keys()
        self.plain = frozenset(w for w in mentioned if every[w] > dotted[w])
        self.dotted = frozenset(w for w in mentioned if dotted[w])
        self.relative = frozenset(
            part for module in _RELATIVE_IMPORT.findall(data) for part in module.split(b".")
        )
        self.data = data

    def names_module(self, stem: str, parent: str) -> bool:
        """Whether the file names the module ``stem`` of the package ``parent``: not as another
        package's (``torch.distributed.fsdp`` for a ``fsdp.py``)."""
        name = stem.encode()
        if name in self.plain or name in self.relative:
            return True
        return name in self.dotted and bool(parent) and _follows(self.data, parent.encode(), name)


def _follows(data: bytes, parent: bytes, name: bytes) -> bool:
    """``parent.name`` in ``data``, both whole words."""
    needle = parent + b"." + name
    at = data.find(needle)
    while at >= 0:
        end = at + len(needle)
        if not _word_byte(data[end : end + 1]) and not _word_byte(data[at - 1 : at] if at else b""):
            return True
        at = data.find(needle, at + 1)
    return False


def _word_byte(byte: bytes) -> bool:
    return byte.isalnum() or byte == b"_"


def _is_package(path: str) -> bool:
    return path.replace("\\", "/").rsplit("/", 1)[-1] == "__init__.py"


def of_text(text: str) -> Visibility:
    """A text in a run of its own: an entry script when it has a main guard."""
    return Visibility(programs.has_main_guard(text.encode("utf-8", "surrogateescape")))
