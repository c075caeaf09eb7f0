"""``ignored_modules`` that ignores nothing (ExploreGraph's ``ignored_modules = []``, kept for
a commented-out list): nothing to pass; a list with modules in it, or one only the run fills:
their parameters, FSDP2's ``ignored_params``."""

import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def nothing(model):
    ignored_modules = []
    return FSDP(model, device_id=torch.cuda.current_device(), ignored_modules=ignored_modules)


def nothing_written_at_the_call(model):
    return FSDP(model, ignored_states=set())


def something(model):
    ignored_modules = [model.head]
    return FSDP(model, ignored_modules=ignored_modules)


def filled_later(model):
    ignored_modules = []
    ignored_modules.append(model.head)
    return FSDP(model, ignored_modules=ignored_modules)
