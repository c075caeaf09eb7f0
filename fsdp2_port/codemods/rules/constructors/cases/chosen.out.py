from typing import Optional

import torch
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from mymodel import Block
import fsdp2_port


def ml4m(model, dtype, policy_classes):
    if dtype == torch.bfloat16:
        mp_policy = MixedPrecisionPolicy(reduce_dtype=torch.bfloat16)
    else:
        mp_policy = None  # defaults to fp32
    for submodule in reversed(list(model.modules())):
        if submodule is not model and mp_policy is not None and isinstance(submodule, torch.nn.modules.batchnorm._BatchNorm):
            fully_shard(
                submodule,
                mp_policy=MixedPrecisionPolicy(param_dtype=torch.float32, output_dtype=None),
            )
        elif submodule is not model and isinstance(submodule, tuple(policy_classes)):
            fully_shard(submodule, mp_policy=mp_policy or MixedPrecisionPolicy())
    model = fully_shard(
        model,
        mp_policy=mp_policy or MixedPrecisionPolicy(),
    )
    return model


def flava(model, config, half_dtype):
    mp = None
    if config.half_reduce:
        mp = MixedPrecisionPolicy(
            reduce_dtype=half_dtype,
        )
    for submodule in reversed(list(model.modules())):
        if submodule is not model and mp is not None and isinstance(submodule, torch.nn.modules.batchnorm._BatchNorm):
            fully_shard(
                submodule,
                mp_policy=MixedPrecisionPolicy(param_dtype=torch.float32, output_dtype=None),
            )
        elif submodule is not model and isinstance(submodule, (Block,)):
            fully_shard(submodule, mp_policy=mp or MixedPrecisionPolicy())
    model = fully_shard(model, mp_policy=mp or MixedPrecisionPolicy())
    return model


def casts(model, flag):
    mp = None
    if flag:
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16)
    return fully_shard(model, mp_policy=mp or MixedPrecisionPolicy())


def verl(actor_module, auto_wrap_policy_found):
    if auto_wrap_policy_found is None:
        reshard_after_forward = False
    else:
        reshard_after_forward = True
    actor_module_fsdp = fully_shard(actor_module, reshard_after_forward=reshard_after_forward)
    return actor_module_fsdp


def qlora(model, args):
    from torch.distributed.fsdp import ShardingStrategy

    if args["sharding_strategy"] == "full_shard":
        sharding_strategy = ShardingStrategy.FULL_SHARD
    elif args["sharding_strategy"] == "ddp":
        sharding_strategy = ShardingStrategy.NO_SHARD
    else:
        raise ValueError("Invalid FSDP sharding strategy")
    mesh = fsdp2_port.mesh_like_fsdp1(sharding_strategy)
    reshard_after_forward = fsdp2_port.reshard_after_forward_like_fsdp1(sharding_strategy)
    return fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward)


def annotated(model, bf16):
    # FM_KD's: the name holds FSDP2's policy now, and its annotation says so
    mp: Optional[MixedPrecisionPolicy] = None
    if bf16:
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16)
    return fully_shard(model, mp_policy=mp or MixedPrecisionPolicy())
