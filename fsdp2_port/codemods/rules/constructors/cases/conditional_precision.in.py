import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import MixedPrecision
from torch.distributed.fsdp.wrap import ModuleWrapPolicy


def half(model, half_precision, dtype):
    return FSDP(
        model,
        mixed_precision=MixedPrecision(param_dtype=dtype) if half_precision else None,
    )


def full(model, cfg):
    return FSDP(
        model,
        mixed_precision=None if cfg.fp32 else MixedPrecision(
            param_dtype=torch.bfloat16, reduce_dtype=torch.float32, buffer_dtype=torch.bfloat16
        ),
    )


def layers(model, cfg, Block):
    return FSDP(
        model,
        auto_wrap_policy=ModuleWrapPolicy({Block}),
        mixed_precision=MixedPrecision(param_dtype=cfg.dtype) if cfg.mixed else None,
    )
