"""An argument FSDP2 has no use for, computed by a call (oumi's ``use_orig_params``): the
plain form still evaluates it, once, where FSDP1 did, bound to the argument's name."""

import torch
from torch.distributed.fsdp import fully_shard


def _use_orig_params(config):
    return config.lora


def wrap(model, config):
    use_orig_params = _use_orig_params(config)
    # limit_all_gathers: dropped; FSDP2 always keeps at most two all-gathers in flight
    return fully_shard(model)
