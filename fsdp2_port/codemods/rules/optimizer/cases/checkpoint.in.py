"""A BF16 optimizer's state saved for a resume: its masters and moments whole, so that a file
rank 0 saves resumes every rank; inside a rank-0 branch the gather cannot run, so a marker
says where it goes. A model's own state_dict() is not the optimizer's."""

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

from specforge.optimizer import BF16Optimizer


def save(model, optimizer, path):
    state = {"model": model.state_dict(), **optimizer.state_dict()}
    if dist.get_rank() == 0:
        torch.save(state, path)


def save_on_rank_0(optimizer, path):
    if dist.get_rank() == 0:
        torch.save(optimizer.state_dict(), path)


def main(model):
    model = FSDP(model, device_id=torch.device("cpu"))
    optimizer = BF16Optimizer(model, lr=1e-4)
    save(model, optimizer, "a.pt")
    save_on_rank_0(optimizer, "b.pt")
    torch.save(optimizer.state_dict(), "c.pt")
