"""FSDP1 constructor arguments -> ``fully_shard`` keyword arguments (shared by F2P002/F2P003).

``convert`` either returns the new argument list, or the reasons (``blockers``) why the call
cannot be rewritten without changing what it computes. ``notes`` are things the rewrite
drops that only affect speed or memory: the call is rewritten and marked for review.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from codemods import arguments
from codemods.rule import Rule

#: ``FullyShardedDataParallel.__init__`` parameters, in positional order.
PARAMETERS = (
    "module",
    "process_group",
    "sharding_strategy",
    "cpu_offload",
    "auto_wrap_policy",
    "backward_prefetch",
    "mixed_precision",
    "ignored_modules",
    "param_init_fn",
    "device_id",
    "sync_module_states",
    "forward_prefetch",
    "limit_all_gathers",
    "use_orig_params",
    "ignored_states",
    "device_mesh",
)

_RESHARD = {
    "FULL_SHARD": True,
    "SHARD_GRAD_OP": False,
    "HYBRID_SHARD": True,
    "_HYBRID_SHARD_ZERO2": False,
}
_DROPPED = ("device_id", "limit_all_gathers", "use_orig_params")
_BLOCKING = {
    "param_init_fn": "param_init_fn: build the model on the meta device, fully_shard it, then "
    "model.to_empty(device=...) and initialise the parameters",
    "ignored_modules": "ignored_modules: pass "
    "ignored_params={p for m in MODULES for p in m.parameters()}",
    "ignored_states": "ignored_states: pass the parameters as ignored_params=",
}


@dataclass
class Conversion:
    module: cst.Arg | None = None
    args: list[cst.Arg] = field(default_factory=list)
    policy: cst.Arg | None = None
    blockers: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def convert(rule: Rule, call: cst.Call) -> Conversion:
    result = Conversion()
    bound = arguments.bind(call, PARAMETERS)
    if bound is None:
        result.blockers.append(
            "*args/**kwargs (or unknown arguments) into FSDP: spell the arguments out"
        )
        return result
    result.module = bound.get("module")
    if result.module is None:
        result.blockers.append("no module argument")
    strategy = bound.get("sharding_strategy")
    mesh = bound.get("device_mesh")
    for name, arg in bound.items():
        value = arg.value
        if name == "module" or name in _DROPPED:
            continue
        if name == "process_group":
            if not (
                arguments.is_none(value) or "torch.distributed.group.WORLD" in rule.qualified(value)
            ):
                result.blockers.append(
                    "process_group other than WORLD: build a DeviceMesh over it and pass mesh="
                )
        elif name == "sharding_strategy":
            _strategy(rule, arg, mesh, result)
        elif name == "cpu_offload":
            if not arguments.is_none(value):
                result.args.append(arguments.as_keyword("offload_policy", arg))
        elif name == "mixed_precision":
            if not arguments.is_none(value):
                result.args.append(arguments.as_keyword("mp_policy", arg))
        elif name == "auto_wrap_policy":
            if not arguments.is_none(value):
                result.policy = arg
        elif name == "backward_prefetch":
            kind = rule.fsdp1_name(value)
            if kind == "BackwardPrefetch.BACKWARD_POST" or not (
                arguments.is_none(value) or kind == "BackwardPrefetch.BACKWARD_PRE"
            ):
                result.notes.append(
                    "backward_prefetch dropped: FSDP2 prefetches one module ahead; "
                    "tune with set_modules_to_backward_prefetch"
                )
        elif name == "forward_prefetch":
            if arguments.literal_bool(value) is not False:
                result.notes.append(
                    "forward_prefetch dropped: use FSDPModule.set_modules_to_forward_prefetch"
                )
        elif name == "sync_module_states":
            if arguments.literal_bool(value) is not False:
                result.blockers.append(
                    "sync_module_states: FSDP2 does not broadcast; load rank 0's weights with "
                    "set_model_state_dict(..., options=StateDictOptions(full_state_dict=True, "
                    "broadcast_from_rank0=True))"
                )
        elif name == "device_mesh":
            if strategy is None or _strategy_name(rule, strategy) in _RESHARD:
                result.args.append(arguments.as_keyword("mesh", arg))
        elif name in _BLOCKING:
            if not arguments.is_none(value):
                result.blockers.append(_BLOCKING[name])
    return result


def _strategy_name(rule: Rule, arg: cst.Arg) -> str | None:
    name = rule.fsdp1_name(arg.value)
    if name is None or not name.startswith("ShardingStrategy."):
        return None
    return name.split(".", 1)[1]


def _strategy(rule: Rule, arg: cst.Arg, mesh: cst.Arg | None, result: Conversion) -> None:
    if arguments.is_none(arg.value):
        return
    kind = _strategy_name(rule, arg)
    if kind == "NO_SHARD":
        result.blockers.append(
            "NO_SHARD: FSDP2 always shards; use DDP (or replicate) for this module"
        )
    elif kind not in _RESHARD:
        result.blockers.append("sharding_strategy is not a literal ShardingStrategy member")
    elif kind in ("HYBRID_SHARD", "_HYBRID_SHARD_ZERO2") and mesh is None:
        result.blockers.append(
            f"{kind} without device_mesh: pass a 2-D (replicate, shard) DeviceMesh as mesh="
        )
    else:
        value = cst.Name("True" if _RESHARD[kind] else "False")
        result.args.append(
            arguments.as_keyword("reshard_after_forward", arg.with_changes(value=value))
        )
