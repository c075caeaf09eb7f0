from torch.distributed.fsdp import FullOptimStateDictConfig, FullStateDictConfig, FullyShardedDataParallel as FSDP, StateDictType

saving = FullStateDictConfig(offload_to_cpu=True, rank0_only=True)
saving_optim = FullOptimStateDictConfig(offload_to_cpu=True, rank0_only=True)


def given_state(model, optimizer):
    """The optimizer's state dict handed in (Infinity's trainer): no StateDictOptions call
    takes it, so the call is FSDP1's read at run time, and the block that says offload and
    rank 0 stays around it (removed, every rank would build the whole state on its device)."""
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, saving, saving_optim):
        model_state = model.state_dict()
        optim_state = FSDP.optim_state_dict(model=model, optim=optimizer, optim_state_dict=optimizer.state_dict())
    return model_state, optim_state


def own_state(model, optimizer):
    """The same block with the optimizer's own state: each call its options, the block gone."""
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, saving, saving_optim):
        return model.state_dict(), FSDP.optim_state_dict(model, optimizer)
