"""``fsdp2_port.GradScaler``: ``torch.amp.GradScaler`` with one inf/NaN verdict per group.

What the codemod writes for FSDP1's ``ShardedGradScaler``, which lives in FSDP1's code. A
scaler is not tied to a model, so its replacement must be right whatever it serves:

- FSDP1: each rank sees only its flat-parameter shard, so one rank may find an inf the others
  do not. Plain ``GradScaler`` then steps on some ranks and skips on others, and the scales
  part ways; the flags must be reduced across ranks (``ShardedGradScaler`` does, and so does
  this class).
- FSDP2: gradients are DTensors and DTensor already reduces the flag over their mesh
  (``found_inf_reduce_handler``); reducing again over the group changes nothing.
- DDP and plain models: every rank holds the same gradients; the reduction changes nothing.
  Without an initialised process group there is nothing to reduce: it is ``GradScaler``.

It overrides one method of torch's (``_unscale_grads_``, through ``torch_internals``), which
torch calls from ``unscale_``/``step`` and for optimizers that unscale themselves (fused
AdamW): the per-device flags become one flag on the scale's device, MAX-reduced over the
group in one collective that every rank joins, also a rank without a gradient (FSDP1 gives
empty shards none). Like ``ShardedGradScaler``, fp16 gradients are unscaled, not refused.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from fsdp2_port.fsdp1 import torch_internals


class GradScaler(torch.amp.GradScaler):
    """``torch.amp.GradScaler`` whose inf/NaN verdict is the same on every rank of a group.

    Invariant: every rank of ``process_group`` (the default group when None, as
    ``ShardedGradScaler``'s ``dist.group.WORLD``) takes the same decision at each
    ``step(optimizer)`` — all step or all skip — and holds the same scale after each
    ``update()``, whatever part of the gradients each rank holds (FSDP1 flat shards, also
    CPU-offloaded ones; FSDP2 DTensors; DDP or plain replicas).

    The constructor is ``ShardedGradScaler``'s, in its order (``backoff_factor`` before
    ``growth_factor``, unlike ``GradScaler``), so that a call to it keeps its meaning. Each
    ``unscale_``/``step`` of an optimizer is one collective over the group: every rank must
    make the same calls (as with ``ShardedGradScaler``).
    """

    def __init__(
        self,
        device: str = "cuda",
        init_scale: float = 2.0**16,
        backoff_factor: float = 0.5,
        growth_factor: float = 2.0,
        growth_interval: int = 2000,
        enabled: bool = True,
        process_group: dist.ProcessGroup | None = None,
    ) -> None:
        super().__init__(
            device,
            init_scale=init_scale,
            growth_factor=growth_factor,
            backoff_factor=backoff_factor,
            growth_interval=growth_interval,
            enabled=enabled,
        )
        self.process_group = process_group

    def _same_on_every_rank(
        self, flags: dict[torch.device, torch.Tensor], found_inf: torch.Tensor
    ) -> dict[torch.device, torch.Tensor]:
        """The per-device flags of this rank -> one flag on the scale's device, the MAX over
        the group (nonzero: some rank found an inf or a NaN)."""
        for flag in flags.values():
            if flag is not found_inf:
                found_inf.add_(flag.to(found_inf.device))
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(found_inf, op=dist.ReduceOp.MAX, group=self.process_group)
        return {found_inf.device: found_inf}


torch_internals.override_unscale_grads(GradScaler, GradScaler._same_on_every_rank)
