"""Learning-rate schedules of the BF16 master optimizers (SpecForge's, as torch schedulers).

``"cosine"``: ``lr_t = (t + 1) / W * base_lr`` for the first ``W`` steps, then torch's
``CosineAnnealingLR`` over ``total_steps - W`` steps, reachable as ``after_scheduler``.
``"constant"``: the same warmup, then ``base_lr``. ``W = int(warmup_ratio * total_steps)``.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor
from torch.optim import Optimizer
from torch.optim.lr_scheduler import CosineAnnealingLR, LRScheduler

from fsdp2_port.fsdp1 import torch_internals

LR_SCHEDULERS: tuple[str, ...] = ("cosine", "constant")


class WarmupLR(LRScheduler):
    """Linear warmup to each group's base lr, then ``after_scheduler`` (or a constant lr).

    At step ``W`` the lr is ``base_lr``, the after-scheduler's epoch 0; step ``W + e`` is its
    epoch ``e``. The state dict nests the after-scheduler's and holds no optimizer.
    """

    def __init__(
        self,
        optimizer: Optimizer,
        warmup_steps: int,
        after_scheduler: LRScheduler | None = None,
        last_epoch: int = -1,
    ) -> None:
        if warmup_steps < 0:
            raise ValueError(f"warmup_steps must be >= 0, got {warmup_steps}")
        self.warmup_steps = int(warmup_steps)
        self.after_scheduler = after_scheduler
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float | Tensor]:
        t = self.last_epoch
        if t < self.warmup_steps:
            return [(t + 1) / self.warmup_steps * base for base in self.base_lrs]
        return list(self.base_lrs)

    def step(self, epoch: int | None = None) -> None:
        if epoch is not None:
            raise TypeError("WarmupLR.step() takes no epoch; load a state dict to resume")
        if self.after_scheduler is None or self.last_epoch < self.warmup_steps:
            super().step()
            return
        self.last_epoch += 1
        torch_internals.count_scheduler_step(self)
        self.after_scheduler.step()
        torch_internals.set_scheduler_last_lr(self, self.after_scheduler.get_last_lr())

    def state_dict(self) -> dict[str, Any]:
        state = {
            k: v for k, v in self.__dict__.items() if k not in ("optimizer", "after_scheduler")
        }
        after = self.after_scheduler
        state["after_scheduler"] = None if after is None else after.state_dict()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state = dict(state_dict)
        after = state.pop("after_scheduler", None)
        if (after is None) != (self.after_scheduler is None):
            raise ValueError("the saved schedule and this one differ in their after-warmup phase")
        self.__dict__.update(state)
        if self.after_scheduler is not None:
            self.after_scheduler.load_state_dict(after)


def build_scheduler(
    optimizer: Optimizer, kind: str, total_steps: int, warmup_ratio: float
) -> WarmupLR:
    """The named schedule over ``total_steps`` optimizer steps."""
    if kind not in LR_SCHEDULERS:
        raise ValueError(f"lr_scheduler must be one of {LR_SCHEDULERS}, got {kind!r}")
    warmup_steps = int(warmup_ratio * total_steps)
    after = None
    if kind == "cosine":
        if total_steps <= warmup_steps:
            raise ValueError(
                f"a cosine schedule needs total_steps ({total_steps}) "
                f"> warmup steps ({warmup_steps})"
            )
        after = CosineAnnealingLR(optimizer, T_max=total_steps - warmup_steps)
    return WarmupLR(optimizer, warmup_steps, after)
