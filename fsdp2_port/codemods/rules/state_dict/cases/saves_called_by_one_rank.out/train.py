"""A gathering state dict taken in a helper that only some ranks call, one file away
(``checkpoint.save`` under ``if rank == 0``) or two calls away (``Trainer.checkpoint`` after
an early return for the other ranks, on a private ``self._rank``): under FSDP2 the gather is a
collective the other ranks never join, so the rewrite stays for review and says which test
gates it. A helper every rank calls (``checkpoint.save_everywhere``) is rewritten."""

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import checkpoint


class Trainer:
    def __init__(self, model):
        mesh = init_device_mesh("cpu", (torch.distributed.get_world_size(),))
        self.model = fully_shard(model, mesh=mesh)
        self._rank = dist.get_rank()

    def checkpoint(self, path):
        if self._rank != 0:
            return
        self._write(path)

    def _write(self, path):
        checkpoint.save_other(self.model, path)


def main(model, path):
    mesh = init_device_mesh("cpu", (torch.distributed.get_world_size(),))
    model = fully_shard(model, mesh=mesh)
    if dist.get_rank() == 0:
        checkpoint.save(model, path)
    checkpoint.save_everywhere(model, path)
    Trainer(model).checkpoint(path)
