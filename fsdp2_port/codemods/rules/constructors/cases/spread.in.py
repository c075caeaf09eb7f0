import functools

from torch.distributed.fsdp import BackwardPrefetch, CPUOffload, MixedPrecision, ShardingStrategy
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

from mymodel import get_block


def build(policy, reference, rank, cfg):
    wrap_class = get_block(policy)
    auto_wrap = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={wrap_class})
    shared = dict(
        auto_wrap_policy=auto_wrap,
        sharding_strategy=ShardingStrategy.FULL_SHARD,
        cpu_offload=CPUOffload(offload_params=False),
        backward_prefetch=BackwardPrefetch.BACKWARD_PRE,
        device_id=rank,
        limit_all_gathers=False,
        use_orig_params=cfg.orig,
    )
    mp = MixedPrecision(param_dtype=cfg.dtype, reduce_dtype=cfg.dtype, buffer_dtype=cfg.dtype)
    policy = FSDP(policy, **shared, mixed_precision=mp)
    reference = FSDP(reference, **shared)
    return policy, reference


def read_elsewhere(model):
    options = {"sharding_strategy": ShardingStrategy.SHARD_GRAD_OP}
    print(options)
    return FSDP(model, **options)


def offload_flag(model, args):
    return FSDP(model, cpu_offload=CPUOffload(offload_params=True) if args["offload"] else None)


def strategy_by_name(model, classes):
    strategy = ShardingStrategy.SHARD_GRAD_OP
    return FSDP(model, sharding_strategy=strategy, auto_wrap_policy=functools.partial(transformer_auto_wrap_policy, transformer_layer_cls=classes))


def conditional(model, classes, wrap):
    model = FSDP(model, auto_wrap_policy=functools.partial(transformer_auto_wrap_policy, transformer_layer_cls=classes)) if wrap else model
    return model


def built_here(make, classes):
    return FSDP(make(), auto_wrap_policy=functools.partial(transformer_auto_wrap_policy, transformer_layer_cls=classes))
