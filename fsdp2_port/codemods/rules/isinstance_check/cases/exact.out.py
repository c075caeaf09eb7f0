"""Exact type tests of the FSDP1 class (watermark-learnability's Trainer): isinstance then,
as fully_shard gives each module a class of its own."""

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, fully_shard


def wrap(model):
    if not isinstance(model, FSDPModule):
        mesh = init_device_mesh("cpu", (torch.distributed.get_world_size(),))
        model = fully_shard(model, mesh=mesh)
    return model


def is_wrapped(model):
    wrapped = isinstance(model, FSDPModule)
    return wrapped, isinstance(model, FSDPModule), (not isinstance(model, FSDPModule))
