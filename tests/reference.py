"""SpecForge's original BF16 master step, written from its description, as a reference.

In one process it is right: masters get the grads, torch clips them, AdamW updates them.
On FSDP1 shard views it is the rank-local clip: each rank clips its shard by its own norm.
"""

import torch

from fsdp2_port.train.lr_schedules import build_scheduler


class SpecForgeLoop:
    def __init__(
        self, params, lr, max_grad_norm, weight_decay=0.0, total_steps=100, warmup_ratio=0.0
    ):
        self.params = [p for p in params if p.requires_grad]
        self.masters = [p.detach().float().clone().requires_grad_(True) for p in self.params]
        self.max_grad_norm = max_grad_norm
        self.optimizer = torch.optim.AdamW(self.masters, lr=lr, weight_decay=weight_decay)
        self.scheduler = build_scheduler(self.optimizer, "cosine", total_steps, warmup_ratio)

    @torch.no_grad()
    def step(self) -> torch.Tensor:
        for p, m in zip(self.params, self.masters):
            m.grad = None if p.grad is None else p.grad.float()
        norm = torch.nn.utils.clip_grad_norm_(self.masters, self.max_grad_norm)
        self.optimizer.step()
        self.scheduler.step()
        for p, m in zip(self.params, self.masters):
            p.copy_(m)
            p.grad = None
        return norm
