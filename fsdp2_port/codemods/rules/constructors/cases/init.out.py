
import torch
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

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
    for submodule in reversed(list(model.modules())):
        if submodule is not model and isinstance(submodule, (Block,)):
            if args["low_memory"]:
                for tensor in [*submodule.parameters(), *submodule.buffers()]:  # device_id, sync_module_states
                    if not isinstance(tensor, DTensor):  # not sharded yet
                        tensor.data = tensor.to(torch.cuda.current_device())
                        torch.distributed.broadcast(tensor.detach(), src=0)
            fully_shard(submodule)
    if args["low_memory"]:
        for tensor in [*model.parameters(), *model.buffers()]:  # device_id, sync_module_states
            if not isinstance(tensor, DTensor):  # not sharded yet
                tensor.data = tensor.to(torch.cuda.current_device())
                torch.distributed.broadcast(tensor.detach(), src=0)
    # limit_all_gathers: dropped; FSDP2 always keeps at most two all-gathers in flight
    model = fully_shard(model)
    return model


def named(model, init_fn):
    fsdp2_port.materialize_like_fsdp1(model, init_fn)
    return fully_shard(model)
