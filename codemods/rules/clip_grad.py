"""F2P006: ``m.clip_grad_norm_(max_norm[, norm_type])`` on a known FSDP module -> the global norm.

FSDP1's method clipped by, and returned, the plain global norm. The rewrite calls
``fsdp2_port.clip_grad_norm_(m.parameters(), ...)``, which does the same on DTensor gradients
with one collective. A receiver not known to be FSDP (``accelerator``, a DDP model ...) is marked.
"""

from __future__ import annotations

import libcst as cst

from codemods import arguments
from codemods.rule import Rule

# Without the runtime dependency: torch's own clip_grad_norm_ accepts DTensor gradients on
# torch >= 2.6 and reduces every p-norm (inf as a max) through DTensor placements, so on one
# FSDP2 mesh its norm is the global one (checked on torch 2.13, 2 gloo ranks, p in 1, 2, 3, inf:
# equal to the single-process norm); .full_tensor() turns that DTensor into the plain tensor
# FSDP1 returned. It is not exact everywhere -- one collective per mesh dimension, gradients
# on different meshes (TP + FSDP on separate meshes) are rejected, older releases unchecked,
# and with no DTensor gradient at all the result has no full_tensor -- so it is marked review.
_TORCH_ONLY = (
    "clip_grad_norm_ -> torch.nn.utils.clip_grad_norm_(...).full_tensor(): "
    "exact on one FSDP2 mesh; "
    "fails on gradients spread over several meshes (use fsdp2_port.clip_grad_norm_ there)"
)


class ClipGradRule(Rule):
    CODE = "F2P006"
    SUMMARY = "FSDP1 m.clip_grad_norm_(...) -> fsdp2_port.clip_grad_norm_(m.parameters(), ...)"
    DESCRIPTION = SUMMARY
    TRIGGERS = ("clip_grad_norm_",)

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        func = original_node.func
        if not (isinstance(func, cst.Attribute) and func.attr.value == "clip_grad_norm_"):
            return updated_node
        if any(q.startswith(("torch.", "fsdp2_port.", "compat.")) for q in self.qualified(func)):
            return updated_node
        if self.ignored(original_node):
            return updated_node
        receiver = self.code(func.value)
        if not self.known_fsdp(func.value):
            self.flag(
                original_node,
                f"{receiver} is not known to be FSDP1: if it is, use "
                f"fsdp2_port.clip_grad_norm_({receiver}.parameters(), ...)",
            )
            return updated_node
        if arguments.bind(original_node, ("max_norm", "norm_type")) is None:
            self.flag(
                original_node,
                "clip_grad_norm_ with unusual arguments: use fsdp2_port.clip_grad_norm_ by hand",
            )
            return updated_node
        parameters = cst.Arg(
            cst.parse_expression(f"{receiver}.parameters()"),
            comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")),
        )
        args = [parameters, *updated_node.args]
        if self.options.runtime_dependency:
            self.add_needed_import("fsdp2_port")
            self.rewritten(
                original_node, "clip_grad_norm_ -> fsdp2_port.clip_grad_norm_ (plain global norm)"
            )
            return updated_node.with_changes(
                func=cst.parse_expression("fsdp2_port.clip_grad_norm_"), args=args
            )
        self.add_needed_import("torch")
        self.rewritten(original_node, _TORCH_ONLY, review=True)
        clip = updated_node.with_changes(
            func=cst.parse_expression("torch.nn.utils.clip_grad_norm_"), args=args
        )
        return cst.Call(func=cst.Attribute(value=clip, attr=cst.Name("full_tensor")))
