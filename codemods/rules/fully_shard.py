"""F2P002: ``FSDP(module, ...)`` -> ``fully_shard(module, ...)``.

FSDP2 returns the module it was given, so ``model = FSDP(model, ...)`` keeps its assignment.
Calls with an ``auto_wrap_policy`` belong to F2P003. A call with an argument that has no
FSDP2 meaning (see ``constructor``) is left as it is and marked.
"""

from __future__ import annotations

import libcst as cst

from codemods import arguments, constructor
from codemods.rule import Rule


class FullyShardRule(Rule):
    CODE = "F2P002"
    SUMMARY = "FSDP(module, ...) -> fully_shard(module, ...) with FSDP2 keyword arguments"
    DESCRIPTION = SUMMARY
    TRIGGERS = ("FullyShardedDataParallel",)

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        if self.fsdp1_name(original_node.func) != "FullyShardedDataParallel" or self.ignored(
            original_node
        ):
            return updated_node
        conversion = constructor.convert(self, original_node)
        if conversion.policy is not None:
            return updated_node
        if conversion.blockers:
            self.flag(original_node, "FSDP(...) left as is: " + "; ".join(conversion.blockers))
            return updated_node
        return rewrite(self, original_node, updated_node, conversion)


def rewrite(
    rule: Rule, original: cst.Call, updated: cst.Call, conversion: constructor.Conversion
) -> cst.Call:
    """The ``fully_shard`` call for a convertible FSDP1 call (also used by F2P003 for the root)."""
    assert conversion.module is not None
    rule.add_needed_import(rule.options.fsdp2_module, "fully_shard")
    message = "FSDP(...) -> fully_shard(...)"
    if conversion.notes:
        message += ": " + "; ".join(conversion.notes)
    rule.rewritten(original, message, review=bool(conversion.notes))
    args = arguments.rebuild(original.args, [conversion.module, *conversion.args])
    return updated.with_changes(func=cst.Name("fully_shard"), args=args)
