"""A policy missing its own required argument (OpenRLHF's bare transformer_auto_wrap_policy):
FSDP1 raises TypeError on its first call and so does units_like_fsdp1; kept and marked (code
that catches the error never shards). One given its argument is not marked."""

import functools

import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import lambda_auto_wrap_policy, transformer_auto_wrap_policy
from torch.nn.parallel import DistributedDataParallel as DDP


def wrap(model):
    try:
        auto_wrap = transformer_auto_wrap_policy
        return FSDP(model, auto_wrap_policy=auto_wrap, device_id=torch.cuda.current_device())
    except Exception:
        return DDP(model)


def partial_without(model, classes):
    policy = functools.partial(lambda_auto_wrap_policy)
    return FSDP(model, auto_wrap_policy=policy, device_id=torch.cuda.current_device())


def given(model, fn):
    policy = functools.partial(lambda_auto_wrap_policy, lambda_fn=fn)
    return FSDP(model, auto_wrap_policy=policy, device_id=torch.cuda.current_device())
