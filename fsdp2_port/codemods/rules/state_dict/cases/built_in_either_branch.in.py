"""A model built in either branch of an ``if`` and loaded before the wrap is a plain module
there: its ``load_state_dict`` keeps its text. One that may come from elsewhere takes the form
right on any model."""
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


class Big(torch.nn.Module):
    pass


class Small(torch.nn.Module):
    pass


def build(cfg, state):
    if cfg.big:
        model = Big()
    else:
        model = Small()
    model.load_state_dict(state)
    return FSDP(model)


def maybe_built(cfg, state, given):
    model = given
    if cfg.fresh:
        model = Small()
    model.load_state_dict(state)
    return FSDP(model)
