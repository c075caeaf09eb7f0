"""F2P001: FSDP1 imports that the rewrites left unused are removed; nothing else is touched.

The FSDP2 names are added by the rules that start using them (``AddImportsVisitor``), from the
``--target-torch`` module. Imports inside functions are handled like module-level ones. A
parenthesized multi-line module-level ``from`` import that the additions and removals left
half on one line is laid out again one name per line; any other import keeps its layout.
"""

from __future__ import annotations

import libcst as cst
from libcst.codemod.visitors import RemoveImportsVisitor
from libcst.helpers import get_full_name_for_node
from libcst.metadata import ScopeProvider

from codemods import fsdp1
from codemods.rule import RawFinding, Rule

_Key = tuple[str, str | None, str | None]


class ImportsRule(Rule):
    CODE = "F2P001"
    SUMMARY = "remove FSDP1 imports left unused by the rewrites"
    DESCRIPTION = SUMMARY
    TRIGGERS = ("fsdp",)

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        """Find unused FSDP1 imports, remove them, lay out again what the edits left mixed."""
        self._candidates: list[tuple[_Key, RawFinding]] = []
        tree = tree.visit(self)
        removals = self.context.scratch.pop(RemoveImportsVisitor.CONTEXT_KEY, [])
        if removals:
            tree = RemoveImportsVisitor(self.context, removals).transform_module(tree)
        tree, self._relaid = _one_per_line(tree)
        return tree

    @property
    def touched(self) -> bool:
        return super().touched or self._relaid

    def finish(self, tree: cst.Module) -> None:
        if self._candidates:
            remaining = _imports(tree)
            self.findings.extend(
                finding for key, finding in self._candidates if key not in remaining
            )

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if node.relative or node.module is None or isinstance(node.names, cst.ImportStar):
            return
        module = get_full_name_for_node(node.module) or ""
        for alias in node.names:
            name = get_full_name_for_node(alias.name) or ""
            if (
                _is_fsdp1(f"{module}.{name}")
                and self._unused(node, _asname(alias) or name)
                and not self.ignored(node)
            ):
                self._schedule(alias, (module, name, _asname(alias)))

    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            module = get_full_name_for_node(alias.name) or ""
            if (
                _is_fsdp1(module)
                and self._unused(node, _asname(alias) or module)
                and not self.ignored(node)
            ):
                self._schedule(alias, (module, None, _asname(alias)))

    def _unused(self, node: cst.CSTNode, bound: str) -> bool:
        """No reference to what ``node`` binds as ``bound`` (dotted names: let libcst decide)."""
        if "." in bound:
            return True
        scope = self.get_metadata(ScopeProvider, node, None)
        if scope is None:
            return True
        return all(
            not a.references for a in scope.assignments[bound] if getattr(a, "node", None) is node
        )

    def _schedule(self, alias: cst.ImportAlias, key: _Key) -> None:
        module, name, asname = key
        self.remove_unused_import(module, name, asname)
        what = f"{module}.{name}" if name else module
        self._candidates.append(
            (key, self.finding(alias, f"unused FSDP1 import {what} removed", "safe", "rewritten"))
        )


def _is_fsdp1(dotted: str) -> bool:
    """An FSDP1 name, or the FSDP1 package/submodules themselves."""
    return fsdp1.canonical(dotted) is not None or dotted in (
        fsdp1.PACKAGE,
        *(
            f"{fsdp1.PACKAGE}.{sub.rstrip('.')}"
            for sub in ("fully_sharded_data_parallel.", "api.", "wrap.")
        ),
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


def _one_per_line(tree: cst.Module) -> tuple[cst.Module, bool]:
    """Module-level parenthesized multi-line ``from`` imports with a mixed layout.

    They are rewritten one name per line.
    """
    body = list(tree.body)
    changed = False
    for index, statement in enumerate(body):
        if isinstance(statement, cst.SimpleStatementLine) and isinstance(
            statement.body[0], cst.ImportFrom
        ):
            laid = _laid_out(statement.body[0], tree.default_indent)
            if laid is not statement.body[0]:
                body[index] = statement.with_changes(body=[laid, *statement.body[1:]])
                changed = True
    return (tree.with_changes(body=body), True) if changed else (tree, False)


def _laid_out(node: cst.ImportFrom, indent: str) -> cst.ImportFrom:
    names = node.names
    if node.lpar is None or isinstance(names, cst.ImportStar):
        return node
    breaks = [_breaks(node.lpar.whitespace_after)] + [
        _breaks(getattr(a.comma, "whitespace_after", None)) for a in names
    ]
    if not any(breaks) or (all(breaks) and isinstance(names[-1].comma, cst.Comma)):
        return node
    item = cst.ParenthesizedWhitespace(indent=True, last_line=cst.SimpleWhitespace(indent))
    close = cst.ParenthesizedWhitespace(indent=True, last_line=cst.SimpleWhitespace(""))
    laid = []
    for index, alias in enumerate(names):
        own = alias.comma.whitespace_after if isinstance(alias.comma, cst.Comma) else None
        after = close if index == len(names) - 1 else item
        if isinstance(own, cst.ParenthesizedWhitespace):
            after = after.with_changes(first_line=own.first_line)
        laid.append(alias.with_changes(comma=cst.Comma(whitespace_after=after)))
    return node.with_changes(
        names=laid, lpar=node.lpar.with_changes(whitespace_after=item), rpar=cst.RightParen()
    )


def _breaks(whitespace) -> bool:
    return isinstance(whitespace, cst.ParenthesizedWhitespace)
