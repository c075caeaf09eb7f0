"""Values only the run knows: the plain form reads them with fsdp2_port's readers."""

import torch
from fsdp2_port import fully_shard_like_fsdp1
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import (
    CPUOffloadPolicy,
    MixedPrecisionPolicy,
    OffloadPolicy,
    fully_shard,
)
from torch.distributed.tensor import DTensor
from torch.distributed.fsdp import MixedPrecision, ShardingStrategy

from trainer.config import get_wrap_policy, precision_of
import dataclasses
import fsdp2_port


def worker(model, cfg, device_mesh):
    """verl's shape: every value is computed elsewhere."""
    mixed_precision = precision_of(cfg)
    auto_wrap_policy = get_wrap_policy(model, cfg.wrap)
    cpu_offload = cfg.offload_policy()
    device_id = cfg.device()
    sharding_strategy = getattr(ShardingStrategy, cfg.strategy)
    mesh = fsdp2_port.mesh_like_fsdp1(
        sharding_strategy,
        device_mesh=device_mesh,
        device_id=device_id,
    )
    reshard_after_forward = fsdp2_port.reshard_after_forward_like_fsdp1(sharding_strategy)
    buffer_dtype = fsdp2_port.buffer_dtype_like_fsdp1(mixed_precision)
    units = fsdp2_port.units_like_fsdp1(model, auto_wrap_policy, mixed_precision=mixed_precision)
    fsdp2_port.materialize_like_fsdp1(
        model,
        cfg.init_fn,
        is_unit=lambda unit: unit in units,
        device=device_id,
    )
    if buffer_dtype is not None:
        for owner in model.modules():  # buffer_dtype
            if not isinstance(owner, fsdp2_port.full_precision_like_fsdp1(mixed_precision)):
                for buffer in owner.buffers(recurse=False):
                    if buffer.is_floating_point():
                        buffer.data = buffer.to(buffer_dtype)
    for submodule in reversed(list(model.modules())):
        if (
            submodule is not model
            and mixed_precision is not None
            and isinstance(submodule, fsdp2_port.full_precision_like_fsdp1(mixed_precision))
        ):
            for tensor in [*submodule.parameters(), *submodule.buffers()]:  # device_id, sync_module_states
                if not isinstance(tensor, DTensor):  # not sharded yet
                    tensor.data = tensor.to(device_id)
                    for group in mesh.get_all_groups():
                        torch.distributed.broadcast(tensor.detach(), group=group, group_src=0)
            fully_shard(
                submodule,
                mesh=mesh,
                reshard_after_forward=reshard_after_forward,
                offload_policy=fsdp2_port.offload_policy_like_fsdp1(cpu_offload, mesh),
                mp_policy=MixedPrecisionPolicy(
                    param_dtype=torch.float32,
                    output_dtype=fsdp2_port.mp_policy_like_fsdp1(mixed_precision).param_dtype,
                ),
            )
        elif submodule is not model and submodule in units:
            for tensor in [*submodule.parameters(), *submodule.buffers()]:  # device_id, sync_module_states
                if not isinstance(tensor, DTensor):  # not sharded yet
                    tensor.data = tensor.to(device_id)
                    for group in mesh.get_all_groups():
                        torch.distributed.broadcast(tensor.detach(), group=group, group_src=0)
            fully_shard(
                submodule,
                mesh=mesh,
                reshard_after_forward=reshard_after_forward,
                mp_policy=fsdp2_port.mp_policy_like_fsdp1(mixed_precision),
                offload_policy=fsdp2_port.offload_policy_like_fsdp1(cpu_offload, mesh),
            )
    for tensor in [*model.parameters(), *model.buffers()]:  # device_id, sync_module_states
        if not isinstance(tensor, DTensor):  # not sharded yet
            tensor.data = tensor.to(device_id)
            for group in mesh.get_all_groups():
                torch.distributed.broadcast(tensor.detach(), group=group, group_src=0)
    return fully_shard(
        model,
        mesh=mesh,
        reshard_after_forward=reshard_after_forward,
        mp_policy=fsdp2_port.mp_policy_like_fsdp1(mixed_precision, root=True),
        offload_policy=fsdp2_port.offload_policy_like_fsdp1(cpu_offload, mesh),
    )


def hybrid(model, block):
    """HYBRID_SHARD without a mesh: FSDP1's default groups, built at run time."""
    mesh = fsdp2_port.mesh_like_fsdp1(ShardingStrategy.HYBRID_SHARD)
    return fully_shard(model, mesh=mesh, reshard_after_forward=True)


def offload_flag(model, offload):
    """A flag only the run knows."""
    return fully_shard(model, offload_policy=fsdp2_port.offload_policy_like_fsdp1(offload))


def offload_by_config(model, config):
    """CPUOffload(offload_params=<a run-time flag>) is plain: the flag chooses the policy."""
    return fully_shard(
        model,
        offload_policy=CPUOffloadPolicy() if config.fsdp.param_offload else OffloadPolicy(),
    )


def offload_by_call(model, config):
    """A flag computed by a call is evaluated once, as FSDP1 evaluated it."""
    offload_params = config.get("offload")
    return fully_shard(model, offload_policy=CPUOffloadPolicy() if offload_params else OffloadPolicy())


def shared_computed_dtype(model, head, get_dtype):
    """A MixedPrecision two constructors share, with a dtype computed by a call: FSDP1 called
    it once, so both read the binding at run time."""
    mp = MixedPrecision(param_dtype=get_dtype())
    buffer_dtype = fsdp2_port.buffer_dtype_like_fsdp1(mp)
    if buffer_dtype is not None:
        for buffer in model.buffers():  # buffer_dtype
            if buffer.is_floating_point():
                buffer.data = buffer.to(buffer_dtype)
    model = fully_shard(model, mp_policy=fsdp2_port.mp_policy_like_fsdp1(mp, root=True))
    buffer_dtype = fsdp2_port.buffer_dtype_like_fsdp1(mp)
    if buffer_dtype is not None:
        for buffer in head.buffers():  # buffer_dtype
            if buffer.is_floating_point():
                buffer.data = buffer.to(buffer_dtype)
    head = fully_shard(head, mp_policy=fsdp2_port.mp_policy_like_fsdp1(mp, root=True))
    return model, head


def offload_chosen(model, config):
    """verl's sft trainer: offload chosen in branches becomes the policy it means there."""
    if not config.cpu_offload:
        cpu_offload = OffloadPolicy()
    else:
        cpu_offload = CPUOffloadPolicy() if config.offload_params else OffloadPolicy()
    return fully_shard(model, offload_policy=cpu_offload)


def mesh_sync(model, device_mesh):
    """sync_module_states within the caller's mesh: a broadcast over each of its groups."""
    for group in device_mesh.get_all_groups():  # sync_module_states
        for tensor in [*model.parameters(), *model.buffers()]:
            torch.distributed.broadcast(tensor.detach(), group=group, group_src=0)
    return fully_shard(model, mesh=device_mesh)


def mesh_and_group(model, device_mesh, group):
    """FSDP1 refuses both: so does fully_shard_like_fsdp1."""
    return fully_shard_like_fsdp1(model, device_mesh=device_mesh, process_group=group)


def verl_actor(actor_module, fsdp_config, is_ref, get_fsdp_wrap_policy):
    """verl's actor: dtypes from a config, mixed precision dropped for the reference model."""
    mixed_precision_config = fsdp_config.get("mixed_precision", None)
    if mixed_precision_config is not None:
        param_dtype = mixed_precision_config.param_dtype
        buffer_dtype = mixed_precision_config.buffer_dtype
    else:
        param_dtype = torch.bfloat16
        buffer_dtype = torch.float32
    mixed_precision = MixedPrecisionPolicy(
        param_dtype=param_dtype, reduce_dtype=torch.float32
    )
    if is_ref:
        mixed_precision = None
    auto_wrap_policy = get_fsdp_wrap_policy(actor_module)
    units = fsdp2_port.units_like_fsdp1(
        actor_module,
        auto_wrap_policy,
        mixed_precision=mixed_precision,
    )
    if mixed_precision is not None and buffer_dtype is not None:
        for owner in actor_module.modules():  # buffer_dtype
            if not isinstance(owner, torch.nn.modules.batchnorm._BatchNorm):
                for buffer in owner.buffers(recurse=False):
                    if buffer.is_floating_point():
                        buffer.data = buffer.to(buffer_dtype)
    for submodule in reversed(list(actor_module.modules())):
        if (
            submodule is not actor_module
            and mixed_precision is not None
            and isinstance(submodule, torch.nn.modules.batchnorm._BatchNorm)
        ):
            fully_shard(
                submodule,
                mp_policy=MixedPrecisionPolicy(
                    param_dtype=torch.float32,
                    output_dtype=mixed_precision.param_dtype,
                ),
            )
        elif submodule is not actor_module and submodule in units:
            fully_shard(
                submodule,
                mp_policy=dataclasses.replace(mixed_precision, cast_forward_inputs=False) if mixed_precision else MixedPrecisionPolicy(),
            )
    actor_module_fsdp = fully_shard(
        actor_module,
        mp_policy=mixed_precision or MixedPrecisionPolicy(),
    )
    return actor_module_fsdp


def chain(model, args):
    """fsdp_qlora's chain, without the hybrids, on CUDA: each branch binds the pair it
    means, its mesh built as FSDP1 built its group."""
    if args["sharding_strategy"] == "full_shard":
        reshard_after_forward, mesh = True, init_device_mesh(
            "cuda",
            (torch.distributed.get_world_size(),),
        )
    elif args["sharding_strategy"] == "shard_grad_op":
        reshard_after_forward, mesh = False, init_device_mesh(
            "cuda",
            (torch.distributed.get_world_size(),),
        )
    elif args["sharding_strategy"] == "ddp":
        reshard_after_forward, mesh = False, init_device_mesh(
            "cuda",
            (torch.distributed.get_world_size(), 1),
            mesh_dim_names=("replicate", "shard"),
        )
    else:
        raise ValueError("Invalid FSDP sharding strategy")
    model.to(torch.cuda.current_device())
    if args["low_memory"]:
        for group in mesh.get_all_groups():  # sync_module_states
            for tensor in [*model.parameters(), *model.buffers()]:
                torch.distributed.broadcast(tensor.detach(), group=group, group_src=0)
    model = fully_shard(
        model,
        mesh=mesh,
        reshard_after_forward=reshard_after_forward,
    )
    return model


def no_shard_on_cuda(model):
    """NO_SHARD with the device written: replicas of one rank, as init_device_mesh."""
    mesh = init_device_mesh(
        "cuda",
        (torch.distributed.get_world_size(), 1),
        mesh_dim_names=("replicate", "shard"),
    )
    return fully_shard(model, mesh=mesh, reshard_after_forward=False)


def hybrid_on_cuda(model):
    """HYBRID_SHARD: its groups (a node's devices) only the run knows."""
    mesh = fsdp2_port.mesh_like_fsdp1(ShardingStrategy.HYBRID_SHARD, device_id=torch.device("cuda"))
    return fully_shard(model, mesh=mesh, reshard_after_forward=True)
