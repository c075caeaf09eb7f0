"""A norm a clip returns, all-reduced where it arrives."""

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard


def clip(model, max_norm):
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    return norm


class Trainer:
    def __init__(self, net, optimizer):
        self.model = fully_shard(net)
        self.optimizer = optimizer

    def step(self):
        grad_norm = clip(self.model, 1.0)
        self.optimizer.step()
        squared = grad_norm.detach().float().pow(2)
        # TODO(fsdp2-port): F2P014 dist.all_reduce of the squared norm clip returns removed: under FSDP2 that norm is the global one already (FSDP1 gave each rank its shard's piece, which this sum completed)
        self.grad_norm = squared.sqrt()
        return self.grad_norm

    def log(self):
        peak = self.grad_norm**2
        # TODO(fsdp2-port): F2P014 dist.all_reduce of the gradient norm clip returns: under FSDP2 that norm is the global one already (FSDP1 gave each rank its shard's piece), so reducing it again counts it once per rank, and dist.all_reduce refuses a DTensor norm; remove the reduction
        dist.all_reduce(peak, op=dist.ReduceOp.MAX)
        return peak

    def unrelated(self, loss):
        dist.all_reduce(loss)
        return loss
