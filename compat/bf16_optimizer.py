"""SpecForge's ``BF16Optimizer`` for FSDP1, clipping by the true global norm.

The original clipped each rank's gradient *shard* by its own norm (about 1/sqrt(world) of
the real one, a different coefficient on every rank). Here the norm of all shards is
completed by one all-reduce, with FSDP1's layout found from the model itself.
"""

from __future__ import annotations

import torch.distributed as dist
from torch import nn

from compat.fsdp1_layout import copies_in, refuse_dtensors, shard_groups
from fsdp2_port.grad_norm import NonFinitePolicy
from fsdp2_port.master_weights import MasterWeightOptimizer


class BF16Optimizer(MasterWeightOptimizer):
    """Drop-in for ``specforge.optimizer.BF16Optimizer`` on an FSDP1 model.

    ``model`` is the FSDP1 root or an inner module whose parameters are FSDP1 views; its
    trainable parameters get fp32 masters. ``step()`` returns the pre-clip global norm.
    An FSDP2 model (DTensor parameters) is refused: ``fsdp2_port.BF16Optimizer`` is for it.
    """

    def __init__(
        self,
        model: nn.Module,
        lr: float,
        weight_decay: float = 0.0,
        max_grad_norm: float = 0.5,
        total_steps: int = 800_000,
        warmup_ratio: float = 0.015,
        lr_scheduler: str = "cosine",
        offload_master: bool = False,
        *,
        nonfinite: NonFinitePolicy = "skip",
    ) -> None:
        self.model = model
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        refuse_dtensors((p for _, p in named), "compat.BF16Optimizer", "fsdp2_port.BF16Optimizer")
        self._shard_groups = shard_groups(model, [p for _, p in named])
        super().__init__(
            named,
            lr,
            weight_decay,
            max_grad_norm,
            total_steps,
            warmup_ratio,
            lr_scheduler,
            offload_master,
            nonfinite=nonfinite,
        )

    def _norm_copies(self, group: dist.ProcessGroup) -> list[int]:
        return [copies_in(group, s) for s in self._shard_groups]
