import functools
import os


def worker(lm, rank):
    os.environ.setdefault("NCCL_DEBUG", "WARN")  # before torch is imported, on purpose
    import torch
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, MixedPrecision
    from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

    layer = type(lm.model.layers[0])
    model = FSDP(
        lm,
        auto_wrap_policy=functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={layer}),
        mixed_precision=MixedPrecision(param_dtype=torch.bfloat16),
        sync_module_states=True,
    )
    return model
