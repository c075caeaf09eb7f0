"""What a rule is: its codes (``Code``) and the protocol every rule class follows (``Rule``).

A leaf: it imports nothing of ``codemods`` at run time, so any stage may import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Protocol

if TYPE_CHECKING:
    from codemods.analysis import FileAnalysis


@dataclass(frozen=True)
class Code:
    """One finding code: ``summary`` for ``--list-rules``; ``topic``, ``rewritten`` and
    ``marked`` for the rules table of ``docs/migrate.md`` (markdown, "—" for none)."""

    summary: str
    topic: str
    rewritten: str
    marked: str


class Rule(Protocol):
    #: The code of the rule's main sites; ``CODES`` lists every code its sites carry.
    CODE: ClassVar[str]
    CODES: ClassVar[dict[str, Code]]
    #: Codes whose sites this rule's cases need besides its own (models come from F2P002).
    NEEDS: ClassVar[tuple[str, ...]]
    #: APIs the rule's rewrites call -> ``module:attribute`` (checked against installed torch).
    EMITS: ClassVar[dict[str, str]]

    def analyze(self, analysis: FileAnalysis, /) -> None: ...
