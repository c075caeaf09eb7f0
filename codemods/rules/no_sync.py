"""F2P007: ``with m.no_sync():`` on a known FSDP module -> gradient sync off for the block.

The block becomes ``m.set_requires_gradient_sync(False)`` / ``try:`` body / ``finally:``
``m.set_requires_gradient_sync(True)``, so sync is back on even when the block raises. A
receiver not known to be FSDP (DDP has ``no_sync`` too) is marked instead.
"""

from __future__ import annotations

import libcst as cst

from codemods.rule import Rule


class NoSyncRule(Rule):
    CODE = "F2P007"
    SUMMARY = "with m.no_sync(): -> m.set_requires_gradient_sync(False) ... finally True"
    DESCRIPTION = SUMMARY
    TRIGGERS = ("no_sync",)

    def leave_With(self, original_node: cst.With, updated_node: cst.With):
        calls = [item.item for item in original_node.items if _is_no_sync(item.item)]
        if not calls or self.ignored(calls[0]):
            return updated_node
        call = calls[0]
        assert isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)  # _is_no_sync
        receiver = call.func.value
        text = self.code(receiver)
        if (
            len(original_node.items) != 1
            or original_node.items[0].asname is not None
            or original_node.asynchronous
        ):
            self.flag(
                call,
                f"{text}.no_sync() among other context managers: "
                f"use {text}.set_requires_gradient_sync by hand",
            )
            return updated_node
        if not self.known_fsdp(receiver):
            self.flag(
                call,
                f"{text} is not known to be FSDP1: "
                f"if it is, use {text}.set_requires_gradient_sync(False/True)",
            )
            return updated_node
        self.rewritten(call, "no_sync() -> set_requires_gradient_sync(False), restored in finally")
        body = updated_node.body
        if isinstance(body, cst.SimpleStatementSuite):
            body = cst.IndentedBlock(
                body=[cst.SimpleStatementLine(body=body.body)], header=body.trailing_whitespace
            )
        config = self.module.config_for_parsing
        off = cst.parse_statement(
            f"{text}.set_requires_gradient_sync(False){config.default_newline}", config=config
        )
        guarded = cst.ensure_type(
            cst.parse_statement(
                f"try:{config.default_newline}{config.default_indent}pass{config.default_newline}"
                f"finally:{config.default_newline}{config.default_indent}{text}.set_requires_gradient_sync(True)"
                f"{config.default_newline}",
                config=config,
            ),
            cst.Try,
        )
        return cst.FlattenSentinel(
            [
                off.with_changes(leading_lines=updated_node.leading_lines),
                guarded.with_changes(body=body),
            ]
        )


def _is_no_sync(node: cst.BaseExpression) -> bool:
    return (
        isinstance(node, cst.Call)
        and not node.args
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value == "no_sync"
    )
