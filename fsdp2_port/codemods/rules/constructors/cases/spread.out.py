import functools

from torch.distributed.fsdp import ShardingStrategy
from fsdp2_port import fully_shard_like_fsdp1
from torch.distributed.fsdp import (
    CPUOffloadPolicy,
    MixedPrecisionPolicy,
    OffloadPolicy,
    fully_shard,
)
from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

from mymodel import get_block
import fsdp2_port
import torch


def build(policy, reference, rank, cfg):
    wrap_class = get_block(policy)
    if cfg.dtype is not None:
        for owner in policy.modules():  # buffer_dtype
            if not isinstance(owner, torch.nn.modules.batchnorm._BatchNorm):
                for buffer in owner.buffers(recurse=False):
                    if buffer.is_floating_point():
                        buffer.data = buffer.to(cfg.dtype)
    for submodule in reversed(list(policy.modules())):
        if submodule is not policy and isinstance(submodule, torch.nn.modules.batchnorm._BatchNorm):
            fully_shard(
                submodule,
                reshard_after_forward=True,
                mp_policy=MixedPrecisionPolicy(param_dtype=torch.float32, output_dtype=cfg.dtype),
            )
        elif submodule is not policy and isinstance(submodule, (wrap_class,)):
            fully_shard(
                submodule,
                reshard_after_forward=True,
                mp_policy=MixedPrecisionPolicy(param_dtype=cfg.dtype, reduce_dtype=cfg.dtype, cast_forward_inputs=False),
            )
    # backward_prefetch: dropped; FSDP2 always prefetches the next unit (BACKWARD_PRE)
    # limit_all_gathers: dropped; FSDP2 always keeps at most two all-gathers in flight
    policy = fully_shard(policy, reshard_after_forward=True, mp_policy=MixedPrecisionPolicy(param_dtype=cfg.dtype, reduce_dtype=cfg.dtype))
    for submodule in reversed(list(reference.modules())):
        if submodule is not reference and isinstance(submodule, (wrap_class,)):
            fully_shard(submodule, reshard_after_forward=True)
    # backward_prefetch: dropped; FSDP2 always prefetches the next unit (BACKWARD_PRE)
    # limit_all_gathers: dropped; FSDP2 always keeps at most two all-gathers in flight
    reference = fully_shard(reference, reshard_after_forward=True)
    return policy, reference


def read_elsewhere(model):
    options = {"sharding_strategy": ShardingStrategy.SHARD_GRAD_OP}
    print(options)
    fsdp1_kwargs = fsdp2_port.kwargs_as_migrated(options, "sharding_strategy")
    sharding_strategy = fsdp1_kwargs["sharding_strategy"]
    mesh = fsdp2_port.mesh_like_fsdp1(sharding_strategy)
    reshard_after_forward = fsdp2_port.reshard_after_forward_like_fsdp1(sharding_strategy)
    return fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward)


def offload_flag(model, args):
    return fully_shard(model, offload_policy=CPUOffloadPolicy() if args["offload"] else OffloadPolicy())


def strategy_by_name(model, classes):
    for submodule in reversed(list(model.modules())):
        if submodule is not model and isinstance(submodule, tuple(classes)):
            fully_shard(submodule, reshard_after_forward=False)
    return fully_shard(model, reshard_after_forward=False)


def conditional(model, classes, wrap):
    model = fully_shard_like_fsdp1(
        model,
        auto_wrap_policy=functools.partial(transformer_auto_wrap_policy, transformer_layer_cls=classes),
    ) if wrap else model
    return model


def built_here(make, classes):
    module = make()
    for submodule in reversed(list(module.modules())):
        if submodule is not module and isinstance(submodule, tuple(classes)):
            fully_shard(submodule)
    return fully_shard(module)
