"""Stage three, per file: the decided rewrites, the markers and the imports they need, made
from the plan alone (nothing here parses). Findings keep their input positions; where a
finding has a marker, its offset in the new text goes to the next stage (``tidy``), which
reads the new text, removes the FSDP1 values and imports nothing reads any more and settles
the markers' lines.
"""

from __future__ import annotations

from dataclasses import dataclass

from fsdp2_port.codemods import imports, markers
from fsdp2_port.codemods.findings import Action, Finding, Severity
from fsdp2_port.codemods.plan import (
    Decisions,
    FilePlan,
    Marking,
    NeededImport,
    Reason,
    Rewrite,
    Scope,
    Site,
)
from fsdp2_port.codemods.text import (
    Edit,
    LineIndex,
    OverlappingEdits,
    apply_tracked,
    forward,
    without_subsumed,
)


class InternalError(RuntimeError):
    """The rewrite would not parse or its edits collide: the file is left untouched."""


@dataclass
class Applied:
    """The new text, its edits (``starts``: where each landed), the findings (marker lines not
    yet known) and, per finding with a marker, the offset of that marker's line."""

    text: str
    edits: list[Edit]
    starts: list[int]
    findings: list[Finding]
    marker_offsets: dict[int, int]  # index in findings -> offset in text


@dataclass
class _Outcome:
    site: Site
    severity: Severity
    action: Action
    message: str
    marked: bool
    rewrite: Rewrite | None = None


def apply_plan(text: str, plan: FilePlan, decisions: Decisions) -> Applied:
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
            entries = marks.setdefault(site.at.anchor, [])
            if all(code != site.code for code, _, _ in entries):
                entries.append((site.code, site.at.indent, outcome.message))

    import_edits = imports.additions(needed, plan.imported, lines)
    marker_edits, marker_codes = _marker_edits(_dedented(marks, edits, lines), lines)
    round1 = [*import_edits, *marker_edits, *without_subsumed(edits)]
    try:
        new, starts = apply_tracked(text, round1)
    except OverlappingEdits as error:
        raise InternalError(f"two rewrites touch the same code ({error})") from error
    offsets = {  # (anchor, code) -> offset of its marker line in the new text
        (anchor, code): forward(offset, round1)
        for anchor in marks
        for code, offset in markers.existing_above(lines, anchor).items()
    }
    first_marker = len(import_edits)
    newline = lines.newline()  # what the marker lines end with (CRLF, CR or LF)
    for index, edit in enumerate(marker_edits):
        at = starts[first_marker + index]
        for code in marker_codes[index]:  # one line each, in order
            offsets[(edit.start, code)] = at
            at = new.index(newline, at) + len(newline)
    findings: list[Finding] = []
    marker_offsets: dict[int, int] = {}
    for o in outcomes:
        if o.marked and (o.site.at.anchor, o.site.code) in offsets:
            marker_offsets[len(findings)] = offsets[(o.site.at.anchor, o.site.code)]
        findings.append(
            Finding(
                o.site.at.path,
                o.site.at.line,
                o.site.at.column,
                o.site.code,
                o.message,
                o.severity,
                o.action,
                None,
            )
        )
    return Applied(new, round1, starts, findings, marker_offsets)


def _outcome(site: Site, decisions: Decisions) -> _Outcome | None:
    """What happens to a site: rewritten, rewritten the FSDP1 way, marked, or nothing."""
    if site.marking is Marking.SILENT or not decisions.about_fsdp1:
        return None
    rewrite, fallback = site.forms.rewrite, site.forms.fallback
    if decisions.is_rewritten(site) and rewrite is not None:
        severity: Severity = "review" if rewrite.review else "safe"
        return _Outcome(site, severity, "rewritten", rewrite.message, rewrite.review, rewrite)
    if fallback is not None:
        severity = "review" if fallback.review else "safe"
        return _Outcome(site, severity, "rewritten", fallback.message, fallback.review, fallback)
    reason = decisions.reasons.get(site.key, Reason(""))
    if not site.message:
        return None  # it has something to say only where it is rewritten
    if site.marking is Marking.QUIET and reason.model_stays:
        return None
    if site.requirement == "ANY":
        return None  # a form right on any model, not needed: no model of the run migrates
    stays_with_its_models = reason.model_stays and site.constructor is None
    if (site.marking is Marking.FSDP1_ONLY or stays_with_its_models) and not decisions.migrating:
        return None  # right while its models stay FSDP1, and every model of the run does
    if site.scope is Scope.BEHIND_TEST and not site.reach.ties:
        return None  # FSDP1 code behind an FSDP1 type test: no FSDP2 model gets there
    message = site.message + (f" ({reason.text})" if reason.text else "")
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
