from functools import partial
from typing import Optional

import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import MixedPrecision
from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

from mymodel import Block


def ml4m(model, dtype, policy_classes):
    if dtype == torch.bfloat16:
        mp_policy = MixedPrecision(reduce_dtype=torch.bfloat16)
    else:
        mp_policy = None  # defaults to fp32
    model = FSDP(
        model,
        auto_wrap_policy=partial(transformer_auto_wrap_policy, transformer_layer_cls=policy_classes),
        mixed_precision=mp_policy,
        device_id=torch.cuda.current_device(),
        use_orig_params=True,
    )
    return model


def flava(model, config, half_dtype):
    mp = None
    if config.half_reduce:
        mp = MixedPrecision(
            reduce_dtype=half_dtype,
        )
    model = FSDP(model, mixed_precision=mp, auto_wrap_policy=partial(transformer_auto_wrap_policy, transformer_layer_cls={Block}))
    return model


def casts(model, flag):
    mp = None
    if flag:
        mp = MixedPrecision(param_dtype=torch.bfloat16)
    return FSDP(model, mixed_precision=mp)


def verl(actor_module, auto_wrap_policy_found):
    from torch.distributed.fsdp import ShardingStrategy

    if auto_wrap_policy_found is None:
        sharding_strategy = ShardingStrategy.SHARD_GRAD_OP
    else:
        sharding_strategy = ShardingStrategy.FULL_SHARD
    actor_module_fsdp = FSDP(actor_module, sharding_strategy=sharding_strategy, use_orig_params=False)
    return actor_module_fsdp


def qlora(model, args):
    from torch.distributed.fsdp import ShardingStrategy

    if args["sharding_strategy"] == "full_shard":
        sharding_strategy = ShardingStrategy.FULL_SHARD
    elif args["sharding_strategy"] == "ddp":
        sharding_strategy = ShardingStrategy.NO_SHARD
    else:
        raise ValueError("Invalid FSDP sharding strategy")
    return FSDP(model, sharding_strategy=sharding_strategy)


def annotated(model, bf16):
    # FM_KD's: the name holds FSDP2's policy now, and its annotation says so
    mp: Optional[MixedPrecision] = None
    if bf16:
        mp = MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16)
    return FSDP(model, mixed_precision=mp)
