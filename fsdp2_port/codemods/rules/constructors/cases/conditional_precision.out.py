import torch
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard


def half(model, half_precision, dtype):
    return fully_shard(
        model,
        mp_policy=MixedPrecisionPolicy(param_dtype=dtype) if half_precision else MixedPrecisionPolicy(),
    )


def full(model, cfg):
    if not cfg.fp32:
        for buffer in model.buffers():  # buffer_dtype
            if buffer.is_floating_point():
                buffer.data = buffer.to(torch.bfloat16)
    return fully_shard(
        model,
        mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if not cfg.fp32 else MixedPrecisionPolicy(),
    )


def layers(model, cfg, Block):
    for submodule in reversed(list(model.modules())):
        if (
            submodule is not model
            and cfg.mixed
            and isinstance(submodule, torch.nn.modules.batchnorm._BatchNorm)
        ):
            fully_shard(
                submodule,
                mp_policy=MixedPrecisionPolicy(
                    param_dtype=torch.float32,
                    output_dtype=cfg.dtype,
                ),
            )
        elif submodule is not model and isinstance(submodule, (Block,)):
            fully_shard(
                submodule,
                mp_policy=MixedPrecisionPolicy(param_dtype=cfg.dtype, cast_forward_inputs=False) if cfg.mixed else MixedPrecisionPolicy(),
            )
    return fully_shard(
        model,
        mp_policy=MixedPrecisionPolicy(param_dtype=cfg.dtype) if cfg.mixed else MixedPrecisionPolicy(),
    )
