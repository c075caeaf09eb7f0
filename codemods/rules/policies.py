"""F2P004: ``MixedPrecision(...)`` -> ``MixedPrecisionPolicy(...)``.

And ``CPUOffload`` -> offload policies.

Rewritten wherever they are built (module-level constants included), so ``mixed_precision=MP``
can become ``mp_policy=MP`` at the call site. FSDP1 reduces in ``param_dtype`` when
``reduce_dtype`` is not given; the rewrite spells that out as ``reduce_dtype=<param_dtype>``.
"""

from __future__ import annotations

import libcst as cst

from codemods import arguments
from codemods.rule import Rule

_MIXED = (
    "param_dtype",
    "reduce_dtype",
    "buffer_dtype",
    "keep_low_precision_grads",
    "cast_forward_inputs",
    "cast_root_forward_inputs",
    "_module_classes_to_ignore",
)


class PoliciesRule(Rule):
    CODE = "F2P004"
    SUMMARY = (
        "MixedPrecision -> MixedPrecisionPolicy (reduce_dtype explicit), "
        "CPUOffload -> CPUOffloadPolicy/OffloadPolicy"
    )
    DESCRIPTION = SUMMARY
    TRIGGERS = ("MixedPrecision", "CPUOffload")

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        name = self.fsdp1_name(original_node.func)
        if name not in ("MixedPrecision", "CPUOffload") or self.ignored(original_node):
            return updated_node
        if name == "MixedPrecision":
            return self._mixed(original_node, updated_node)
        return self._offload(original_node, updated_node)

    def _mixed(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        bound = arguments.bind(original, _MIXED)
        if bound is None:
            self.flag(
                original,
                "MixedPrecision(...) with *args/**kwargs: rewrite to MixedPrecisionPolicy by hand",
            )
            return updated
        notes = []
        kept: list[cst.Arg] = []
        for name, arg in bound.items():
            flag = arguments.literal_bool(arg.value)
            if name in ("param_dtype", "reduce_dtype"):
                kept.append(arguments.as_keyword(name, arg))
            elif name == "cast_forward_inputs":
                if flag is not False:
                    kept.append(arguments.as_keyword(name, arg))
            elif name == "buffer_dtype":
                if not arguments.is_none(arg.value):
                    notes.append(
                        "buffer_dtype dropped (no FSDP2 equivalent): "
                        "cast the buffers to it before fully_shard"
                    )
            elif name == "keep_low_precision_grads":
                if flag is not False:
                    notes.append(
                        "keep_low_precision_grads dropped: "
                        "FSDP2 grads take the sharded parameters' dtype"
                    )
            elif name == "cast_root_forward_inputs":
                if flag is not True:
                    notes.append(
                        "cast_root_forward_inputs dropped: "
                        "FSDP2 casts every module's inputs (cast_forward_inputs)"
                    )
            else:
                notes.append(
                    "_module_classes_to_ignore dropped: "
                    "fully_shard those modules with their own mp_policy"
                )
        param = bound.get("param_dtype")
        args = arguments.rebuild(original.args, kept) if kept else []
        if param is not None and "reduce_dtype" not in bound and arguments.is_simple(param.value):
            index = next(
                i
                for i, a in enumerate(args)
                if a.keyword is not None and a.keyword.value == "param_dtype"
            )
            args = arguments.insert_after(
                args, index, arguments.new_keyword("reduce_dtype", param.value)
            )
        self.add_needed_import(self.options.fsdp2_module, "MixedPrecisionPolicy")
        message = "MixedPrecision(...) -> MixedPrecisionPolicy(...)"
        self.rewritten(original, "; ".join([message, *notes]), review=bool(notes))
        return updated.with_changes(func=cst.Name("MixedPrecisionPolicy"), args=args)

    def _offload(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        bound = arguments.bind(original, ("offload_params",))
        offload = (
            arguments.literal_bool(bound["offload_params"].value)
            if bound and "offload_params" in bound
            else False
        )
        if bound is None or offload is None:
            self.flag(
                original,
                "CPUOffload(...) with a runtime value: use CPUOffloadPolicy() or OffloadPolicy()",
            )
            return updated
        policy = "CPUOffloadPolicy" if offload else "OffloadPolicy"
        self.add_needed_import(self.options.fsdp2_module, policy)
        self.rewritten(original, f"CPUOffload(...) -> {policy}()")
        return updated.with_changes(
            func=cst.Name(policy), args=[], whitespace_before_args=cst.SimpleWhitespace("")
        )
