"""F2P099: any name that still resolves to FSDP1 gets a marker. Runs last.

This is the rule behind "nothing FSDP1 is left behind silently": whatever the other rules did
not rewrite or already mark is flagged here, string annotations included. Imports are not
flagged (their uses are), and a statement that already carries a marker is under review as a
whole.
"""

from __future__ import annotations

import libcst as cst
from libcst.helpers import get_full_name_for_node
from libcst.metadata import ScopeProvider

from codemods import fsdp1
from codemods.rule import Rule

_POLICIES = frozenset(
    {
        "transformer_auto_wrap_policy",
        "size_based_auto_wrap_policy",
        "lambda_auto_wrap_policy",
        "always_wrap_policy",
        "ModuleWrapPolicy",
        "CustomPolicy",
    }
)
_POLICY = (
    "{}: FSDP2 has no wrap policies; where the model is wrapped, "
    "call fully_shard on each submodule "
    "the policy selects, then on the root (F2P003 does this for literal policies)"
)


class LeftoversRule(Rule):
    CODE = "F2P099"
    SUMMARY = "flag every remaining reference to an FSDP1 name"
    DESCRIPTION = SUMMARY

    def visit_Module(self, node: cst.Module) -> None:
        self._quoted: dict[int, str] = {}

    def visit_Import(self, node: cst.Import) -> bool:
        self._note_quoted_uses(node)
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        self._note_quoted_uses(node)
        return False

    def _note_quoted_uses(self, node: cst.Import | cst.ImportFrom) -> None:
        """Uses of an FSDP1 import inside string annotations (``"FSDP"``), flagged when visited."""
        if isinstance(node.names, cst.ImportStar):
            return
        scope = self.get_metadata(ScopeProvider, node, None)
        module = (
            get_full_name_for_node(node.module)
            if isinstance(node, cst.ImportFrom) and node.module
            else None
        )
        for alias in node.names:
            dotted = get_full_name_for_node(alias.name) or ""
            name = fsdp1.canonical(f"{module}.{dotted}" if module else dotted)
            if name is None or scope is None:
                continue
            bound = alias.evaluated_alias or dotted
            for assignment in scope.assignments[bound]:
                if getattr(assignment, "node", None) is node:
                    for reference in assignment.references:
                        if isinstance(reference.node, (cst.SimpleString, cst.ConcatenatedString)):
                            self._quoted[id(reference.node)] = name

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        name = self._quoted.get(id(node))
        if name is not None and not (self.ignored(node) or self.has_marker()):
            self.flag(
                node, f"FSDP1 name {name} in a string annotation: use FSDPModule (or port by hand)"
            )

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        return self._check(node)

    def visit_Name(self, node: cst.Name) -> bool:
        return self._check(node)

    def _check(self, node: cst.Name | cst.Attribute) -> bool:
        name = self.fsdp1_name(node)
        if name is None:
            return True
        if not (self.ignored(node) or self.has_marker()):
            if name in _POLICIES:
                self.flag(node, _POLICY.format(name))
            else:
                kind = "private FSDP1 internal" if fsdp1.is_private(name) else "FSDP1 name"
                self.flag(
                    node, f"{kind} {name} has no automatic FSDP2 rewrite: port this line by hand"
                )
        return False
