import torch
from torch.distributed.fsdp import FullStateDictConfig
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

FULL = FullStateDictConfig(offload_to_cpu=True, rank0_only=True)


def save(model, path):
    # TODO(fsdp2-port): F2P008 state_dict() -> get_model_state_dict(...); only some ranks get here (`dist.get_rank() == 0` in train.main, which calls this function), and FSDP2 gathers the full state with a collective every rank must join: take it before that test, on every rank, and save it here
    torch.save(
        get_model_state_dict(
            model,
            options=StateDictOptions(full_state_dict=True, cpu_offload=True),
        ),
        path,
    )


def save_everywhere(model, path):
    state = get_model_state_dict(
        model,
        options=StateDictOptions(full_state_dict=True, cpu_offload=True),
    )
    torch.save(state, path)


def save_other(model, path):
    # TODO(fsdp2-port): F2P008 state_dict() -> get_model_state_dict(...); only some ranks get here (`self._rank != 0` in train.Trainer.checkpoint, which calls this function), and FSDP2 gathers the full state with a collective every rank must join: take it before that test, on every rank, and save it here
    torch.save(
        get_model_state_dict(
            model,
            options=StateDictOptions(full_state_dict=True, cpu_offload=True),
        ),
        path,
    )
