"""A dict of keyword arguments grown right before its constructor (SpecForge's dataflow
backend) is read key by key: a key stored under an ``if`` becomes code under that test.
``ignored_modules`` becomes ``ignored_params`` (no unit inside them, their buffers not cast);
FSDP1's performance arguments are dropped with a note. Where the order of the stores matters
(a key stored twice, a call, other code between them and the constructor) the keys are read
at run time; ignored modules with ``sync_module_states`` keep the bridge."""

import torch
from torch.distributed.fsdp import ShardingStrategy
from fsdp2_port import fully_shard_like_fsdp1
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from mymodel import frozen_of
import fsdp2_port


def dataflow(model, pc, ignored_frozen_modules, block_classes):
    sharding = getattr(ShardingStrategy, pc.sharding_strategy)
    mesh = fsdp2_port.mesh_like_fsdp1(sharding, process_group=pc.fsdp_process_group)
    reshard_after_forward = fsdp2_port.reshard_after_forward_like_fsdp1(sharding)
    ignored_modules = (
        {sub for m in ignored_frozen_modules for sub in m.modules()}
        if ignored_frozen_modules
        else set()
    )
    ignored_params = {p for m in ignored_modules for p in m.parameters()}
    for owner in model.modules():  # buffer_dtype
        if (
            owner not in ignored_modules
            and not (block_classes and isinstance(owner, torch.nn.modules.batchnorm._BatchNorm))
        ):
            for buffer in owner.buffers(recurse=False):
                if buffer.is_floating_point():
                    buffer.data = buffer.to(torch.float32)
    if block_classes:
        for submodule in reversed(list(model.modules())):
            if (
                submodule is not model
                and submodule not in ignored_modules
                and isinstance(submodule, torch.nn.modules.batchnorm._BatchNorm)
            ):
                fully_shard(
                    submodule,
                    mesh=mesh,
                    reshard_after_forward=reshard_after_forward,
                    ignored_params=ignored_params,
                    mp_policy=MixedPrecisionPolicy(
                        param_dtype=torch.float32,
                        output_dtype=pc.param_dtype,
                    ),
                )
            elif (
                submodule is not model
                and submodule not in ignored_modules
                and isinstance(submodule, tuple(block_classes))
            ):
                fully_shard(
                    submodule,
                    mesh=mesh,
                    reshard_after_forward=reshard_after_forward,
                    mp_policy=MixedPrecisionPolicy(
                        param_dtype=pc.param_dtype,
                        cast_forward_inputs=False,
                    ),
                    ignored_params=ignored_params,
                )
    # forward_prefetch: dropped; FSDP2's is FSDPModule.set_modules_to_forward_prefetch
    # backward_prefetch: dropped; FSDP2 always prefetches the next unit (BACKWARD_PRE)
    # limit_all_gathers: dropped; FSDP2 always keeps at most two all-gathers in flight
    model = fully_shard(
        model,
        mesh=mesh,
        reshard_after_forward=reshard_after_forward,
        mp_policy=MixedPrecisionPolicy(param_dtype=pc.param_dtype),
        ignored_params=ignored_params,
    )
    return model


def stored(model, frozen, classes):
    ignored = [frozen]
    mesh = init_device_mesh("cpu", (torch.distributed.get_world_size(),))
    ignored_modules = {sub for m in ignored for sub in m.modules()}
    ignored_params = {p for m in ignored_modules for p in m.parameters()}
    for submodule in reversed(list(model.modules())):
        if (
            submodule is not model
            and submodule not in ignored_modules
            and isinstance(submodule, tuple(classes))
        ):
            fully_shard(
                submodule,
                mesh=mesh,
                reshard_after_forward=False,
                ignored_params=ignored_params,
            )
    return fully_shard(model, mesh=mesh, reshard_after_forward=False, ignored_params=ignored_params)


def stored_twice(model, frozen, more):
    kwargs = {"ignored_modules": frozen}
    if more:
        kwargs["ignored_modules"] = more
    fsdp1_kwargs = fsdp2_port.kwargs_as_migrated(kwargs, "ignored_modules")
    ignored = fsdp1_kwargs["ignored_modules"]
    ignored_params = {p for m in ignored or () for p in m.parameters()}
    return fully_shard(model, ignored_params=ignored_params)


def computed(model, frozen):
    kwargs = {}
    if frozen:
        kwargs["ignored_modules"] = frozen_of(model)
    fsdp1_kwargs = fsdp2_port.kwargs_as_migrated(kwargs, optional=("ignored_modules",))
    ignored = fsdp1_kwargs["ignored_modules"]
    ignored_params = {p for m in ignored or () for p in m.parameters()}
    return fully_shard(model, ignored_params=ignored_params)


def apart(model, frozen):
    kwargs = {}
    if frozen:
        kwargs["ignored_modules"] = frozen
    print("sharding")
    fsdp1_kwargs = fsdp2_port.kwargs_as_migrated(kwargs, optional=("ignored_modules",))
    ignored = fsdp1_kwargs["ignored_modules"]
    ignored_params = {p for m in ignored or () for p in m.parameters()}
    return fully_shard(model, ignored_params=ignored_params)


def synced(model, frozen):
    kwargs = dict(sync_module_states=True)
    kwargs["ignored_modules"] = frozen
    return fully_shard_like_fsdp1(model, **kwargs)
