"""Stage four, per file: the new text read once. It must parse (or the file stays as it was);
FSDP1 imports nothing reads any more go (F2P001); the markers' lines are settled."""

from __future__ import annotations

import ast
from dataclasses import replace

from codemods import imports, markers
from codemods.apply import Applied, InternalError
from codemods.findings import Finding
from codemods.names import Names
from codemods.text import LineIndex, apply, back, forward


def tidy(
    original: str,
    applied: Applied,
    path: str,
    module_name: str = "",
    is_package_init: bool = False,
    *,
    removes_imports: bool = True,
) -> tuple[str, list[Finding]]:
    """The final text and every finding, sorted by input position."""
    try:
        tree = ast.parse(applied.text)
    except SyntaxError as error:
        raise InternalError(
            f"the rewrite would not parse ({error.msg}, line {error.lineno})"
        ) from error
    lines = LineIndex(applied.text)
    names = Names(tree, module_name)
    unused = []
    if removes_imports:
        unused = imports.unused_fsdp1(names, is_package_init, markers.ignored_lines(applied.text))
    removals = imports.removals(lines, names, unused)
    final = apply(applied.text, removals) if removals else applied.text
    if removals:
        try:
            ast.parse(final)
        except SyntaxError as error:
            raise InternalError(f"the import clean-up would not parse ({error.msg})") from error
    final_lines = LineIndex(final)
    findings = [
        replace(f, marker_line=final_lines.line_of(forward(applied.marker_offsets[i], removals)))
        if i in applied.marker_offsets
        else f
        for i, f in enumerate(applied.findings)
    ]
    input_lines = LineIndex(original)
    for statement, alias in unused:
        start = back(lines.start(alias), applied.edits, applied.starts)
        findings.append(
            Finding(
                path,
                input_lines.line_of(start),
                input_lines.column(start),
                imports.CODE,
                f"unused FSDP1 import {_imported_name(statement, alias)} removed",
                "safe",
                "rewritten",
            )
        )
    findings.sort(key=lambda f: (f.line, f.column, f.code, f.message))
    return final, findings


def _imported_name(statement: ast.stmt, alias: ast.alias) -> str:
    if isinstance(statement, ast.ImportFrom):
        return f"{statement.module}.{alias.name}"
    return alias.name
