"""A policy missing its own required argument (OpenRLHF's bare transformer_auto_wrap_policy):
FSDP1 raises TypeError on its first call and so does units_like_fsdp1; kept and marked (code
that catches the error never shards). One given its argument is not marked."""

import functools

from torch.distributed.fsdp import fully_shard
from torch.distributed.fsdp.wrap import lambda_auto_wrap_policy, transformer_auto_wrap_policy
from torch.nn.parallel import DistributedDataParallel as DDP
import fsdp2_port


def wrap(model):
    try:
        # TODO(fsdp2-port): F2P003 transformer_auto_wrap_policy without transformer_layer_cls: every call raises TypeError, FSDP1's as the migrated code's (code that catches it never shards): pass it
        auto_wrap = transformer_auto_wrap_policy
        units = fsdp2_port.units_like_fsdp1(model, auto_wrap)
        for submodule in reversed(list(model.modules())):
            if submodule is not model and submodule in units:
                fully_shard(submodule)
        return fully_shard(model)
    except Exception:
        return DDP(model)


def partial_without(model, classes):
    # TODO(fsdp2-port): F2P003 lambda_auto_wrap_policy without lambda_fn: every call raises TypeError, FSDP1's as the migrated code's (code that catches it never shards): pass it
    policy = functools.partial(lambda_auto_wrap_policy)
    units = fsdp2_port.units_like_fsdp1(model, policy)
    for submodule in reversed(list(model.modules())):
        if submodule is not model and submodule in units:
            fully_shard(submodule)
    return fully_shard(model)


def given(model, fn):
    for submodule in reversed(list(model.modules())):
        if submodule is not model and fn(submodule):
            fully_shard(submodule)
    return fully_shard(model)
