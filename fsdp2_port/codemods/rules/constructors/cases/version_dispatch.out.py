"""A library that offers both FSDP versions by a config switch keeps its FSDP1 branch."""

import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import MixedPrecision, MixedPrecisionPolicy, fully_shard

from mylib.fsdp_utils import CPUOffloadPolicy  # FSDP2's, re-exported


def build(model, cfg):
    if cfg.strategy == "fsdp":
        # TODO(fsdp2-port): F2P002 FSDP(...) in the FSDP1 branch of a dispatch between FSDP versions (another branch uses FSDP2): kept, as library code may offer both on purpose; --drop-fsdp1-branches migrates it
        model = FSDP(model, mixed_precision=MixedPrecision(param_dtype=torch.bfloat16))
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
            # TODO(fsdp2-port): F2P002 FSDP(...) in the FSDP1 branch of a dispatch between FSDP versions (another branch uses FSDP2): kept, as library code may offer both on purpose; --drop-fsdp1-branches migrates it
            model = FSDP(model, use_orig_params=True)
        else:
            # TODO(fsdp2-port): F2P002 FSDP(...) in the FSDP1 branch of a dispatch between FSDP versions (another branch uses FSDP2): kept, as library code may offer both on purpose; --drop-fsdp1-branches migrates it
            model = FSDP(model)
    return model


def not_a_dispatch(model, cfg):
    if cfg.ddp:
        return torch.nn.parallel.DistributedDataParallel(model)
    return fully_shard(model)
