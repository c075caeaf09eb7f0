"""``ignored_modules`` that ignores nothing (ExploreGraph's ``ignored_modules = []``, kept for
a commented-out list): nothing to pass; a list with modules in it, or one only the run fills:
their parameters, FSDP2's ``ignored_params``."""

import torch
from torch.distributed.fsdp import fully_shard


def nothing(model):
    return fully_shard(model)


def nothing_written_at_the_call(model):
    return fully_shard(model)


def something(model):
    ignored_modules = [model.head]
    ignored_params = {p for m in ignored_modules for p in m.parameters()}
    return fully_shard(model, ignored_params=ignored_params)


def filled_later(model):
    ignored_modules = []
    ignored_modules.append(model.head)
    ignored_params = {p for m in ignored_modules for p in m.parameters()}
    return fully_shard(model, ignored_params=ignored_params)
