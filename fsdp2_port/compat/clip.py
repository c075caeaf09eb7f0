"""FSDP1's ``clip_grad_norm_``, but fp32 and exact for every sharding strategy."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor, nn

from fsdp2_port.compat.fsdp1_layout import copies_in, refuse_dtensors, shard_groups
from fsdp2_port.train import grad_norm


@torch.no_grad()
def clip_grad_norm_(
    module: nn.Module,
    max_norm: float,
    norm_type: float = 2.0,
    *,
    process_group: dist.ProcessGroup | None = None,
) -> Tensor:
    """Clip the gradients of ``module`` (an FSDP1 root or any module inside one) in place.

    Returns the pre-clip global norm as an fp32 tensor, equal on every rank; one collective
    over ``process_group`` (default WORLD), which every rank must join. An FSDP2 model
    (DTensor parameters) is refused: ``fsdp2_port.clip_grad_norm_`` is for it.
    """
    refuse_dtensors(
        module.parameters(), "fsdp2_port.compat.clip_grad_norm_", "fsdp2_port.clip_grad_norm_"
    )
    params = [p for p in module.parameters() if p.grad is not None]
    group = process_group or grad_norm.default_group()
    copies = None
    if group is not None:
        copies = [copies_in(group, s) for s in shard_groups(module, params)]
    grads = [p.grad for p in params if p.grad is not None]  # all of them: params has grads
    norm, _ = grad_norm.clip_(grads, copies, max_norm, norm_type, group=group)
    return norm
