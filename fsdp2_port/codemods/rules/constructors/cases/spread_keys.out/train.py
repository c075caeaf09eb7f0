"""Spread keyword arguments whose keys are written out: read at run time, the keys checked."""

import fsdp2_port
import torch
from fsdp2_port import fully_shard_like_fsdp1
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.fsdp import CPUOffload, ShardingStrategy

from fsdp_config import eval_kwargs, fsdp_kwargs
from model import Net


class Trainer:
    # a class attribute a script may change (StableCascade's shape)
    defaults = {"sharding_strategy": ShardingStrategy.SHARD_GRAD_OP, "limit_all_gathers": True}

    def wrap(self, model):
        fsdp1_kwargs = fsdp2_port.kwargs_as_migrated(
            self.defaults,
            "sharding_strategy",
            "limit_all_gathers",
        )
        sharding_strategy = fsdp1_kwargs["sharding_strategy"]
        mesh = fsdp2_port.mesh_like_fsdp1(sharding_strategy)
        reshard_after_forward = fsdp2_port.reshard_after_forward_like_fsdp1(sharding_strategy)
        # limit_all_gathers: dropped; FSDP2 always keeps at most two all-gathers in flight
        return fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward)


class Wrapped:
    def __init__(self, model, name):
        self.model, self.name = model, name


def imported(device):
    # an argument of another call, evaluated first: lines go before the statement
    module = Net()
    fsdp1_kwargs = fsdp2_port.kwargs_as_migrated(
        fsdp_kwargs,
        "auto_wrap_policy",
        "mixed_precision",
        "use_orig_params",
    )
    mixed_precision = fsdp1_kwargs["mixed_precision"]
    auto_wrap_policy = fsdp1_kwargs["auto_wrap_policy"]
    buffer_dtype = fsdp2_port.buffer_dtype_like_fsdp1(mixed_precision)
    units = fsdp2_port.units_like_fsdp1(
        module,
        auto_wrap_policy,
        mixed_precision=mixed_precision,
    )
    if buffer_dtype is not None:
        for owner in module.modules():  # buffer_dtype
            if not isinstance(owner, fsdp2_port.full_precision_like_fsdp1(mixed_precision)):
                for buffer in owner.buffers(recurse=False):
                    if buffer.is_floating_point():
                        buffer.data = buffer.to(buffer_dtype)
    for submodule in reversed(list(module.modules())):
        if (
            submodule is not module
            and mixed_precision is not None
            and isinstance(submodule, fsdp2_port.full_precision_like_fsdp1(mixed_precision))
        ):
            fully_shard(
                submodule,
                mp_policy=MixedPrecisionPolicy(
                    param_dtype=torch.float32,
                    output_dtype=fsdp2_port.mp_policy_like_fsdp1(mixed_precision).param_dtype,
                ),
            )
        elif submodule is not module and submodule in units:
            fully_shard(submodule, mp_policy=fsdp2_port.mp_policy_like_fsdp1(mixed_precision))
    return Wrapped(
        fully_shard(
            module,
            mp_policy=fsdp2_port.mp_policy_like_fsdp1(mixed_precision, root=True),
        ),
        "policy",
    )


def evaluated(device):
    model = Net()
    fsdp1_kwargs = fsdp2_port.kwargs_as_migrated(eval_kwargs, "cpu_offload")
    cpu_offload = fsdp1_kwargs["cpu_offload"]
    model = fully_shard(
        model,
        offload_policy=fsdp2_port.offload_policy_like_fsdp1(cpu_offload),
    )
    return model


def logged(model):
    options = dict(sharding_strategy=ShardingStrategy.FULL_SHARD, use_orig_params=True)
    print(options)  # read by other code than the constructor
    fsdp1_kwargs = fsdp2_port.kwargs_as_migrated(
        options,
        "sharding_strategy",
        "use_orig_params",
    )
    sharding_strategy = fsdp1_kwargs["sharding_strategy"]
    mesh = fsdp2_port.mesh_like_fsdp1(sharding_strategy)
    reshard_after_forward = fsdp2_port.reshard_after_forward_like_fsdp1(sharding_strategy)
    return fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward)


def grown(model, offload, sync):
    # conditionally extended (open_lm's shape): a key it may lack reads as None, its default
    options = {"sharding_strategy": ShardingStrategy.FULL_SHARD}
    if offload:
        options["cpu_offload"] = CPUOffload(offload_params=True)
    if sync:
        options["sync_module_states"] = True
    fsdp1_kwargs = fsdp2_port.kwargs_as_migrated(
        options,
        "sharding_strategy",
        optional=("cpu_offload", "sync_module_states"),
    )
    sharding_strategy = fsdp1_kwargs["sharding_strategy"]
    cpu_offload = fsdp1_kwargs["cpu_offload"]
    mesh = fsdp2_port.mesh_like_fsdp1(sharding_strategy)
    reshard_after_forward = fsdp2_port.reshard_after_forward_like_fsdp1(sharding_strategy)
    if fsdp1_kwargs["sync_module_states"]:
        for group in mesh.get_all_groups():  # sync_module_states
            for tensor in [*model.parameters(), *model.buffers()]:
                torch.distributed.broadcast(tensor.detach(), group=group, group_src=0)
    return fully_shard(
        model,
        mesh=mesh,
        reshard_after_forward=reshard_after_forward,
        offload_policy=fsdp2_port.offload_policy_like_fsdp1(cpu_offload, mesh),
    )


def updated(model, extra):
    options = {"sharding_strategy": ShardingStrategy.FULL_SHARD}
    options.update(extra)  # keys only the run knows: the bridge
    return fully_shard_like_fsdp1(model, **options)


def late(device):
    # evaluated after a call with effects: the statement cannot be split
    return Wrapped(
        torch.manual_seed(0),
        fully_shard_like_fsdp1(Net(), **fsdp_kwargs, device_id=device),
    )


def fsdp_config(layer, use_mp):
    # a function that builds the keyword arguments (llm-research's shape)
    config = {}
    if use_mp:
        config["mixed_precision"] = None
    config["sharding_strategy"] = ShardingStrategy.HYBRID_SHARD
    config["forward_prefetch"] = True
    config["limit_all_gathers"] = True
    config["use_orig_params"] = True
    return config


def returned(model, layer, use_mp):
    config = fsdp_config(layer, use_mp)
    print(f"FSDP config: {config}")
    fsdp1_kwargs = fsdp2_port.kwargs_as_migrated(
        config,
        optional=(
            "mixed_precision",
            "sharding_strategy",
            "forward_prefetch",
            "limit_all_gathers",
            "use_orig_params",
        ),
    )
    sharding_strategy = fsdp1_kwargs["sharding_strategy"]
    mixed_precision = fsdp1_kwargs["mixed_precision"]
    mesh = fsdp2_port.mesh_like_fsdp1(sharding_strategy)
    reshard_after_forward = fsdp2_port.reshard_after_forward_like_fsdp1(sharding_strategy)
    buffer_dtype = fsdp2_port.buffer_dtype_like_fsdp1(mixed_precision)
    if buffer_dtype is not None:
        for buffer in model.buffers():  # buffer_dtype
            if buffer.is_floating_point():
                buffer.data = buffer.to(buffer_dtype)
    # forward_prefetch: dropped; FSDP2's is FSDPModule.set_modules_to_forward_prefetch
    # limit_all_gathers: dropped; FSDP2 always keeps at most two all-gathers in flight
    return fully_shard(
        model,
        mesh=mesh,
        reshard_after_forward=reshard_after_forward,
        mp_policy=fsdp2_port.mp_policy_like_fsdp1(mixed_precision, root=True),
    )
