"""torch's clip on a migrated model's parameters is marked (its norm becomes the global one);
in the else of ``isinstance(model, FSDP)`` (krayF1sh/ecot-prm's dispatch), no sharded model
gets there, before the migration or after it (the test migrates with the model): nothing to
mark."""

import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def step(net, optimizer, max_norm):
    model = FSDP(net, use_orig_params=True)
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return norm


def dispatch(net, max_norm):
    model = FSDP(net, use_orig_params=True)
    if isinstance(model, FSDP):
        return model.clip_grad_norm_(max_norm)
    else:
        return torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
