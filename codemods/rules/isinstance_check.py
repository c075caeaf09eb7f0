"""F2P005: the FSDP class as a type -> ``FSDPModule``.

``isinstance(x, FSDP)`` / ``issubclass`` (also inside a tuple) and annotations such as
``model: FSDP``. Every module that ``fully_shard`` was applied to is an ``FSDPModule``, as every
FSDP1-wrapped module was an ``FSDP`` instance.
"""

from __future__ import annotations

import libcst as cst

from codemods.rule import Rule

_BUILTINS = {"builtins.isinstance", "builtins.issubclass"}


class IsinstanceRule(Rule):
    CODE = "F2P005"
    SUMMARY = "isinstance(x, FSDP) / issubclass / annotations -> FSDPModule"
    DESCRIPTION = SUMMARY
    TRIGGERS = ("FullyShardedDataParallel",)

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        if len(original_node.args) != 2 or not self.qualified(original_node.func) & _BUILTINS:
            return updated_node
        if self.ignored(original_node):
            return updated_node
        kinds = original_node.args[1].value
        if isinstance(kinds, cst.Tuple):
            elements = [
                e.with_changes(value=cst.Name("FSDPModule")) if self._is_fsdp(e.value) else e
                for e in kinds.elements
            ]
            if all(new is old for new, old in zip(elements, kinds.elements)):
                return updated_node
            new_kinds: cst.BaseExpression = kinds.with_changes(elements=elements)
        elif self._is_fsdp(kinds):
            new_kinds = cst.Name("FSDPModule").with_changes(lpar=kinds.lpar, rpar=kinds.rpar)
        else:
            return updated_node
        self.add_needed_import(self.options.fsdp2_module, "FSDPModule")
        self.rewritten(original_node, "FSDP class test -> FSDPModule")
        second = updated_node.args[1].with_changes(value=new_kinds)
        return updated_node.with_changes(args=[updated_node.args[0], second])

    def leave_Annotation(
        self, original_node: cst.Annotation, updated_node: cst.Annotation
    ) -> cst.Annotation:
        kind = original_node.annotation
        if not self._is_fsdp(kind) or self.ignored(original_node):
            return updated_node
        self.add_needed_import(self.options.fsdp2_module, "FSDPModule")
        self.rewritten(original_node, "FSDP annotation -> FSDPModule")
        return updated_node.with_changes(
            annotation=cst.Name("FSDPModule").with_changes(lpar=kind.lpar, rpar=kind.rpar)
        )

    def _is_fsdp(self, node: cst.BaseExpression) -> bool:
        return self.fsdp1_name(node) == "FullyShardedDataParallel"
