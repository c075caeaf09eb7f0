"""The base of every rule: one libcst codemod command with one code, findings and markers.

Invariants every rule keeps:
- it rewrites or flags only nodes whose qualified names (libcst scope analysis, as
  ``QualifiedNameProvider`` computes them) resolve to ``torch.distributed.fsdp`` (or, for the
  optimizer rule, the named BF16 optimizers);
- it leaves alone any node on a line that ends in ``# fsdp2-port: ignore``;
- every ``review`` finding gets a marker above its statement, at most one per code, so a
  second run changes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import libcst as cst
from libcst.codemod import CodemodCommand, CodemodContext
from libcst.codemod.visitors import AddImportsVisitor, RemoveImportsVisitor
from libcst.metadata import CodeRange, PositionProvider, ScopeProvider

from codemods import fsdp1, markers
from codemods.findings import Action, Severity
from codemods.options import Options
from codemods.receivers import KnownReceivers

_STATEMENTS = (cst.SimpleStatementLine, cst.BaseCompoundStatement)
# Exact-type sets for the per-node hooks: isinstance against the abstract base is slow.
_STATEMENT_TYPES = frozenset(
    {
        cst.SimpleStatementLine,
        cst.If,
        cst.For,
        cst.While,
        cst.Try,
        cst.TryStar,
        cst.With,
        cst.FunctionDef,
        cst.ClassDef,
        cst.Match,
    }
)
_SCOPE_TYPES = frozenset({cst.FunctionDef, cst.ClassDef})
# The clause of every import statement (continuation lines included), and the words in it: every
# name an import can bind is among them.
_IMPORT = re.compile(
    r"^[ \t]*(?:from[ \t]+[\w. \t]+?[ \t]+)?import[ \t]+(\([^)]*\)|(?:[^\n;#\\]|\\\r?\n)*)", re.M
)
_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class RawFinding:
    """A finding in the coordinates of the tree one rule saw (the engine maps them)."""

    line: int
    column: int
    code: str
    message: str
    severity: Severity
    action: Action


class Rule(CodemodCommand, cst.CSTTransformer):
    """A libcst codemod command (runs under ``python -m libcst.tool codemod`` too).

    A plain ``CSTTransformer`` rather than ``VisitorBasedCodemodCommand``: the rules use no
    matcher decorators, and skipping their per-node dispatch makes each pass markedly faster.
    """

    CODE: ClassVar[str]
    SUMMARY: ClassVar[str]
    #: Strings one of which the source must contain for the rule to have work.
    TRIGGERS: ClassVar[tuple[str, ...]] = ("fsdp", "FullyShardedDataParallel")

    # Qualified names are asked of the scope for the nodes a rule looks at (QualifiedNameProvider
    # would compute them for every node), positions only when a rule reports or checks an ignore
    # comment (see _where): both are most of the cost of a pass.
    METADATA_DEPENDENCIES = (ScopeProvider,)

    def __init__(self, context: CodemodContext, options: Options | None = None) -> None:
        CodemodCommand.__init__(self, context)
        self.options = options or Options()
        self.findings: list[RawFinding] = []
        #: The source text of the tree this pass transforms (set by ``prepare``).
        self.source = ""
        self._ignored: frozenset[int] = frozenset()
        self._imported: set[str] = set()
        self._statements: list[cst.CSTNode] = []
        self.scopes: list[cst.CSTNode] = []
        #: Markers to add, by ``id`` of their statement in the tree being transformed. The engine
        #: shares one dict between passes: a pass that only flags leaves the tree (and so the
        #: metadata) as it was, and its markers are added by the next pass that rewrites.
        self.pending: dict[int, list[tuple[str, str]]] = {}
        self._receivers: dict[bool, KnownReceivers] = {}
        self._positions: Mapping[cst.CSTNode, CodeRange] | None = None

    # -- running ------------------------------------------------------------------------
    def prepare(self, code: str) -> bool:
        """Read the ignore comments of ``code``; False when the rule has nothing to look for."""
        if not any(trigger in code for trigger in self.TRIGGERS):
            return False
        self.source = code
        self._ignored = markers.ignored_lines(code)
        self._imported = {
            m.group(0) for clause in _IMPORT.finditer(code) for m in _WORD.finditer(clause.group(1))
        }
        return True

    def transform_module(self, tree: cst.Module) -> cst.Module:
        if not self.prepare(tree.code):
            return tree
        result = super().transform_module(tree)
        self.finish(result)
        return result

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        return tree.visit(self)

    def finish(self, tree: cst.Module) -> None:
        """Called with the pass's result, after the scheduled import changes were made."""

    @property
    def touched(self) -> bool:
        """Whether the pass rewrote anything: every rewrite comes with a finding or an import.

        A pass that only flagged changed nothing but markers, which can wait in ``pending``.
        """
        scratch = self.context.scratch
        return any(f.action == "rewritten" for f in self.findings) or bool(
            scratch.get(AddImportsVisitor.CONTEXT_KEY)
            or scratch.get(RemoveImportsVisitor.CONTEXT_KEY)
        )

    def on_visit(self, node: cst.CSTNode) -> bool:
        kind = type(node)
        if kind in _STATEMENT_TYPES:
            self._statements.append(node)
            if kind in _SCOPE_TYPES:
                self.scopes.append(node)
        return super().on_visit(node)

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode):
        result = super().on_leave(original_node, updated_node)
        kind = type(original_node)
        if kind in _SCOPE_TYPES:
            self.scopes.pop()
        if kind in _STATEMENT_TYPES:
            self._statements.pop()
            for code, message in self.pending.get(id(original_node), ()):
                result = _mark(result, code, message)
        return result

    # -- names ----------------------------------------------------------------------------
    def qualified(self, node: cst.CSTNode) -> set[str]:
        scope = self.get_metadata(ScopeProvider, node, None)
        return {q.name for q in scope.get_qualified_names_for(node)} if scope is not None else set()

    def fsdp1_name(self, node: cst.CSTNode) -> str | None:
        """Canonical FSDP1 name of a Name/Attribute (``FullyShardedDataParallel`` ...)."""
        if not self._maybe_imported(node):
            return None
        return fsdp1.first(self.qualified(node))

    def fsdp2_name(self, node: cst.CSTNode) -> str | None:
        """``fully_shard``, ``FSDPModule`` ... when ``node`` resolves to an FSDP2 export."""
        if not self._maybe_imported(node):
            return None
        for name in sorted(self.qualified(node)):
            found = fsdp1.fsdp2(name)
            if found is not None:
                return found
        return None

    def is_wrap_call(self, func: cst.CSTNode) -> bool:
        return (
            self.fsdp1_name(func) == "FullyShardedDataParallel"
            or self.fsdp2_name(func) == "fully_shard"
        )

    def is_fsdp_class(self, node: cst.CSTNode) -> bool:
        return (
            self.fsdp1_name(node) == "FullyShardedDataParallel"
            or self.fsdp2_name(node) == "FSDPModule"
        )

    def known_fsdp(self, expr: cst.BaseExpression, *, fsdp1_only: bool = False) -> bool:
        """Whether ``expr`` is known to hold an FSDP-wrapped module here (see ``receivers``).

        ``fsdp1_only``: known to hold an FSDP1 module (not one that ``fully_shard`` returned).
        """
        if fsdp1_only not in self._receivers:
            if fsdp1_only:
                is_fsdp1 = lambda node: self.fsdp1_name(node) == "FullyShardedDataParallel"  # noqa: E731
                self._receivers[True] = KnownReceivers(self.module, is_fsdp1, is_fsdp1)
            else:
                self._receivers[False] = KnownReceivers(
                    self.module, self.is_wrap_call, self.is_fsdp_class
                )
        return self._receivers[fsdp1_only].known(expr, self.scopes)

    def _maybe_imported(self, node: cst.CSTNode) -> bool:
        """A cheap gate before scope lookups.

        True when the name chain starts with a name some import binds.
        """
        while isinstance(node, cst.Attribute):
            node = node.value
        return isinstance(node, cst.Name) and node.value in self._imported

    def code(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node)

    # -- positions, ignores, findings --------------------------------------------------------
    def ignored(self, node: cst.CSTNode) -> bool:
        """True when the line where ``node`` starts or ends ends in ``# fsdp2-port: ignore``."""
        if not self._ignored:
            return False
        where = self._where(node)
        return where.start.line in self._ignored or where.end.line in self._ignored

    def _where(self, node: cst.CSTNode) -> CodeRange:
        if self._positions is None:
            wrapper = self.context.wrapper
            assert wrapper is not None, "positions are asked for only while a pass runs"
            self._positions = wrapper.resolve(PositionProvider)
        return self._positions[node]

    def has_marker(self) -> bool:
        """Whether the innermost enclosing statement already carries a marker."""
        statement = self._statements[-1] if self._statements else None
        if statement is None:
            return False
        return id(statement) in self.pending or bool(
            markers.codes(getattr(statement, "leading_lines", ()))
        )

    def rewritten(self, node: cst.CSTNode, message: str, *, review: bool = False) -> None:
        self._record(node, message, "review" if review else "safe", "rewritten")

    def flag(self, node: cst.CSTNode, message: str) -> None:
        self._record(node, message, "review", "flagged")

    def finding(
        self, node: cst.CSTNode, message: str, severity: Severity, action: Action
    ) -> RawFinding:
        """A finding at ``node``, not yet recorded (markers are added only by recording)."""
        where = self._where(node).start
        return RawFinding(where.line, where.column + 1, self.CODE, message, severity, action)

    def _record(self, node: cst.CSTNode, message: str, severity: Severity, action: Action) -> None:
        finding = self.finding(node, message, severity, action)
        self.findings.append(finding)
        self.warn(f"{finding.line}:{finding.column}: {self.CODE} [{severity}] {message}")
        if severity == "review" and self._statements:
            pending = self.pending.setdefault(id(self._statements[-1]), [])
            if all(code != self.CODE for code, _ in pending):
                pending.append((self.CODE, message))


class AttachMarkers(cst.CSTTransformer):
    """Adds the pending markers to their statements (no metadata needed)."""

    def __init__(self, pending: dict[int, list[tuple[str, str]]]) -> None:
        self.pending = pending

    def on_leave(self, original_node, updated_node):
        result = super().on_leave(original_node, updated_node)
        for code, message in self.pending.get(id(original_node), ()):
            result = _mark(result, code, message)
        return result


def _mark(result, code: str, message: str):
    """Put a marker on a leave_* result: a statement, or the first of a flattened list."""
    if isinstance(result, cst.FlattenSentinel):
        nodes = list(result.nodes)
        if nodes:
            nodes[0] = markers.add(nodes[0], code, message)
        return cst.FlattenSentinel(nodes)
    if isinstance(result, _STATEMENTS):
        return markers.add(result, code, message)
    return result
