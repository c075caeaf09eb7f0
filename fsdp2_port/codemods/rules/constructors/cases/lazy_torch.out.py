import os


def worker(lm, rank):
    os.environ.setdefault("NCCL_DEBUG", "WARN")  # before torch is imported, on purpose
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    layer = type(lm.model.layers[0])
    for tensor in [*lm.parameters(), *lm.buffers()]:  # sync_module_states
        torch.distributed.broadcast(tensor.detach(), src=0)
    for submodule in reversed(list(lm.modules())):
        if submodule is not lm and isinstance(submodule, torch.nn.modules.batchnorm._BatchNorm):
            fully_shard(
                submodule,
                mp_policy=MixedPrecisionPolicy(param_dtype=torch.float32, output_dtype=torch.bfloat16),
            )
        elif submodule is not lm and isinstance(submodule, (layer,)):
            fully_shard(
                submodule,
                mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, cast_forward_inputs=False),
            )
    model = fully_shard(
        lm,
        mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16),
    )
    return model
