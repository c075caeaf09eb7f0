"""What a rule is: its codes (``Code``) and the protocol its class follows, by the stage it
runs in (``STAGE``):

- ``"analysis"`` (``Rule``): it adds sites to a file's plan, before the run decides;
- ``"after_apply"`` (``Fixer``): once per file, on the text every decided rewrite made, parsed
  once for all the fixers of the stage, in the registry's order; a fixer leaves alone what an
  earlier one of the stage removes (``Tidying.removed``);
- ``"after_fixes"`` (``Fixer``): on the text the ``after_apply`` fixers leave, parsed again.

A leaf: it imports nothing of ``codemods`` at run time, so any stage may import it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Protocol

if TYPE_CHECKING:
    from fsdp2_port.codemods.analysis import FileAnalysis
    from fsdp2_port.codemods.apply import Applied
    from fsdp2_port.codemods.names import Names
    from fsdp2_port.codemods.plan import NeededImport
    from fsdp2_port.codemods.rules.reader_values.across import Across
    from fsdp2_port.codemods.text import Edit, LineIndex

#: The stages a rule runs in, in the order a file goes through them.
STAGES = ("analysis", "after_apply", "after_fixes")


@dataclass(frozen=True)
class Code:
    """One finding code: ``summary`` for ``--list-rules``; ``topic``, ``rewritten`` and
    ``marked`` for the rules table of ``docs/migrate.md`` (markdown, "—" for none);
    ``proven_by``, for a code whose rewrites are labelled safe, the tests (pytest node ids)
    that run its lines before and after the rewrite and find the same values."""

    summary: str
    topic: str
    rewritten: str
    marked: str
    proven_by: tuple[str, ...] = ()


class Rule(Protocol):
    """A rule of the ``"analysis"`` stage."""

    STAGE: ClassVar[str]
    #: The code of the rule's main sites; ``CODES`` lists every code its sites carry.
    CODE: ClassVar[str]
    CODES: ClassVar[dict[str, Code]]
    #: Codes whose sites this rule's cases need besides its own (models come from F2P002).
    NEEDS: ClassVar[tuple[str, ...]]
    #: APIs the rule's rewrites call -> ``module:attribute`` (checked against installed torch).
    EMITS: ClassVar[dict[str, str]]

    def analyze(self, analysis: FileAnalysis, /) -> None: ...


@dataclass(frozen=True)
class Tidying:
    """What a fixer reads: the text of its stage (``names``, ``lines``), how it came from the
    input ``original`` (``applied``: the rewrites; ``to_input``: where an offset of the
    stage's text was in the input) and, within the stage, the spans of the text that earlier
    fixers remove."""

    original: str
    applied: Applied
    names: Names
    lines: LineIndex
    to_input: Callable[[int], int]
    is_package_init: bool = False
    #: What other files' functions and attribute reads take without FSDP1 (F2P013's).
    accepts: Across | None = None
    removed: tuple[tuple[int, int], ...] = ()


@dataclass
class Fixes:
    """What a fixer changes: its edits of the stage's text, the imports they need, its
    findings (input offset, message) and the spans it removes."""

    edits: list[Edit] = field(default_factory=list)
    imports: list[NeededImport] = field(default_factory=list)
    findings: list[tuple[int, str]] = field(default_factory=list)
    removed: list[tuple[int, int]] = field(default_factory=list)


class Fixer(Protocol):
    """A rule of the ``"after_apply"`` or ``"after_fixes"`` stage."""

    STAGE: ClassVar[str]
    CODE: ClassVar[str]
    CODES: ClassVar[dict[str, Code]]
    NEEDS: ClassVar[tuple[str, ...]]
    EMITS: ClassVar[dict[str, str]]

    def fix(self, tidying: Tidying, /) -> Fixes: ...
