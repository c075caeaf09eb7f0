"""Which module-level names only their own module reads, decided once for the whole run.

A module-level name is its module's own (a rewrite may respell or remove it) when no other
module can read it:

- any name of an entry script (``programs.entry_scripts``: it runs as its own program and
  no module of the run imports it);
- a private name (``_NAME``) that no other file of the run mentions: ``from lib import _MAP``
  or ``lib._MAP`` elsewhere reads it.

Code outside the run is trusted to keep to the convention: it imports neither an entry
script nor a private name.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from codemods import programs, sources

_PRIVATE_WORD = re.compile(rb"\b_\w+")


@dataclass(frozen=True)
class Visibility:
    """One module's answer: ``entry_script``; ``shared``: its private names another file of
    the run mentions."""

    entry_script: bool = False
    shared: frozenset[str] = frozenset()

    def own(self, name: str) -> bool:
        """Whether the module-level ``name`` is read only by its own module."""
        return self.entry_script or (name.startswith("_") and name not in self.shared)


def find(paths: Iterable[str], entry: frozenset[str]) -> dict[str, Visibility]:
    """Each path's ``Visibility`` in a run of these files (``entry``: its entry scripts,
    ``programs.entry_scripts``)."""
    paths = list(paths)
    words: dict[str, set[str]] = {}
    for path in paths:
        try:
            data = sources.read_bytes(path)
        except sources.UnreadableSource:
            data = b""
        words[path] = {w.decode("utf-8", "replace") for w in _PRIVATE_WORD.findall(data)}
    files_naming = Counter(word for found in words.values() for word in found)
    return {
        path: Visibility(path in entry, frozenset(w for w in words[path] if files_naming[w] > 1))
        for path in paths
    }


def of_text(text: str) -> Visibility:
    """A text in a run of its own: an entry script when it has a main guard."""
    return Visibility(programs.has_main_guard(text.encode("utf-8", "surrogateescape")))
