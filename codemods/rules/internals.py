"""F2P010: FSDP1 APIs and internals with no mechanical FSDP2 rewrite, each with what to do.

Flagged: ``summon_full_params``, ``FSDP.fsdp_modules``, ``FSDP.set_state_dict_type``,
``ShardedGradScaler``, ``.module`` and the flat-parameter handles (``_handle`` ...) on a known
FSDP1 module, and the FSDP1-only internals ``_fsdp_wrapped_module`` / ``_flat_param``
(attributes or key strings, anywhere).
"""

from __future__ import annotations

import libcst as cst

from codemods.rule import Rule

_FSDP = "FullyShardedDataParallel."
_NAMED = {
    _FSDP + "summon_full_params": "summon_full_params: FSDP2 parameters are DTensors; "
    "use p.full_tensor() (or FSDPModule.unshard())",
    _FSDP + "fsdp_modules": "FSDP.fsdp_modules(m): "
    "use [x for x in m.modules() if isinstance(x, FSDPModule)]",
    _FSDP + "set_state_dict_type": "set_state_dict_type: FSDP2 picks the state dict per call "
    "(get_model_state_dict options)",
    "ShardedGradScaler": "ShardedGradScaler: "
    "use torch.amp.GradScaler, which handles DTensor gradients",
}

_INTERNALS = ("_fsdp_wrapped_module", "_flat_param")
#: Attributes flagged only on a receiver known to be an FSDP1 module (the names are common).
_ON_RECEIVER = ("module", "summon_full_params", "_handle", "_all_handles", "_fsdp_handles")
_INTERNAL = (
    "{}: FSDP1 internal; FSDP2 keeps the original modules and parameters "
    "(no wrapper, no flat parameter)"
)


class InternalsRule(Rule):
    CODE = "F2P010"
    SUMMARY = (
        "flag FSDP1 APIs/internals without a mechanical rewrite (summon_full_params, .module, ...)"
    )
    DESCRIPTION = SUMMARY
    TRIGGERS = (
        "summon_full_params",
        "fsdp_modules",
        "set_state_dict_type",
        "ShardedGradScaler",
        "_fsdp_wrapped_module",
        "_flat_param",
        ".module",
        "_handle",
    )

    def visit_Import(self, node: cst.Import) -> bool:
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        name = self.fsdp1_name(node)
        if name in _NAMED:
            self._flag(node, _NAMED[name])
            return False
        attr = node.attr.value
        if attr in _INTERNALS:
            self._flag(node, _INTERNAL.format(attr))
        elif attr in _ON_RECEIVER and self.known_fsdp(node.value, fsdp1_only=True):
            what = self.code(node.value)
            if attr == "module":
                self._flag(node, f"{what}.module: FSDP2 does not wrap; use {what} itself")
            elif attr == "summon_full_params":
                self._flag(node, _NAMED[_FSDP + attr])
            else:
                self._flag(node, _INTERNAL.format(attr))
        return True

    def visit_Name(self, node: cst.Name) -> None:
        name = self.fsdp1_name(node)
        if name in _NAMED:
            self._flag(node, _NAMED[name])

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        for internal in _INTERNALS:
            if internal in node.value:
                self._flag(
                    node,
                    f"{internal} in a string: "
                    "FSDP2 state-dict keys and module names carry no such prefix",
                )

    def _flag(self, node: cst.CSTNode, message: str) -> None:
        if not self.ignored(node):
            self.flag(node, message)
