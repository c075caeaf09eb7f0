import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def step(net, optimizer, max_norm):
    model = FSDP(net, use_orig_params=True)
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return norm
