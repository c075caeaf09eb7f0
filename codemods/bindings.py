"""``name = value`` bindings, looked up from a use of the name (one assignment, same scope).

Used where FSDP1 code builds an argument first and passes it by name (a wrap policy, a
state-dict config). A binding whose only use is the rewritten call can then be removed.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst
from libcst.metadata import Assignment, ScopeProvider

from codemods.rule import Rule


@dataclass(frozen=True)
class Binding:
    statement: cst.SimpleStatementLine
    value: cst.BaseExpression
    #: The use we looked up from is the name's only use.
    sole_use: bool


class Bindings(cst.CSTVisitor):
    def __init__(self, module: cst.Module) -> None:
        self._by_target: dict[int, tuple[cst.SimpleStatementLine, cst.BaseExpression]] = {}
        module.visit(self)

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        if len(node.body) == 1 and isinstance(node.body[0], cst.Assign):
            assign = node.body[0]
            if len(assign.targets) == 1 and isinstance(assign.targets[0].target, cst.Name):
                self._by_target[id(assign.targets[0].target)] = (node, assign.value)

    def lookup(self, rule: Rule, name: cst.Name) -> Binding | None:
        """The single ``name = value`` in ``name``'s own scope.

        ``rule`` must need ScopeProvider.
        """
        scope = rule.get_metadata(ScopeProvider, name, None)
        if scope is None:
            return None
        assignments = list(scope.assignments[name.value])
        if len(assignments) != 1 or assignments[0].scope is not scope:
            return None
        assignment = assignments[0]
        if not isinstance(assignment, Assignment):  # a builtin: never in ``scope``
            return None
        found = self._by_target.get(id(assignment.node))
        if found is None:
            return None
        return Binding(found[0], found[1], len(scope.accesses[name.value]) == 1)
