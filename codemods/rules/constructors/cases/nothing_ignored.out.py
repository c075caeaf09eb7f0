"""``ignored_modules`` that ignores nothing (ExploreGraph's ``ignored_modules = []``, kept for
a commented-out list): the plain form; a list with modules in it, or one only the run fills,
keeps the bridge, which ignores them as FSDP1 does."""

import torch
from fsdp2_port import fully_shard_like_fsdp1
from torch.distributed.fsdp import fully_shard


def nothing(model):
    return fully_shard(model)


def nothing_written_at_the_call(model):
    return fully_shard(model)


def something(model):
    ignored_modules = [model.head]
    return fully_shard_like_fsdp1(model, ignored_modules=ignored_modules)


def filled_later(model):
    ignored_modules = []
    ignored_modules.append(model.head)
    return fully_shard_like_fsdp1(model, ignored_modules=ignored_modules)
