"""torch's AdamW run on the local shards of the masters, its kernel chosen in one place.

``step(optimizer, group, masters, grads)`` is ``optimizer.step()`` for some masters of one
param group (a block, see ``blocks``) with their gradients given as plain local tensors: the
same functional AdamW updates the same state tensors in place (DTensor moments stay the
optimizer's, so checkpoints do not change), without DTensor dispatch per operation.
Invariant: the result equals ``optimizer.step()`` with those gradients bit for bit, because
AdamW is elementwise (blocking changes no bit) and the kernel family is the one torch's
AdamW picks by default on that device, unless a param group asks for ``foreach``/``fused``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeGuard

import torch
from torch import Tensor
from torch.distributed.tensor import DTensor
from torch.optim.adamw import adamw
from torch.optim.optimizer import _global_optimizer_post_hooks, _global_optimizer_pre_hooks

#: The default kernel per device type, when a group leaves ``foreach``/``fused`` unset. Only
#: kernels bit-identical to torch's own default qualify: on the CPU single-tensor and foreach
#: agree and single-tensor is faster (benchmarks/optimizer_step.py: 81 ms against 155 at 50 M
#: params); fused is faster still but differs in the last bit, so it is opt-in
#: (``optimizer_kwargs={"fused": True}``). Other devices: torch's default, foreach.
DEFAULT_KERNEL = {"cpu": "single"}

#: How many bytes of fp32 gradient one block of updates (cast, clip, AdamW, write-back) may
#: hold, per device type; a block always takes at least one tensor. The CPU: 0, one tensor
#: at a time: its fp32 gradient is made, used and freed while in cache, and the allocator
#: hands the same few blocks back instead of faulting in fresh pages for every gradient each
#: step (benchmarks/optimizer_step.py, 50 M params: 277 ms per step in one block, 116 ms per
#: tensor; peak 0.12 B/param instead of 4). Other devices: ``DEFAULT_BLOCK_BYTES``, a few
#: foreach launches per block and never the fp32 gradients of the whole model at once.
BLOCK_BYTES = {"cpu": 0}
DEFAULT_BLOCK_BYTES = 256 << 20


def kernel(group: dict, device: torch.device) -> str:
    """``"fused"``, ``"foreach"`` or ``"single"``: what one param group runs on ``device``."""
    if group.get("fused"):
        return "fused"
    if group.get("foreach") is not None:
        return "foreach" if group["foreach"] else "single"
    return DEFAULT_KERNEL.get(device.type, "foreach")


def supports(
    optimizer: torch.optim.Optimizer, masters: Sequence[Tensor]
) -> TypeGuard[torch.optim.AdamW]:
    """True when ``step`` may stand in for ``optimizer.step()``.

    Plain ``torch.optim.AdamW`` only, no step hooks (they would be skipped), no grad scaler
    attached, no capturable or differentiable groups, and state already made by torch for every
    master (the first step runs through ``optimizer.step()``, so torch alone decides how state
    is created).
    """
    if type(optimizer) is not torch.optim.AdamW:
        return False
    if (
        optimizer._optimizer_step_pre_hooks
        or optimizer._optimizer_step_post_hooks
        or _global_optimizer_pre_hooks
        or _global_optimizer_post_hooks
    ):
        return False
    if (
        getattr(optimizer, "grad_scale", None) is not None
        or getattr(optimizer, "found_inf", None) is not None
    ):
        return False
    if any(g["capturable"] or g["differentiable"] for g in optimizer.param_groups):
        return False
    return all(len(optimizer.state.get(m, ())) > 0 for m in masters)


def local(t: Tensor) -> Tensor:
    """A tensor's rank-local storage (the tensor itself unless it is a DTensor)."""
    return t.to_local() if isinstance(t, DTensor) else t


def blocks(
    optimizer: torch.optim.Optimizer, masters: Sequence[Tensor]
) -> list[tuple[dict, list[int]]]:
    """``(param group, positions in masters)`` in the order ``step`` should run them.

    Every master appears exactly once, in its group's order; a block's fp32 gradients fit
    ``BLOCK_BYTES`` of its device unless it holds one tensor. Masters outside the optimizer
    are an error.
    """
    position = {id(m): k for k, m in enumerate(masters)}
    out: list[tuple[dict, list[int]]] = []
    for group in optimizer.param_groups:
        ks = [position.pop(id(p)) for p in group["params"] if id(p) in position]
        if not ks:
            continue
        budget = BLOCK_BYTES.get(local(masters[ks[0]]).device.type, DEFAULT_BLOCK_BYTES)
        block: list[int] = []
        size = 0
        for k in ks:
            nbytes = 4 * local(masters[k]).numel()
            if block and size + nbytes > budget:
                out.append((group, block))
                block, size = [], 0
            block.append(k)
            size += nbytes
        out.append((group, block))
    if position:
        raise ValueError(f"{len(position)} masters are not in the optimizer's param groups")
    return out


@torch.no_grad()
def step(
    optimizer: torch.optim.AdamW, group: dict, masters: Sequence[Tensor], grads: Sequence[Tensor]
) -> None:
    """One AdamW step of ``masters`` (a block of ``group``) with local gradients ``grads``."""
    states = [optimizer.state[m] for m in masters]
    params = [local(m) for m in masters]
    impl = kernel(group, params[0].device)
    beta1, beta2 = group["betas"]
    adamw(
        params,
        list(grads),
        [local(s["exp_avg"]) for s in states],
        [local(s["exp_avg_sq"]) for s in states],
        [local(s["max_exp_avg_sq"]) for s in states] if group["amsgrad"] else [],
        [s["step"] for s in states],
        foreach=impl == "foreach",
        fused=impl == "fused",
        amsgrad=group["amsgrad"],
        beta1=beta1,
        beta2=beta2,
        lr=group["lr"],
        weight_decay=group["weight_decay"],
        eps=group["eps"],
        maximize=group["maximize"],
    )
