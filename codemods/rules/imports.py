"""F2P001: FSDP1 imports that the rewrites left unused are removed; nothing else is touched.

The FSDP2 names are added by the rules that start using them (``AddImportsVisitor``), from the
``--target-torch`` module. Imports inside functions are handled like module-level ones. A
parenthesized multi-line ``from`` import that the additions and removals left half on one
line is laid out again one name per line; any other import keeps its layout.
"""

from __future__ import annotations

import libcst as cst
from libcst.codemod.visitors import RemoveImportsVisitor
from libcst.helpers import get_full_name_for_node

from codemods import fsdp1
from codemods.rule import RawFinding, Rule

_Key = tuple[str, str | None, str | None]


class ImportsRule(Rule):
    CODE = "F2P001"
    SUMMARY = "remove FSDP1 imports left unused by the rewrites"
    DESCRIPTION = SUMMARY
    TRIGGERS = ("fsdp",)

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        """Schedule, remove, then lay out again the parenthesized imports that edits left mixed."""
        self._candidates: list[tuple[_Key, RawFinding]] = []
        tree = tree.visit(self)
        removals = self.context.scratch.pop(RemoveImportsVisitor.CONTEXT_KEY, [])
        if removals:
            tree = RemoveImportsVisitor(self.context, removals).transform_module(tree)
        layout = _OnePerLine()
        tree = tree.visit(layout)
        self._relaid = layout.changed
        return tree

    @property
    def touched(self) -> bool:
        return super().touched or self._relaid

    def finish(self, tree: cst.Module) -> None:
        if self._candidates:
            remaining = _imports(tree)
            self.findings.extend(finding for key, finding in self._candidates if key not in remaining)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if node.relative or node.module is None or isinstance(node.names, cst.ImportStar):
            return
        module = get_full_name_for_node(node.module) or ""
        for alias in node.names:
            name = get_full_name_for_node(alias.name) or ""
            if _is_fsdp1(f"{module}.{name}") and not self.ignored(node):
                self._schedule(alias, (module, name, _asname(alias)))

    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            module = get_full_name_for_node(alias.name) or ""
            if _is_fsdp1(module) and not self.ignored(node):
                self._schedule(alias, (module, None, _asname(alias)))

    def _schedule(self, alias: cst.ImportAlias, key: _Key) -> None:
        module, name, asname = key
        self.remove_unused_import(module, name, asname)
        what = f"{module}.{name}" if name else module
        self._candidates.append((key, self.finding(alias, f"unused FSDP1 import {what} removed", "safe", "rewritten")))


def _is_fsdp1(dotted: str) -> bool:
    """An FSDP1 name, or the FSDP1 package/submodules themselves."""
    return fsdp1.canonical(dotted) is not None or dotted in (
        fsdp1.PACKAGE,
        *(f"{fsdp1.PACKAGE}.{sub.rstrip('.')}" for sub in ("fully_sharded_data_parallel.", "api.", "wrap.")),
    )


def _asname(alias: cst.ImportAlias) -> str | None:
    return alias.evaluated_alias


def _imports(tree: cst.Module) -> set[_Key]:
    found: set[_Key] = set()

    class Collect(cst.CSTVisitor):
        def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
            if node.module is None or isinstance(node.names, cst.ImportStar):
                return
            module = get_full_name_for_node(node.module) or ""
            for alias in node.names:
                found.add((module, get_full_name_for_node(alias.name), _asname(alias)))

        def visit_Import(self, node: cst.Import) -> None:
            for alias in node.names:
                found.add((get_full_name_for_node(alias.name) or "", None, _asname(alias)))

    tree.visit(Collect())
    return found


class _OnePerLine(cst.CSTTransformer):
    """One name per line for parenthesized multi-line ``from`` imports whose layout is mixed."""

    def __init__(self) -> None:
        self.changed = False

    def leave_ImportFrom(self, original_node: cst.ImportFrom, updated_node: cst.ImportFrom) -> cst.ImportFrom:
        names = updated_node.names
        if updated_node.lpar is None or isinstance(names, cst.ImportStar):
            return updated_node
        breaks = [_breaks(updated_node.lpar.whitespace_after)] + [_breaks(getattr(a.comma, "whitespace_after", None)) for a in names]
        last_has_comma = isinstance(names[-1].comma, cst.Comma)
        if not any(breaks) or (all(breaks) and last_has_comma):
            return updated_node
        self.changed = True
        item = cst.ParenthesizedWhitespace(indent=True, last_line=cst.SimpleWhitespace("    "))
        close = cst.ParenthesizedWhitespace(indent=True, last_line=cst.SimpleWhitespace(""))
        laid = []
        for index, alias in enumerate(names):
            own = alias.comma.whitespace_after if isinstance(alias.comma, cst.Comma) else None
            after = close if index == len(names) - 1 else item
            if isinstance(own, cst.ParenthesizedWhitespace):
                after = after.with_changes(first_line=own.first_line)
            laid.append(alias.with_changes(comma=cst.Comma(whitespace_after=after)))
        return updated_node.with_changes(
            names=laid,
            lpar=updated_node.lpar.with_changes(whitespace_after=item),
            rpar=cst.RightParen(),
        )


def _breaks(whitespace) -> bool:
    return isinstance(whitespace, cst.ParenthesizedWhitespace)
