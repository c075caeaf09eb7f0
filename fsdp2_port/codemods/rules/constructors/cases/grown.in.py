"""A dict of keyword arguments grown right before its constructor (SpecForge's dataflow
backend) is read key by key: a key stored under an ``if`` becomes code under that test.
``ignored_modules`` becomes ``ignored_params`` (no unit inside them, their buffers not cast);
FSDP1's performance arguments are dropped with a note. Where the order of the stores matters
(a key stored twice, a call, other code between them and the constructor) the keys are read
at run time; ignored modules with ``sync_module_states`` keep the bridge."""

import functools

import torch
from torch.distributed.fsdp import BackwardPrefetch, MixedPrecision, ShardingStrategy
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

from mymodel import frozen_of


def dataflow(model, pc, ignored_frozen_modules, block_classes):
    sharding = getattr(ShardingStrategy, pc.sharding_strategy)
    fsdp_kwargs = dict(
        use_orig_params=True,
        mixed_precision=MixedPrecision(param_dtype=pc.param_dtype, buffer_dtype=torch.float32),
        sharding_strategy=sharding,
        process_group=pc.fsdp_process_group,
    )
    if ignored_frozen_modules:
        fsdp_kwargs["ignored_modules"] = ignored_frozen_modules
    if block_classes:
        fsdp_kwargs.update(
            auto_wrap_policy=functools.partial(
                transformer_auto_wrap_policy, transformer_layer_cls=block_classes
            ),
            forward_prefetch=True,
            backward_prefetch=BackwardPrefetch.BACKWARD_PRE,
            limit_all_gathers=True,
        )
    model = FSDP(model, **fsdp_kwargs)
    return model


def stored(model, frozen, classes):
    kwargs = {"sharding_strategy": ShardingStrategy.SHARD_GRAD_OP}
    kwargs["ignored_modules"] = [frozen]
    kwargs.update(
        auto_wrap_policy=functools.partial(transformer_auto_wrap_policy, transformer_layer_cls=classes)
    )
    return FSDP(model, device_id=torch.device("cpu"), **kwargs)


def stored_twice(model, frozen, more):
    kwargs = {"ignored_modules": frozen}
    if more:
        kwargs["ignored_modules"] = more
    return FSDP(model, **kwargs)


def computed(model, frozen):
    kwargs = {}
    if frozen:
        kwargs["ignored_modules"] = frozen_of(model)
    return FSDP(model, **kwargs)


def apart(model, frozen):
    kwargs = {}
    if frozen:
        kwargs["ignored_modules"] = frozen
    print("sharding")
    return FSDP(model, **kwargs)


def synced(model, frozen):
    kwargs = dict(sync_module_states=True)
    kwargs["ignored_modules"] = frozen
    return FSDP(model, **kwargs)
