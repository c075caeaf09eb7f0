from torch.distributed.fsdp import FullOptimStateDictConfig, FullStateDictConfig, StateDictType
import fsdp2_port
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
)

saving = FullStateDictConfig(offload_to_cpu=True, rank0_only=True)
saving_optim = FullOptimStateDictConfig(offload_to_cpu=True, rank0_only=True)


def given_state(model, optimizer):
    """The optimizer's state dict handed in (Infinity's trainer): no StateDictOptions call
    takes it, so the call is FSDP1's read at run time, and the block that says offload and
    rank 0 stays around it (removed, every rank would build the whole state on its device)."""
    with fsdp2_port.state_dict_type(model, StateDictType.FULL_STATE_DICT, saving, saving_optim):
        model_state = model.state_dict()
        optim_state = fsdp2_port.optim_state_dict(model=model, optim=optimizer, optim_state_dict=optimizer.state_dict())
    return model_state, optim_state


def own_state(model, optimizer):
    """The same block with the optimizer's own state: each call its options, the block gone."""
    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)), get_optimizer_state_dict(
        model,
        optimizer,
        options=StateDictOptions(full_state_dict=True, cpu_offload=True),
    )
