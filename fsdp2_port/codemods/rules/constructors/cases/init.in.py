import functools

import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

from mymodel import Block


def qlora(model, args):
    model = FSDP(
        model,
        auto_wrap_policy=functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={Block}),
        use_orig_params=False,
        limit_all_gathers=True,
        device_id=torch.cuda.current_device(),
        sync_module_states=args["low_memory"],
        param_init_fn=lambda module: module.to_empty(device=torch.device("cuda"), recurse=False)
        if args["low_memory"] and args["rank"] != 0
        else None,
    )
    return model


def named(model, init_fn):
    return FSDP(model, param_init_fn=init_fn)
