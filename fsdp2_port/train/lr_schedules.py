"""Learning-rate schedules of the BF16 master optimizers: SpecForge's, step for step.

``W = int(warmup_ratio * total_steps)``, ``T = total_steps - W``, ``b`` a group's base lr. The
lr after ``s`` scheduler steps (``s = 0`` at construction) is:

- ``s < W``: ``(s + 1) / W * b``;
- ``s = W``: the after-scheduler's value *from its epoch 0*, computed by torch outside its own
  first step. For ``"cosine"`` (torch's ``CosineAnnealingLR`` over ``T`` steps) that is its
  chained form applied to the current ``group["lr"]``: on torch releases whose cosine tests
  "initial step" rather than "epoch 0" it is ``2 b / (1 + cos(pi / T))`` (``T = 1``: ``lr + b``),
  on older ones ``group["lr"]`` itself. For ``"constant"``: ``b``;
- ``s > W``: the after-scheduler stepped ``s - W`` times (torch's chained cosine from there,
  so ``b (1 + cos(pi e / T)) / (1 + cos(pi / T))`` for ``0 <= e = s - W <= T`` on current torch).

That is what SpecForge's ``CosineAnnealingWarmupLR`` / ``ConstantWarmupLR`` (a warmup
scheduler that hands over to its after-scheduler) compute, on any torch release, because the
cosine phase *is* torch's ``CosineAnnealingLR`` driven the same way. ``T = 0`` (warmup as long
as the run) divides by zero at step ``W``, as there; ``"constant"`` refuses ``W >= total_steps``
at construction, as there.

State dicts: this module's own form (the after-scheduler nested under ``"after_scheduler"``,
``last_epoch`` counting every step) and SpecForge's (``"after_scheduler_dict"``,
``"warmup_epochs"``, ``"finished"``, its ``last_epoch`` frozen at ``W`` once finished) both
load; ``own_form`` turns the second into the first.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from torch import Tensor
from torch.optim import Optimizer
from torch.optim.lr_scheduler import CosineAnnealingLR, LRScheduler

from fsdp2_port.fsdp1 import torch_internals

LR_SCHEDULERS: tuple[str, ...] = ("constant", "cosine")

#: The after-scheduler class each kind has in SpecForge's saved state (``after_scheduler_type``).
SPECFORGE_AFTER_TYPES = {"cosine": "CosineAnnealingLR", "constant": "_FlatLR"}


class WarmupLR(LRScheduler):
    """Linear warmup to each group's base lr, then ``after_scheduler`` (or a constant lr).

    The lr at step ``W`` is the after-scheduler's next value from its epoch 0 (see the module);
    step ``W + e`` is the after-scheduler stepped ``e`` times. The state dict nests the
    after-scheduler's and holds no optimizer.
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
        if self.after_scheduler is None:
            return list(self.base_lrs)
        return self._handover_lr(self.after_scheduler)

    def _handover_lr(self, after: LRScheduler) -> list[float | Tensor]:
        """The after-scheduler's value at its epoch 0, asked outside its own first step."""
        if isinstance(after, CosineAnnealingLR) and after.T_max == 0:
            raise ZeroDivisionError(
                f"the cosine phase is total_steps - warmup steps = 0 steps long (warmup "
                f"{self.warmup_steps} steps): give total_steps > int(warmup_ratio * total_steps)"
            )
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="To get the last learning rate")
            return after.get_lr()

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
        """Load this module's form or SpecForge's; the groups' lr become the saved last lr.

        The chained cosine computes each lr from ``group["lr"]``, so a resume continues from
        the saved value whatever the optimizer's own state said (as SpecForge's loader does).
        """
        state = self.own_form(state_dict)
        after = state.pop("after_scheduler", None)
        if (after is None) != (self.after_scheduler is None):
            raise ValueError("the saved schedule and this one differ in their after-warmup phase")
        self.__dict__.update(state)
        if self.after_scheduler is not None:
            self.after_scheduler.load_state_dict(after)
        for group, lr in zip(self.optimizer.param_groups, self.get_last_lr()):
            group["lr"] = lr

    def own_form(self, state_dict: Mapping[str, Any]) -> dict[str, Any]:
        """``state_dict`` in this module's form: as it is when it is one, else SpecForge's
        scheduler state translated (ValueError, one line, when it is neither or is another
        kind's). Keys this torch release does not keep are dropped, missing ones keep this
        scheduler's values."""
        if "after_scheduler_dict" not in state_dict and "warmup_epochs" not in state_dict:
            return dict(state_dict)
        kind = "constant" if self.after_scheduler is None else "cosine"
        after_type = state_dict.get("after_scheduler_type")
        if after_type != SPECFORGE_AFTER_TYPES[kind]:
            raise ValueError(
                f"SpecForge scheduler state with after_scheduler_type={after_type!r} cannot "
                f"resume a {kind!r} schedule (SpecForge's is {SPECFORGE_AFTER_TYPES[kind]!r}): "
                "construct the optimizer with the checkpoint's lr_scheduler"
            )
        saved_after = state_dict.get("after_scheduler_dict")
        if not isinstance(saved_after, Mapping):
            raise ValueError(
                "SpecForge scheduler state has no after_scheduler_dict (SpecForge itself would "
                "skip the cosine phase's state): the schedule cannot be resumed exactly"
            )
        warmup = int(state_dict["warmup_epochs"])
        steps = int(state_dict["last_epoch"])
        if state_dict.get("finished"):
            steps = warmup + int(saved_after["last_epoch"])
        own = self.state_dict()
        out = {k: state_dict.get(k, v) for k, v in own.items() if k != "after_scheduler"}
        out.update(warmup_steps=warmup, last_epoch=steps)
        torch_internals.set_scheduler_step_count(out, steps + 1)
        mine = own["after_scheduler"]
        out["after_scheduler"] = (
            None if mine is None else {k: saved_after.get(k, v) for k, v in mine.items()}
        )
        return out


def build_scheduler(
    optimizer: Optimizer, kind: str, total_steps: int, warmup_ratio: float
) -> WarmupLR:
    """The named schedule over ``total_steps`` optimizer steps, with SpecForge's errors:
    an unknown kind, and (``"constant"``) ``total_steps <= 0`` or warmup outside
    ``[0, total_steps)``, are ValueErrors."""
    if kind not in LR_SCHEDULERS:
        raise ValueError(
            f"unsupported lr_scheduler={kind!r}; expected one of {sorted(LR_SCHEDULERS)}"
        )
    warmup_steps = int(warmup_ratio * total_steps)
    after = None
    if kind == "cosine":
        after = CosineAnnealingLR(optimizer, T_max=total_steps - warmup_steps)
    else:
        if total_steps <= 0:
            raise ValueError(f"total_steps must be positive, got {total_steps}")
        if not 0 <= warmup_steps < total_steps:
            raise ValueError(
                f"warmup_steps must be in [0, total_steps), got {warmup_steps} "
                f"for total_steps={total_steps}"
            )
    return WarmupLR(optimizer, warmup_steps, after)


def own_form_offline(state_dict: Mapping[str, Any]) -> dict[str, Any]:
    """A scheduler state in this module's form without the optimizer it belongs to: a
    SpecForge state (see the module) is translated against a schedule built from its own
    numbers (warmup, ``T_max``, base lrs); this module's form is returned as it is."""
    if "after_scheduler_dict" not in state_dict and "warmup_epochs" not in state_dict:
        return dict(state_dict)
    import torch

    base_lrs = list(state_dict.get("base_lrs") or [0.0])
    optimizer = torch.optim.SGD(
        [{"params": [torch.nn.Parameter(torch.zeros(1))], "lr": lr} for lr in base_lrs]
    )
    after_state = state_dict.get("after_scheduler_dict")
    after = None
    if state_dict.get("after_scheduler_type") == SPECFORGE_AFTER_TYPES["cosine"]:
        assert isinstance(after_state, Mapping)
        after = CosineAnnealingLR(
            optimizer, T_max=after_state["T_max"], eta_min=after_state.get("eta_min", 0.0)
        )
    template = WarmupLR(optimizer, int(state_dict["warmup_epochs"]), after)
    return template.own_form(state_dict)
