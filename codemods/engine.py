"""Run the selected rules over one source text: new text plus findings in output coordinates.

Each rule is its own libcst pass over the previous pass's tree. A rule reports positions in the
tree it saw; after every pass that changed the text those positions are carried forward through
a line diff, so every finding's line points into the final output (at the statement, never at a
marker line above it).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import replace

import libcst as cst
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor, RemoveImportsVisitor
from libcst.metadata import MetadataWrapper

from codemods import markers
from codemods.findings import Finding
from codemods.options import Options
from codemods.rule import AttachMarkers, RawFinding, Rule

_LINES = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")


def split_lines(text: str) -> list[str]:
    """Lines with their endings, split at libcst's line breaks only."""
    return _LINES.findall(text)


def run_rules(
    tree: cst.Module, rules: Sequence[type[Rule]], options: Options, context: CodemodContext
) -> tuple[cst.Module, list[RawFinding]]:
    """All rules over ``tree``; findings in output coordinates.

    Metadata (scopes, qualified names, positions) is computed once per version of the tree and
    shared by the passes that do not change it, a pass whose trigger strings are absent does
    not run at all, and a pass that only flags leaves its markers pending (keyed by statement)
    for the next rewriting pass or one final marker-only pass, so it changes no tree either.
    """
    findings: list[RawFinding] = []
    code = tree.code
    wrapper = MetadataWrapper(tree, unsafe_skip_copy=True)
    pending: dict[int, list[tuple[str, str]]] = {}
    for rule_class in rules:
        rule = rule_class(
            CodemodContext(filename=context.filename, full_module_name=context.full_module_name),
            options,
        )
        if not rule.prepare(code):
            continue
        rule.pending = pending
        new_tree = _apply(rule, wrapper)
        findings.extend(rule.findings)
        if not rule.touched:
            continue  # the tree, its metadata and the pending markers' statements stay valid
        new_code = new_tree.code
        if new_code != code:
            findings = _carry(findings, code, new_code)
            code = new_code
            wrapper = MetadataWrapper(new_tree, unsafe_skip_copy=True)
            pending.clear()  # the pass put them into the new tree
    tree = wrapper.module
    if pending:
        tree = tree.visit(AttachMarkers(pending))
        findings = _carry(findings, code, tree.code)
    return tree, findings


def _apply(rule: Rule, wrapper: MetadataWrapper) -> cst.Module:
    """``rule`` over the wrapped tree, then the import additions/removals it scheduled."""
    with rule.resolve(wrapper):
        rule.context = replace(rule.context, wrapper=wrapper)
        tree = rule.transform_module_impl(wrapper.module)
    for visitor in (AddImportsVisitor, RemoveImportsVisitor):
        if rule.context.scratch.get(visitor.CONTEXT_KEY):
            tree = visitor(rule.context).transform_module(tree)
    rule.finish(tree)
    return tree


def migrate_text(
    text: str, path: str, rules: Sequence[type[Rule]], options: Options
) -> tuple[str, list[Finding]]:
    """Migrated text and findings.

    Raises ``libcst.ParserSyntaxError`` if ``text`` does not parse.
    """
    tree = cst.parse_module(text)
    new_tree, raw = run_rules(tree, rules, options, CodemodContext(filename=path))
    new_text = new_tree.code
    lines = split_lines(new_text)
    findings = [
        Finding(path, _at_marker(lines, f), f.column, f.code, f.message, f.severity, f.action)
        for f in raw
    ]
    return new_text, sorted(findings, key=lambda f: (f.line, f.column, f.code, f.message))


def _at_marker(lines: list[str], finding: RawFinding) -> int:
    """A review finding's line, moved if need be onto the statement under its marker.

    The line diff can land a few lines off when a pass rewrote the statement as well as
    marking it; the nearest marker with the finding's code settles it.
    """
    if finding.severity != "review":
        return finding.line
    tag = f"{markers.PREFIX}{finding.code} "

    def marked(index: int) -> bool:
        return lines[index].lstrip().startswith(tag)

    def statement_after(index: int) -> int:
        while index < len(lines) and lines[index].lstrip().startswith(markers.PREFIX):
            index += 1
        return index + 1

    above = finding.line - 2
    while above >= 0 and lines[above].lstrip().startswith(markers.PREFIX):
        if marked(above):
            return finding.line
        above -= 1
    candidates = [
        i for i in range(max(0, finding.line - 12), min(len(lines), finding.line + 12)) if marked(i)
    ]
    if not candidates:
        return finding.line
    nearest = min(candidates, key=lambda i: abs(i + 1 - finding.line))
    return statement_after(nearest)


def _carry(findings: list[RawFinding], old: str, new: str) -> list[RawFinding]:
    old_lines, new_lines = split_lines(old), split_lines(new)
    mapping = _line_map(old_lines, new_lines)

    def is_marker(index: int) -> bool:
        return new_lines[index].lstrip().startswith(markers.PREFIX)

    def where(line: int) -> int:
        target = mapping[line - 1] if line - 1 < len(mapping) else len(new_lines) - 1
        if 0 <= target < len(new_lines) and is_marker(target):
            # A marker belongs to the statement below it; a finding landing on one is about
            # the code just above (or, at the top of the block, the statement below).
            above = target
            while above > 0 and is_marker(above):
                above -= 1
            below = target
            while below < len(new_lines) - 1 and is_marker(below):
                below += 1
            target = above if not is_marker(above) and above < target else below
        return target + 1

    return [
        RawFinding(where(f.line), f.column, f.code, f.message, f.severity, f.action)
        for f in findings
    ]


def _line_map(old: list[str], new: list[str], *, exact: bool = True) -> list[int]:
    """For each old line index, the new line index it became.

    Equal runs map one to one. A changed run is matched again on stripped lines (re-indented
    code); what still differs is aligned from the end, where rewritten code usually ends up
    (a marker or a removed ``with`` line sits before it).
    """
    keys = old if exact else [line.strip() for line in old]
    new_keys = new if exact else [line.strip() for line in new]
    mapping = [0] * len(old)
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, keys, new_keys).get_opcodes():
        if tag == "equal":
            mapping[i1:i2] = range(j1, j2)
        elif tag == "replace" and exact:
            inner = _line_map(old[i1:i2], new[j1:j2], exact=False)
            mapping[i1:i2] = [j1 + k for k in inner]
        else:
            for index in range(i1, i2):
                mapping[index] = (
                    max(j1, j2 - (i2 - index)) if j2 > j1 else min(j1, max(len(new) - 1, 0))
                )
    return mapping
