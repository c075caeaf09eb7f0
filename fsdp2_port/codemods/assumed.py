"""The assumptions a file's analysis takes: decisions resting on a name (a member of an entry of
an assumption kind in ``assumptions``, or a guess on how a name is spelled) rather than on what
the program does, and ``--strict``, which takes none.

One home. Every test of a name against such an entry goes through ``Assumed.takes`` or
``either_way`` (``tests/codemods/test_assumed.py`` reads the codemod's sources to keep it so):

- ``Assumed.takes``: each use states ``otherwise``, the answer the codemod gives a name it knows
  nothing about: the branch that holds or marks rather than rewrites, that keeps an unknown
  value possibly a model, that follows no value through a call it does not know. Where the
  entry answers otherwise, the decision rests on the name: that is an assumption taken,
  recorded once per (line, entry, name) for the file's plan, the report and the JSON; under
  ``--strict`` it is refused (``otherwise`` is the answer). An answer that agrees with
  ``otherwise`` is never recorded: only the tests that moved a decision count, not every
  name tested. A step of the layer's following of a value (``m.to(...)`` holds what ``m``
  holds) counts where it is taken, also when a later step settles the question the
  conservative way anyway.
- ``either_way``: an entry the codemod looks for, where a member only adds caution (a marker, a
  value followed, an effect found) and a name outside it gets what any unknown name gets, or
  where the answer changes only what a log line shows: no decision rests on the name, so
  nothing is recorded and ``--strict`` changes nothing.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from .name_lists import NameGuess, NameList


@dataclass(frozen=True, order=True)
class Assumption:
    """One assumption taken: where (``path``, 1-based ``line``), its ``kind`` (a key of
    ``assumptions.ASSUMPTIONS``), the registry ``entry`` it rests on, and the ``name`` of the
    program it was taken on."""

    path: str
    line: int
    kind: str
    entry: str
    name: str

    def as_dict(self) -> dict[str, object]:
        """The record ``--format json``/``jsonl`` prints (``"assumption"`` tells it apart from a
        finding and an error)."""
        return {
            "path": self.path,
            "line": self.line,
            "assumption": self.kind,
            "list": self.entry,
            "name": self.name,
        }

    def as_text(self) -> str:
        return f"{self.path}:{self.line}: assumption {self.kind} ({self.entry}): {self.name}"


class Assumed:
    """The assumptions one file's analysis takes (``taken``), or refuses with ``strict``."""

    def __init__(self, path: str, strict: bool = False) -> None:
        self.path = path
        self.strict = strict
        self.taken: set[Assumption] = set()

    def takes(
        self,
        entry: NameList | NameGuess,
        name: str,
        at: ast.AST,
        *,
        otherwise: bool = False,
        member: bool | None = None,
    ) -> bool:
        """Whether ``name`` (read at ``at``) is in ``entry``, as the decision there takes it:
        ``otherwise`` when the answer would rest on the name and the run is strict. ``member``:
        the answer, where the entry is not matched by equality (a word in an identifier, a
        module prefix, a guess on the spelling)."""
        if member is None:
            assert isinstance(entry, NameList), f"{entry.name}: a guess needs its answer"
            member = name in entry
        answer = member
        if answer == otherwise:
            return answer
        if self.strict:
            return otherwise
        line = getattr(at, "lineno", 0)
        self.taken.add(Assumption(self.path, line, entry.kind, entry.name, name))
        return answer

    def recorded(self) -> tuple[Assumption, ...]:
        """What was taken, in order of line."""
        return tuple(sorted(self.taken))


def either_way(entry: NameList, name: str, member: bool | None = None) -> bool:
    """Whether ``name`` is in ``entry``, an entry whose answer is safe either way (see the
    module's docstring): nothing is recorded. ``member``: as for ``Assumed.takes``."""
    return name in entry if member is None else member
