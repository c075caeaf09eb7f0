"""F2P099: any name that still resolves to FSDP1 gets a marker. Runs last.

This is the rule behind "nothing FSDP1 is left behind silently": whatever the other rules did
not rewrite or already mark is flagged here. Imports are not flagged (their uses are), and a
statement that already carries a marker is under review as a whole.
"""

from __future__ import annotations

import libcst as cst

from codemods import fsdp1
from codemods.rule import Rule


class LeftoversRule(Rule):
    CODE = "F2P099"
    SUMMARY = "flag every remaining reference to an FSDP1 name"
    DESCRIPTION = SUMMARY

    def visit_Import(self, node: cst.Import) -> bool:
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        return self._check(node)

    def visit_Name(self, node: cst.Name) -> bool:
        return self._check(node)

    def _check(self, node: cst.Name | cst.Attribute) -> bool:
        name = self.fsdp1_name(node)
        if name is None:
            return True
        if not (self.ignored(node) or self.has_marker()):
            kind = "private FSDP1 internal" if fsdp1.is_private(name) else "FSDP1 name"
            self.flag(node, f"{kind} {name} has no automatic FSDP2 rewrite: port this line by hand")
        return False
