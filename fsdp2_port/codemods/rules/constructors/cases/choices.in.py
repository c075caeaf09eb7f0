import functools

import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import MixedPrecision, ShardingStrategy
from torch.distributed.fsdp.wrap import lambda_auto_wrap_policy

import fs_init


def setup_fsdp_sync(model, args):
    model = FSDP(
        model,
        auto_wrap_policy=functools.partial(
            lambda_auto_wrap_policy,
            lambda_fn=lambda m: m in model.get_fsdp_wrap_module_list(),
        ),
        process_group=fs_init.get_data_parallel_group(),
        sharding_strategy={
            "fsdp": ShardingStrategy.FULL_SHARD,
            "sdp": ShardingStrategy.SHARD_GRAD_OP,
        }[args.data_parallel],
        mixed_precision=MixedPrecision(
            param_dtype={
                "fp32": torch.float,
                "bf16": torch.bfloat16,
            }[args.precision],
            reduce_dtype=torch.float32,
        ),
        device_id=torch.cuda.current_device(),
        sync_module_states=True,
        limit_all_gathers=True,
        use_orig_params=True,
    )
    torch.cuda.synchronize()
    return model


def by_function(model, is_block, shard):
    return FSDP(
        model,
        auto_wrap_policy=functools.partial(lambda_auto_wrap_policy, lambda_fn=is_block),
        sharding_strategy=ShardingStrategy.FULL_SHARD if shard else ShardingStrategy.SHARD_GRAD_OP,
        mixed_precision=MixedPrecision(param_dtype=next(model.parameters()).dtype),
    )


def no_device_type(model, group):
    return FSDP(model, process_group=group)
