"""Stage four, per file: the new text read once per round. It must parse (or the file stays as
it was); then the fixer rules run by their stage (``rules.base.STAGES``, in the registry's
order): those of ``"after_apply"`` on the applied text (FSDP1 values the migration left unread
go, F2P012, and FSDP1 values only the readers read are written without FSDP1, F2P013), then,
read again, those of ``"after_fixes"`` (FSDP1 imports nothing reads any more go, F2P001); the
lines written longer than the file's line length are wrapped (``wrap``); the markers' lines
are settled."""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import partial

from fsdp2_port.codemods import imports, registry, trees, wrap
from fsdp2_port.codemods.apply import Applied, InternalError
from fsdp2_port.codemods.findings import Finding
from fsdp2_port.codemods.names import names_of
from fsdp2_port.codemods.plan import NeededImport
from fsdp2_port.codemods.rules.base import Tidying
from fsdp2_port.codemods.rules.reader_values.across import Across
from fsdp2_port.codemods.text import Edit, LineIndex, OverlappingEdits, apply_tracked, back, forward
from fsdp2_port.codemods.visibility import Visibility

#: The fixer stages, each with what its edits are (for the internal error when its text would
#: not parse).
_STAGES = (
    ("after_apply", "the removal of unread FSDP1 values"),
    ("after_fixes", "the import clean-up"),
)


def tidy(
    original: str,
    applied: Applied,
    path: str,
    module_name: str = "",
    is_package_init: bool = False,
    *,
    codes: Sequence[str] | None = None,
    reexports: Mapping[str, str] | None = None,
    seen: Visibility | None = None,
    accepts: Across | None = None,
    renames: Mapping[str, str] | None = None,
) -> tuple[str, list[Finding]]:
    """The final text and every finding, sorted by input position; ``codes``: the fixers that
    run (all when None).

    One round per fixer stage at most, each on a text parsed once: dead FSDP1 value bindings
    and values only readers read (a value no one reads may be a dead binding's: that one is
    removed, not written), then unused FSDP1 imports on the text without them (their reads are
    gone with them).
    """
    chosen = registry.select() if codes is None else codes
    lines = LineIndex(applied.text)
    names = names_of(
        _parsed(applied.text, "the rewrite would not parse"),
        module_name,
        is_package_init,
        reexports=reexports,
        seen=seen,
        renames=renames,
    )
    rounds: list[tuple[list[Edit], list[int]]] = []
    found: list[tuple[str, int, str]] = []  # (code, input offset, message)
    stages = [(work, registry.fixers_for(chosen, stage)) for stage, work in _STAGES]
    for number, (work, fixers) in enumerate(stages):
        tidying = Tidying(
            original,
            applied,
            names,
            lines,
            partial(_to_input, applied, tuple(rounds)),
            is_package_init,
            accepts,
        )
        edits: list[Edit] = []
        needed: list[NeededImport] = []
        for fixer in fixers:
            fixes = fixer.fix(tidying)
            tidying = replace(tidying, removed=(*tidying.removed, *fixes.removed))
            edits += fixes.edits
            needed += fixes.imports
            found += [(fixer.CODE, offset, message) for offset, message in fixes.findings]
        if needed:
            edits += imports.additions(needed, imports.importing_scopes(names, lines), lines)
        if not edits:
            continue
        edits.sort(key=lambda e: e.start)
        try:
            text, starts = apply_tracked(lines.text, edits)
        except OverlappingEdits as error:  # the file stays as it was, the run goes on
            raise InternalError(f"two clean-ups touch the same code ({error})") from error
        rounds.append((edits, starts))
        tree = _parsed(text, f"{work} would not parse")
        lines = LineIndex(text)
        if any(later for _, later in stages[number + 1 :]):
            names = names_of(
                tree, module_name, is_package_init, reexports=reexports, seen=seen, renames=renames
            )
    if rounds or applied.text != original:  # what the migration wrote, at the line length
        wrapped = wrap.edits(original, lines.text, wrap.line_length(path, original))
        if wrapped:
            text, starts = apply_tracked(lines.text, wrapped)
            rounds.append((wrapped, starts))
            lines = LineIndex(text)
    findings = [
        replace(f, marker_line=lines.line_of(_forward(applied.marker_offsets[i], rounds)))
        if i in applied.marker_offsets
        else f
        for i, f in enumerate(applied.findings)
    ]
    input_lines = LineIndex(original)
    findings += [
        _finding(path, input_lines, start, code, message) for code, start, message in found
    ]
    findings.sort(key=lambda f: (f.line, f.column, f.code, f.message))
    return lines.text, findings


def _parsed(text: str, failure: str) -> ast.Module:
    """``text`` parsed, or an internal error saying ``failure`` (the file stays as it was)."""
    try:
        return trees.parse(text)
    except SyntaxError as error:
        raise InternalError(f"{failure} ({error.msg}, line {error.lineno})") from error


def _to_input(
    applied: Applied, rounds: Sequence[tuple[Sequence[Edit], Sequence[int]]], offset: int
) -> int:
    """Where an offset of the text after ``rounds`` was in the input."""
    for edits, starts in reversed(rounds):
        offset = back(offset, edits, starts)
    return back(offset, applied.edits, applied.starts)


def _forward(offset: int, rounds: Sequence[tuple[Sequence[Edit], Sequence[int]]]) -> int:
    """Where an offset of the applied text lands after each round of edits."""
    for edits, _ in rounds:
        offset = forward(offset, edits)
    return offset


def _finding(path: str, input_lines: LineIndex, start: int, code: str, message: str) -> Finding:
    """A safe rewrite of the tidy stage, at input offset ``start``."""
    return Finding(
        path,
        input_lines.line_of(start),
        input_lines.column(start),
        code,
        message,
        "safe",
        "rewritten",
    )
