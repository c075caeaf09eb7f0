"""Stage four, per file: the new text read once per round. It must parse (or the file stays as
it was); FSDP1 values the migration left unread go (F2P012) and FSDP1 values only the readers read
are written without FSDP1 (F2P013), then, read again, FSDP1 imports nothing reads any more (F2P001);
the markers' lines are settled."""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace

from codemods import dead_values, imports, markers, reader_values
from codemods.apply import Applied, InternalError
from codemods.findings import Finding
from codemods.names import Names
from codemods.text import Edit, LineIndex, OverlappingEdits, apply, apply_tracked, back, forward
from codemods.visibility import Visibility


def tidy(
    original: str,
    applied: Applied,
    path: str,
    module_name: str = "",
    is_package_init: bool = False,
    *,
    reexports: Mapping[str, str] | None = None,
    seen: Visibility | None = None,
    removes_imports: bool = True,
    removes_dead_values: bool = True,
    writes_reader_values: bool = True,
    accepts: reader_values.Across | None = None,
    renames: Mapping[str, str] | None = None,
) -> tuple[str, list[Finding]]:
    """The final text and every finding, sorted by input position.

    Two rounds at most, each on a text parsed once: dead FSDP1 value bindings and values only
    readers read (a value no one reads may be a dead binding's: that one is removed, not
    written), then unused FSDP1 imports on the text without them (their reads are gone with
    them).
    """
    lines = applied_lines = LineIndex(applied.text)
    names = Names(
        _parsed(applied.text, "the rewrite would not parse"),
        module_name,
        reexports=reexports,
        seen=seen,
        renames=renames,
    )
    dead = (
        dead_values.find(names, applied_lines, original, applied.edits, applied.starts)
        if removes_dead_values
        else []
    )
    written = reader_values.find(names, applied_lines, accepts) if writes_reader_values else []
    # a value no one reads may also be a dead binding's: removing it is the one edit
    removed = [applied_lines.span(d.statement) for d in dead]
    written = [
        w for w in written if not any(a <= applied_lines.start(w.node) < b for a, b in removed)
    ]
    needed = [needed for w in written for needed in w.imports]
    added = (
        imports.additions(needed, imports.importing_scopes(names, applied_lines), applied_lines)
        if needed
        else []
    )
    cleared = sorted(
        [dead_values.removal(applied_lines, d) for d in dead]
        + [reader_values.edit(applied_lines, w) for w in written]
        + reader_values.annotation_edits(names, applied_lines, written)
        + added,
        key=lambda e: e.start,
    )
    try:
        text, cleared_starts = apply_tracked(applied.text, cleared)
    except OverlappingEdits as error:  # the file stays as it was, the run goes on
        raise InternalError(f"two clean-ups touch the same code ({error})") from error
    if cleared:
        lines = LineIndex(text)
        names = Names(
            _parsed(text, "the removal of unread FSDP1 values would not parse"),
            module_name,
            reexports=reexports,
            seen=seen,
            renames=renames,
        )
    unused: list[tuple[ast.stmt, ast.alias]] = []
    left: list[tuple[ast.stmt, ast.alias]] = []
    if removes_imports:
        unused, left = imports.unused(
            names, text, original, is_package_init, markers.ignored_lines(text)
        )
    removals = imports.removals(lines, names, unused + left)
    final = apply(text, removals) if removals else text
    if removals:
        _parsed(final, "the import clean-up would not parse")
    final_lines = LineIndex(final)
    findings = [
        replace(
            f,
            marker_line=final_lines.line_of(_forward(applied.marker_offsets[i], cleared, removals)),
        )
        if i in applied.marker_offsets
        else f
        for i, f in enumerate(applied.findings)
    ]
    input_lines = LineIndex(original)
    for item in dead:
        start = back(applied_lines.start(item.target), applied.edits, applied.starts)
        findings.append(_finding(path, input_lines, start, dead_values.CODE, item.message()))
    for value in written:
        start = _input_offset(original, applied, applied_lines, value.node)
        findings.append(_finding(path, input_lines, start, reader_values.CODE, value.message()))
    for what, removed_imports in (
        ("unused FSDP1 import", unused),
        ("import the migration left unused", left),
    ):
        for statement, alias in removed_imports:
            start = back(
                back(lines.start(alias), cleared, cleared_starts), applied.edits, applied.starts
            )
            message = f"{what} {_imported_name(statement, alias)} removed"
            findings.append(_finding(path, input_lines, start, imports.CODE, message))
    findings.sort(key=lambda f: (f.line, f.column, f.code, f.message))
    return final, findings


def _parsed(text: str, failure: str) -> ast.Module:
    """``text`` parsed, or an internal error saying ``failure`` (the file stays as it was)."""
    try:
        return ast.parse(text)
    except SyntaxError as error:
        raise InternalError(f"{failure} ({error.msg}, line {error.lineno})") from error


def _input_offset(original: str, applied: Applied, lines: LineIndex, node: ast.AST) -> int:
    """Where ``node`` of the applied text was in the input: through the edits, or, for a node a
    rewrite moved (its text copied into a replacement), the input's nearest copy of its text."""
    offset = lines.start(node)
    moved = any(
        start <= offset < start + len(edit.replacement)
        for edit, start in zip(applied.edits, applied.starts)
    )
    estimate = back(offset, applied.edits, applied.starts)
    if not moved:
        return estimate
    text = lines.source(node)
    copies = [m.start() for m in re.finditer(re.escape(text), original)]
    return min(copies, key=lambda i: abs(i - estimate), default=estimate)


def _forward(offset: int, *rounds: Sequence[Edit]) -> int:
    """Where an offset of the applied text lands after each round of edits."""
    for edits in rounds:
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


def _imported_name(statement: ast.stmt, alias: ast.alias) -> str:
    if isinstance(statement, ast.ImportFrom):
        return f"{statement.module}.{alias.name}"
    return alias.name
