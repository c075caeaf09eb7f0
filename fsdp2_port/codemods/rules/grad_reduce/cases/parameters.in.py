import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def sync_from_rank0(net):
    """OpenDiloco's outer step: every parameter broadcast from rank 0, by hand (DTensors under
    FSDP2, which c10d refuses): marked, and the model stays FSDP1."""
    model = FSDP(net, use_orig_params=True)
    for param in model.parameters():
        dist.broadcast(param.data, src=0)
    return model


def average(net):
    """Their local shards handed over: right on DTensors, nothing to mark."""
    model = FSDP(net, use_orig_params=True)
    for param in model.parameters():
        dist.all_reduce(param.data.to_local())
    return model


def plain(net, buffers):
    """A collective on tensors that are no model's parameters: nothing to mark."""
    model = FSDP(net, use_orig_params=True)
    for buffer in buffers:
        dist.broadcast(buffer, src=0)
    return model
