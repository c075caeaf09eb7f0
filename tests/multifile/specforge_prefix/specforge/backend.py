"""The training backend: forward, backward and the optimizer step of one batch.

The optimizer returns the norm of this rank's shard of the gradients; the job's norm is the root
of the sum of every rank's squared shard norm.
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F


class FSDPBackend:
    def __init__(self, model, optimizer):
        self.model = model
        self.optimizer = optimizer

    def forward_backward(self, tokens, targets):
        logits = self.model(tokens).float()
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        loss.backward()
        return loss.detach()

    def step(self):
        grad_norm = self.optimizer.step()
        grad_norm_sq = grad_norm.to(torch.float32) ** 2
        dist.all_reduce(grad_norm_sq, op=dist.ReduceOp.SUM)
        return grad_norm_sq.sqrt()
