"""Exact type tests of the FSDP1 class (watermark-learnability's Trainer): isinstance then,
as fully_shard gives each module a class of its own."""

import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def wrap(model):
    if type(model) != FSDP:
        model = FSDP(model, device_id=torch.device("cpu"))
    return model


def is_wrapped(model):
    wrapped = type(model) is FSDP
    return wrapped, FSDP is type(model), type(model) is not FSDP
