"""Sharded checkpoints: each rank writes its own shards with torch.distributed.checkpoint."""

import torch.distributed.checkpoint as dcp
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import StateDictType


def _state(model, optimizer):
    return {"model": model.state_dict(), "optim": FSDP.optim_state_dict(model, optimizer)}


def save_checkpoint(model, optimizer, path):
    with FSDP.state_dict_type(model, StateDictType.SHARDED_STATE_DICT):
        dcp.save(_state(model, optimizer), checkpoint_id=path)


def load_checkpoint(model, optimizer, path):
    with FSDP.state_dict_type(model, StateDictType.SHARDED_STATE_DICT):
        state = _state(model, optimizer)
        dcp.load(state, checkpoint_id=path)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(FSDP.optim_state_dict_to_load(model, optimizer, state["optim"]))
