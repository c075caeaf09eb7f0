"""A norm a clip returns, all-reduced where it arrives."""

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def clip(model, max_norm):
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    return norm


class Trainer:
    def __init__(self, net, optimizer):
        self.model = FSDP(net, use_orig_params=True)
        self.optimizer = optimizer

    def step(self):
        grad_norm = clip(self.model, 1.0)
        self.optimizer.step()
        squared = grad_norm.detach().float().pow(2)
        dist.all_reduce(squared)
        self.grad_norm = squared.sqrt()
        return self.grad_norm

    def log(self):
        peak = self.grad_norm**2
        dist.all_reduce(peak, op=dist.ReduceOp.MAX)
        return peak

    def unrelated(self, loss):
        dist.all_reduce(loss)
        return loss
