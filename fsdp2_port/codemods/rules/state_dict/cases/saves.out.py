"""What a migrated program saves: a gathering state dict inside a rank-0 branch (the gather
goes before it), an optimizer's own state dict (this rank's shards), save_pretrained (this
rank's shards; not with a state_dict of its own), a state dict per rank (right as it is)."""

import torch
import torch.distributed as dist
import fsdp2_port
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard


def save_all(states, path):
    torch.save(states, path)


def export(model, path, state=None):
    # TODO(fsdp2-port): F2P008 model.save_pretrained saves state_dict(), this rank's DTensor shards under FSDP2: pass state_dict=get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)), taken on every rank, and save on rank 0
    model.save_pretrained(path)
    model.save_pretrained(path, state_dict=state)


def main(model, path):
    mesh = init_device_mesh("cpu", (torch.distributed.get_world_size(),))
    model = fully_shard(model, mesh=mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    if dist.get_rank() == 0:
        # TODO(fsdp2-port): F2P008 state_dict() -> get_model_state_dict(...); only some ranks get here (`dist.get_rank() == 0`), and FSDP2 gathers the full state with a collective every rank must join: take it before that test, on every rank, and save it here
        torch.save(
            get_model_state_dict(model, options=StateDictOptions(full_state_dict=True)),
            path,
        )
        # TODO(fsdp2-port): F2P008 optimizer.state_dict() of an optimizer over a model FSDP2 shards: this rank's DTensor shards (FSDP1's was this rank's flat shard). Saved by every rank, each resumes its own; saved from one rank it cannot resume the others: save get_optimizer_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True)), taken on every rank, or use DCP
        torch.save(optimizer.state_dict(), path + ".optim")
    torch.save(optimizer.state_dict(), f"{path}.{dist.get_rank()}")
    # TODO(fsdp2-port): F2P008 model.save_pretrained saves state_dict(), this rank's DTensor shards under FSDP2: pass state_dict=get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)), taken on every rank, and save on rank 0
    model.save_pretrained(path)
    save_all(
        {
            "model": get_model_state_dict(
                model,
                options=StateDictOptions(full_state_dict=True),
            ),
        },
        path,
    )
    export(model, path)


def save_on_rank_0(model, path):
    if dist.get_rank() != 0:
        return
    # TODO(fsdp2-port): F2P008 state_dict() -> fsdp2_port.module_state_dict(...): FSDP1's answer on FSDP2 models (full by default), each module's own on any other; only some ranks get here (`dist.get_rank() != 0`), and FSDP2 gathers the full state with a collective every rank must join: take it before that test, on every rank, and save it here
    torch.save(fsdp2_port.module_state_dict(model), path)


def save_unless_other_rank_without_fsdp(model, path, is_main, is_fsdp):
    if not is_main and not is_fsdp:  # an FSDP model goes on on every rank: no marker
        return
    torch.save(fsdp2_port.module_state_dict(model), path)
