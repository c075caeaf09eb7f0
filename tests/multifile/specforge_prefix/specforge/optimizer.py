"""SpecForge's BF16 master-weight optimizer, as it was before its fix.

fp32 master copies of the model's bf16 parameters, AdamW on the masters, the result copied back
into the bf16 parameters. On FSDP1 each rank holds only its shard of every parameter, so
``clip_grad_norm_`` here sees the rank's shard: the norm it returns (and clips by) is that
rank's local norm, not the job's.
"""

import math

import torch
from torch.optim.lr_scheduler import LambdaLR


def warmup_cosine(total_steps, warmup_steps):
    def factor(step):
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor


class BF16Optimizer:
    def __init__(
        self,
        model,
        lr,
        weight_decay=0.0,
        max_grad_norm=0.5,
        total_steps=800_000,
        warmup_ratio=0.015,
    ):
        self.model = model
        self.model_params = [p for p in model.parameters() if p.requires_grad]
        self.max_grad_norm = max_grad_norm
        self.fp32_params = [
            p.detach().clone().to(torch.float32).requires_grad_(True) for p in self.model_params
        ]
        self.optimizer = torch.optim.AdamW(self.fp32_params, lr=lr, weight_decay=weight_decay)
        warmup_steps = int(warmup_ratio * total_steps)
        self.scheduler = LambdaLR(self.optimizer, warmup_cosine(total_steps, warmup_steps))

    def step(self):
        with torch.no_grad():
            for p, mp in zip(self.model_params, self.fp32_params):
                mp.grad = None if p.grad is None else p.grad.detach().to(torch.float32)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.fp32_params, self.max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad()
        self.scheduler.step()
        with torch.no_grad():
            for p, mp in zip(self.model_params, self.fp32_params):
                p.data.copy_(mp.data.to(p.dtype))
                p.grad = None
        return grad_norm

    def get_learning_rate(self):
        return self.optimizer.param_groups[0]["lr"]

    def state_dict(self):
        """This rank's masters (FSDP1's pieces of them) and AdamW's and the schedule's state."""
        return {
            "fp32_params": [p.detach() for p in self.fp32_params],
            "optimizer_state_dict": self.optimizer.state_dict(),
            "scheduler_state_dict": self.scheduler.state_dict(),
        }

    def load_state_dict(self, state):
        with torch.no_grad():
            for mp, saved in zip(self.fp32_params, state["fp32_params"]):
                mp.copy_(saved)
            for p, mp in zip(self.model_params, self.fp32_params):
                p.data.copy_(mp.data.to(p.dtype))
        self.optimizer.load_state_dict(state["optimizer_state_dict"])
        self.scheduler.load_state_dict(state["scheduler_state_dict"])
