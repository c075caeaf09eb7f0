
import torch
from torch.distributed.fsdp import fully_shard

from mymodel import Block
import fsdp2_port


def qlora(model, args):
    param_init_fn = (lambda module: module.to_empty(device=torch.device("cuda"), recurse=False)
        if args["low_memory"] and args["rank"] != 0
        else None)
    fsdp2_port.materialize_like_fsdp1(
        model,
        param_init_fn,
        is_unit=lambda unit: isinstance(unit, (Block,)),
        device=torch.cuda.current_device(),
    )
    model.to(torch.cuda.current_device())
    if args["low_memory"]:
        for tensor in [*model.parameters(), *model.buffers()]:  # sync_module_states
            torch.distributed.broadcast(tensor.detach(), src=0)
    for submodule in reversed(list(model.modules())):
        if submodule is not model and isinstance(submodule, (Block,)):
            fully_shard(submodule)
    model = fully_shard(model)
    return model


def named(model, init_fn):
    fsdp2_port.materialize_like_fsdp1(model, init_fn)
    return fully_shard(model)
