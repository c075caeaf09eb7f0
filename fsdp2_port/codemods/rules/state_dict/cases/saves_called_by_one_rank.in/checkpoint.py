import torch
from torch.distributed.fsdp import FullStateDictConfig, StateDictType
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

FULL = FullStateDictConfig(offload_to_cpu=True, rank0_only=True)


def save(model, path):
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, FULL):
        torch.save(model.state_dict(), path)


def save_everywhere(model, path):
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, FULL):
        state = model.state_dict()
    torch.save(state, path)


def save_other(model, path):
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, FULL):
        torch.save(model.state_dict(), path)
