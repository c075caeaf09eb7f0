"""One apply pass per file: the decided rewrites, the markers, the imports; then findings.

Round 1 makes every rewrite and marker and adds the imports they need; round 2 removes the
FSDP1 imports that round 1 left unread. Findings keep their input positions; a finding with a
marker also gets the marker's line in the output. The output must parse, or the file is left
as it was and the run says so (a bug of ours, never the user's).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from codemods import imports, markers
from codemods.findings import Action, Finding, Severity
from codemods.names import Names
from codemods.plan import Decisions, FilePlan, NeededImport, Reason, Rewrite, Site
from codemods.text import (
    Edit,
    LineIndex,
    OverlappingEdits,
    apply,
    apply_tracked,
    back,
    forward,
    without_subsumed,
)


class InternalError(RuntimeError):
    """The rewrite would not parse or its edits collide: the file is left untouched."""


@dataclass
class Applied:
    text: str
    findings: list[Finding]


@dataclass
class _Outcome:
    site: Site
    severity: Severity
    action: Action
    message: str
    marked: bool
    rewrite: Rewrite | None = None


def apply_plan(
    text: str,
    plan: FilePlan,
    decisions: Decisions,
    module_name: str = "",
    is_package_init: bool = False,
    *,
    removes_imports: bool = True,
) -> Applied:
    lines = LineIndex(text)
    edits: list[Edit] = []
    needed: list[NeededImport] = []
    marks: dict[int, list[tuple[str, str, str]]] = {}  # anchor -> (code, indent, message)
    outcomes: list[_Outcome] = []
    for site in plan.sites:
        outcome = _outcome(site, decisions)
        if outcome is None:
            continue
        outcomes.append(outcome)
        if outcome.rewrite is not None:
            edits += outcome.rewrite.edits
            needed += outcome.rewrite.imports
        if outcome.marked:
            entries = marks.setdefault(site.anchor, [])
            if all(code != site.code for code, _, _ in entries):
                entries.append((site.code, site.indent, outcome.message))

    import_edits = imports.additions(needed, Names(ast.parse(text), module_name), lines)
    marker_edits, marker_codes = _marker_edits(_dedented(marks, edits, lines), lines)
    existing = {
        (anchor, code): offset
        for anchor in marks
        for code, offset in markers.existing_above(lines, anchor).items()
    }
    round1 = [*import_edits, *marker_edits, *without_subsumed(edits)]
    try:
        first, starts = apply_tracked(text, round1)
        tree = ast.parse(first)
    except OverlappingEdits as error:
        raise InternalError(f"two rewrites touch the same code ({error})") from error
    except SyntaxError as error:
        raise InternalError(
            f"the rewrite would not parse ({error.msg}, line {error.lineno})"
        ) from error
    first_lines = LineIndex(first)
    names = Names(tree, module_name)
    unused = []
    if removes_imports:
        unused = imports.unused_fsdp1(names, is_package_init, markers.ignored_lines(first))
    round2 = imports.removals(first_lines, names, unused)
    final = apply(first, round2) if round2 else first
    if round2:
        try:
            ast.parse(final)
        except SyntaxError as error:
            raise InternalError(f"the import clean-up would not parse ({error.msg})") from error

    final_lines = LineIndex(final)
    marker_lines = {
        key: final_lines.line_of(forward(forward(at, round1), round2))
        for key, at in existing.items()
    }
    offset = len(import_edits)
    for index, edit in enumerate(marker_edits):
        line = final_lines.line_of(forward(starts[offset + index], round2))
        for step, code in enumerate(marker_codes[index]):
            marker_lines[(edit.start, code)] = line + step
    findings = [
        Finding(
            o.site.path,
            o.site.line,
            o.site.column,
            o.site.code,
            o.message,
            o.severity,
            o.action,
            marker_lines.get((o.site.anchor, o.site.code)) if o.marked else None,
        )
        for o in outcomes
    ]
    for statement, alias in unused:
        start = back(first_lines.start(alias), round1, starts)
        findings.append(
            Finding(
                plan.path,
                lines.line_of(start),
                lines.column(start),
                imports.CODE,
                f"unused FSDP1 import {_imported_name(statement, alias)} removed",
                "safe",
                "rewritten",
            )
        )
    findings.sort(key=lambda f: (f.line, f.column, f.code, f.message))
    return Applied(final, findings)


def _outcome(site: Site, decisions: Decisions) -> _Outcome | None:
    """What happens to a site: rewritten, rewritten the FSDP1 way, marked, or nothing."""
    if site.silent:
        return None
    if decisions.is_rewritten(site) and site.rewrite is not None:
        review = site.rewrite.review
        severity: Severity = "review" if review else "safe"
        return _Outcome(site, severity, "rewritten", site.rewrite.message, review, site.rewrite)
    if site.fallback is not None:
        return _Outcome(site, "safe", "rewritten", site.fallback.message, False, site.fallback)
    reason = decisions.reasons.get(site.key, Reason(""))
    if site.quiet and reason.model_stays:
        return None
    if site.requirement == "ANY":
        return None  # a form right on any model, not needed: no model of the run migrates
    if site.fsdp1_only_marker and not decisions.migrating:
        return None  # right while its models stay FSDP1, and every model of the run does
    if site.behind_test and not site.ties:
        return None  # FSDP1 code behind an FSDP1 type test: no FSDP2 model gets there
    message = site.keep_message + (f" ({reason.text})" if reason.text else "")
    return _Outcome(site, "review", "flagged", message, True)


def _dedented(
    marks: dict[int, list[tuple[str, str, str]]], edits: list[Edit], lines: LineIndex
) -> dict[int, list[tuple[str, str, str]]]:
    """Markers whose line a rewrite dedents (the body of a removed ``with``) go out with it."""
    removed = {
        e.start: e.end - e.start
        for e in edits
        if e.replacement == "" and lines.text[e.start : e.end].strip(" \t") == ""
    }
    return {
        anchor: [(c, indent[: len(indent) - removed.get(anchor, 0)], m) for c, indent, m in entries]
        for anchor, entries in marks.items()
    }


def _marker_edits(
    marks: dict[int, list[tuple[str, str, str]]], lines: LineIndex
) -> tuple[list[Edit], list[list[str]]]:
    """One insertion per anchor with its new marker lines (codes already there are skipped)."""
    newline = lines.newline()
    edits, codes = [], []
    for anchor, entries in sorted(marks.items()):
        present = markers.existing_above(lines, anchor)
        new = [(c, i, m) for c, i, m in sorted(entries) if c not in present]
        if new:
            text = "".join(
                f"{indent}{markers.text(code, message)}{newline}" for code, indent, message in new
            )
            edits.append(Edit(anchor, anchor, text))
            codes.append([c for c, _, _ in new])
    return edits, codes


def _imported_name(statement: ast.stmt, alias: ast.alias) -> str:
    if isinstance(statement, ast.ImportFrom):
        return f"{statement.module}.{alias.name}"
    return alias.name
