"""A BF16 optimizer's state saved for a resume: its masters and moments whole, so that a file
rank 0 saves resumes every rank; inside a rank-0 branch the gather cannot run, so a marker
says where it goes. A model's own state_dict() is not the optimizer's."""

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from fsdp2_port import BF16Optimizer
import fsdp2_port


def save(model, optimizer, path):
    state = {"model": fsdp2_port.module_state_dict(model), **optimizer.full_state_dict()}
    if dist.get_rank() == 0:
        torch.save(state, path)


def save_on_rank_0(optimizer, path):
    if dist.get_rank() == 0:
        # TODO(fsdp2-port): F2P009 optimizer.state_dict() where only some ranks get (`dist.get_rank() == 0`): under FSDP2 it holds this rank's shards only; take optimizer.full_state_dict() before that test, on every rank (a collective), and save that
        torch.save(optimizer.state_dict(), path)


def main(model):
    mesh = init_device_mesh("cpu", (torch.distributed.get_world_size(),))
    model = fully_shard(model, mesh=mesh)
    optimizer = BF16Optimizer(model, lr=1e-4)
    save(model, optimizer, "a.pt")
    save_on_rank_0(optimizer, "b.pt")
    torch.save(optimizer.full_state_dict(), "c.pt")
