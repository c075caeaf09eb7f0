"""Spread keyword arguments whose keys are written out: read at run time, the keys checked."""

import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import CPUOffload, ShardingStrategy

from fsdp_config import eval_kwargs, fsdp_kwargs
from model import Net


class Trainer:
    # a class attribute a script may change (StableCascade's shape)
    defaults = {"sharding_strategy": ShardingStrategy.SHARD_GRAD_OP, "limit_all_gathers": True}

    def wrap(self, model):
        return FSDP(model, **self.defaults)


class Wrapped:
    def __init__(self, model, name):
        self.model, self.name = model, name


def imported(device):
    # an argument of another call, evaluated first: lines go before the statement
    return Wrapped(FSDP(Net(), **fsdp_kwargs, device_id=device), "policy")


def evaluated(device):
    model = FSDP(Net(), **eval_kwargs, device_id=device)
    return model


def logged(model):
    options = dict(sharding_strategy=ShardingStrategy.FULL_SHARD, use_orig_params=True)
    print(options)  # read by other code than the constructor
    return FSDP(model, **options)


def grown(model, offload, sync):
    # conditionally extended (open_lm's shape): a key it may lack reads as None, its default
    options = {"sharding_strategy": ShardingStrategy.FULL_SHARD}
    if offload:
        options["cpu_offload"] = CPUOffload(offload_params=True)
    if sync:
        options["sync_module_states"] = True
    return FSDP(model, **options)


def updated(model, extra):
    options = {"sharding_strategy": ShardingStrategy.FULL_SHARD}
    options.update(extra)  # keys only the run knows: the bridge
    return FSDP(model, **options)


def late(device):
    # evaluated after a call with effects: the statement cannot be split
    return Wrapped(torch.manual_seed(0), FSDP(Net(), **fsdp_kwargs, device_id=device))


def fsdp_config(layer, use_mp):
    # a function that builds the keyword arguments (llm-research's shape)
    config = {}
    if use_mp:
        config["mixed_precision"] = None
    config["sharding_strategy"] = ShardingStrategy.HYBRID_SHARD
    config["forward_prefetch"] = True
    config["limit_all_gathers"] = True
    config["use_orig_params"] = True
    return config


def returned(model, layer, use_mp):
    config = fsdp_config(layer, use_mp)
    print(f"FSDP config: {config}")
    return FSDP(model, **config)
