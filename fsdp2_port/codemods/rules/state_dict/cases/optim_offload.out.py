import torch
from torch.distributed.fsdp import FullOptimStateDictConfig, FullStateDictConfig, StateDictType
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_optimizer_state_dict,
)
import fsdp2_port


# FSDP1's optimizer configs offload by default (offload_to_cpu=True); its model configs do not.
def save_default(model, optimizer, path):
    """FULL, default configs: the optimizer state on the CPU of every rank, which no
    StateDictOptions says (full_state_dict with cpu_offload keeps it on rank 0): FSDP1's words stay."""
    with fsdp2_port.state_dict_type(model, StateDictType.FULL_STATE_DICT):
        state = {"model": model.state_dict(), "optim": fsdp2_port.optim_state_dict(model, optimizer)}
        torch.save(state, path)


def save_default_written(model, optimizer):
    with fsdp2_port.state_dict_type(model, StateDictType.FULL_STATE_DICT, FullStateDictConfig(), FullOptimStateDictConfig(rank0_only=False)):
        return fsdp2_port.optim_state_dict(model, optimizer)


def save_on_device(model, optimizer):
    """offload_to_cpu=False said: on the device of every rank, DCP's full_state_dict."""
    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True)), get_optimizer_state_dict(
        model,
        optimizer,
        options=StateDictOptions(full_state_dict=True),
    )


def each_call_its_own(model, optimizer):
    """The model on every rank's device, the optimizer offloaded to rank 0: one options each."""
    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True)), get_optimizer_state_dict(
        model,
        optimizer,
        options=StateDictOptions(full_state_dict=True, cpu_offload=True),
    )


def model_only(model):
    """The default optimizer config is never read: DCP."""
    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))


def load_default(model, optimizer, osd):
    """A load reads rank0_only, not offload_to_cpu: DCP."""
    set_optimizer_state_dict(model, optimizer, osd, options=StateDictOptions(full_state_dict=True))


def sharded_default(model, optimizer):
    """SHARDED, default optimizer config: offloaded shards, DCP's cpu_offload."""
    return get_model_state_dict(model), get_optimizer_state_dict(model, optimizer, options=StateDictOptions(cpu_offload=True))


def sharded_on_device(model, optimizer):
    return get_optimizer_state_dict(model, optimizer)
