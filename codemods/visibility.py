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
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from codemods import programs, sources

_PRIVATE_WORD = re.compile(rb"\b_\w+")
_WORD = re.compile(rb"\b[A-Za-z_]\w*")
_STAR_IMPORT = re.compile(rb"^[ \t]*from[ \t]+[.\w]*?(\w+)[ \t]+import[ \t]+\*", re.MULTILINE)
#: ``.x`` (an attribute read) or ``"x"`` / ``'x'`` (a name for ``getattr``).
_ATTRIBUTE = re.compile(rb"\.[ \t]*([A-Za-z_]\w*)|[\"']([A-Za-z_]\w*)[\"']")
#: ``x.word``, as ``(x, word)``.
_AFTER = re.compile(rb"(\w+)\.[ \t]*(?=([A-Za-z_]\w*))")
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
    #: ``getattr``): an instance of its classes may be read there.
    attributes_shared: frozenset[str] = frozenset()

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
    ``programs.entry_scripts``; ``whole_program``: nothing outside them imports them)."""
    paths = list(paths)
    pattern = _WORD if whole_program else _PRIVATE_WORD
    words: dict[str, set[str]] = {}
    naming: dict[str, set[str]] = {}  # a word -> the files that mention it (stems included)
    starred: set[str] = set()
    relative: set[str] = set()  # files with ``from . import``
    mentions: dict[str, _Mentions] = {}
    as_attribute: dict[str, set[str]] = {}  # a word -> the files that read it as ``.x``/``"x"``
    for path in paths:
        try:
            data = sources.read_bytes(path)
        except sources.UnreadableSource:
            data = b""
        every = Counter(_WORD.findall(data))
        found = every if whole_program else pattern.findall(data)
        words[path] = {w.decode("utf-8", "replace") for w in found}
        for word in every:
            naming.setdefault(word.decode("utf-8", "replace"), set()).add(path)
        read = _ATTRIBUTE.findall(data)
        for dotted, quoted in read:
            as_attribute.setdefault((dotted or quoted).decode("utf-8", "replace"), set()).add(path)
        mentions[path] = _Mentions(every, Counter(d for d, _ in read if d), data)
        starred.update(m.decode("utf-8", "replace") for m in _STAR_IMPORT.findall(data))
        if _PACKAGE_IMPORT.search(data):
            relative.add(path)
    out = {}
    for path in paths:
        stem = _stem(path)
        # the other files that may import from this one
        parent = _parent(path)
        importers = {
            other for other in naming.get(stem, set()) if mentions[other].names_module(stem, parent)
        } | (relative if _is_package(path) else set())
        importers.discard(path)
        # a module another file star-imports shares every name it has
        everything = whole_program and stem in starred
        shared = frozenset(
            w for w in words[path] if everything or not naming.get(w, set()).isdisjoint(importers)
        )
        elsewhere = (
            frozenset(w for w in words[path] if len(naming[w]) > 1)
            if whole_program
            else frozenset()
        )
        attributes = frozenset(w for w in words[path] if as_attribute.get(w, set()) - {path})
        out[path] = Visibility(path in entry, shared, whole_program, elsewhere, attributes)
    return out


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
    """How a file mentions words: ``plain``, somewhere not after a dot (``import fsdp``, ``from
    pkg import fsdp``); after a dot with no word before it (``from .fsdp import``); after
    ``x.`` (``(x, word)`` pairs, found when first asked)."""

    def __init__(self, every: Counter[bytes], dotted: Counter[bytes], data: bytes) -> None:
        self.plain = frozenset(w for w, n in every.items() if n > dotted[w])
        self.dotted = dotted
        self.data = data
        self._pairs: set[tuple[bytes, bytes]] | None = None
        self._after: Counter[bytes] = Counter()

    def names_module(self, stem: str, parent: str) -> bool:
        """Whether the file names the module ``stem`` of the package ``parent``: not as another
        package's (``torch.distributed.fsdp`` for a ``fsdp.py``)."""
        name = stem.encode()
        if name in self.plain:
            return True
        if not self.dotted[name]:
            return False
        if self._pairs is None:
            pairs = _AFTER.findall(self.data)
            self._pairs = set(pairs)
            self._after = Counter(word for _, word in pairs)
        return (parent.encode(), name) in self._pairs or self.dotted[name] > self._after[name]


def _is_package(path: str) -> bool:
    return path.replace("\\", "/").rsplit("/", 1)[-1] == "__init__.py"


def of_text(text: str) -> Visibility:
    """A text in a run of its own: an entry script when it has a main guard."""
    return Visibility(programs.has_main_guard(text.encode("utf-8", "surrogateescape")))
