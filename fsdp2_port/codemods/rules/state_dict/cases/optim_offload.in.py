import torch
from torch.distributed.fsdp import FullOptimStateDictConfig, FullStateDictConfig, FullyShardedDataParallel as FSDP, StateDictType
from torch.distributed.fsdp import ShardedOptimStateDictConfig


# FSDP1's optimizer configs offload by default (offload_to_cpu=True); its model configs do not.
def save_default(model, optimizer, path):
    """FULL, default configs: the optimizer state on the CPU of every rank, which no
    StateDictOptions says (full_state_dict with cpu_offload keeps it on rank 0): FSDP1's words stay."""
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT):
        state = {"model": model.state_dict(), "optim": FSDP.optim_state_dict(model, optimizer)}
        torch.save(state, path)


def save_default_written(model, optimizer):
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, FullStateDictConfig(), FullOptimStateDictConfig(rank0_only=False)):
        return FSDP.optim_state_dict(model, optimizer)


def save_on_device(model, optimizer):
    """offload_to_cpu=False said: on the device of every rank, DCP's full_state_dict."""
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, FullStateDictConfig(), FullOptimStateDictConfig(offload_to_cpu=False)):
        return model.state_dict(), FSDP.optim_state_dict(model, optimizer)


def each_call_its_own(model, optimizer):
    """The model on every rank's device, the optimizer offloaded to rank 0: one options each."""
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, FullStateDictConfig(), FullOptimStateDictConfig(rank0_only=True)):
        return model.state_dict(), FSDP.optim_state_dict(model, optimizer)


def model_only(model):
    """The default optimizer config is never read: DCP."""
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT):
        return model.state_dict()


def load_default(model, optimizer, osd):
    """A load reads rank0_only, not offload_to_cpu: DCP."""
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT):
        optimizer.load_state_dict(FSDP.optim_state_dict_to_load(model, optimizer, osd))


def sharded_default(model, optimizer):
    """SHARDED, default optimizer config: offloaded shards, DCP's cpu_offload."""
    with FSDP.state_dict_type(model, StateDictType.SHARDED_STATE_DICT, optim_state_dict_config=ShardedOptimStateDictConfig()):
        return model.state_dict(), FSDP.optim_state_dict(model, optimizer)


def sharded_on_device(model, optimizer):
    with FSDP.state_dict_type(model, StateDictType.SHARDED_STATE_DICT, optim_state_dict_config=ShardedOptimStateDictConfig(offload_to_cpu=False)):
        return FSDP.optim_state_dict(model, optimizer)
