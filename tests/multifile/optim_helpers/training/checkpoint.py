"""Full (unsharded) checkpoints in one file, written by rank 0 and read back by every rank.

The optimizer state is gathered to rank 0 with ``full_optim_state_dict`` and, on load, rank 0's
copy is scattered back into each rank's shards with ``scatter_full_optim_state_dict``.
"""

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullStateDictConfig, StateDictType
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def save_checkpoint(model, optimizer, path, step):
    config = FullStateDictConfig(rank0_only=True)
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, config):
        model_state = model.state_dict()
    optim_state = FSDP.full_optim_state_dict(model, optimizer)
    if dist.get_rank() == 0:
        torch.save({"model": model_state, "optim": optim_state, "step": step}, path)
    dist.barrier()


def load_checkpoint(model, optimizer, path):
    checkpoint = torch.load(path, weights_only=False)
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT):
        model.load_state_dict(checkpoint["model"])
    full_osd = checkpoint["optim"] if dist.get_rank() == 0 else None
    sharded_osd = FSDP.scatter_full_optim_state_dict(full_osd, model, optim=optimizer)
    optimizer.load_state_dict(sharded_osd)
    return checkpoint["step"]
