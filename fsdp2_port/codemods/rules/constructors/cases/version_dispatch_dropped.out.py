"""Asked to drop FSDP1 branches, the FSDP1 branch of a config switch migrates in place."""
# fixture: drop-fsdp1-branches

import torch
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from mylib.fsdp_utils import CPUOffloadPolicy  # FSDP2's, re-exported


def build(model, cfg):
    if cfg.strategy == "fsdp":
        model = fully_shard(
            model,
            mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16),
        )
    elif cfg.strategy == "fsdp2":
        for layer in model.layers:
            fully_shard(layer, mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16))
        fully_shard(model)
    else:
        raise NotImplementedError(cfg.strategy)
    return model


def build_reexported(model, cfg):
    if cfg.fsdp_version == 2:
        offload = CPUOffloadPolicy() if cfg.offload else None
        model = cfg.apply_fsdp2(model, offload)
    else:
        if cfg.lora:
            model = fully_shard(model)
        else:
            model = fully_shard(model)
    return model


def not_a_dispatch(model, cfg):
    if cfg.ddp:
        return torch.nn.parallel.DistributedDataParallel(model)
    return fully_shard(model)
