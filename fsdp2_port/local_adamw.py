"""torch's AdamW run on the local shards of the masters, its kernel chosen in one place.

``step(optimizer, masters, grads)`` is ``optimizer.step()`` with the masters' gradients
given as plain local tensors: the same functional AdamW updates the same state tensors in
place (DTensor moments stay the optimizer's, so checkpoints do not change), without DTensor
dispatch per operation. Invariant: the result equals ``optimizer.step()`` with those
gradients bit for bit, because the kernel family is the one torch's AdamW picks by default
on that device, unless a param group asks for ``foreach``/``fused`` itself.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor
from torch.distributed.tensor import DTensor
from torch.optim.adamw import adamw
from torch.optim.optimizer import _global_optimizer_post_hooks, _global_optimizer_pre_hooks

#: The default kernel per device type, when a group leaves ``foreach``/``fused`` unset. Only
#: kernels bit-identical to torch's own default qualify: on the CPU single-tensor and foreach
#: agree and single-tensor is faster (benchmarks/optimizer_step.py: 104 ms against 154 at 50 M
#: params); fused is faster still but differs in the last bit, so it is opt-in
#: (``optimizer_kwargs={"fused": True}``). Other devices: torch's default, foreach.
DEFAULT_KERNEL = {"cpu": "single"}


def kernel(group: dict, device: torch.device) -> str:
    """``"fused"``, ``"foreach"`` or ``"single"``: what one param group runs on ``device``."""
    if group.get("fused"):
        return "fused"
    if group.get("foreach") is not None:
        return "foreach" if group["foreach"] else "single"
    return DEFAULT_KERNEL.get(device.type, "foreach")


def supports(optimizer: torch.optim.Optimizer, masters: Sequence[Tensor]) -> bool:
    """True when ``step`` may stand in for ``optimizer.step()``.

    Plain ``torch.optim.AdamW`` only, no step hooks (they would be skipped), no grad scaler
    attached, no capturable or differentiable groups, and state already made by torch for every master (the first step
    runs through ``optimizer.step()``, so torch alone decides how state is created).
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
    if getattr(optimizer, "grad_scale", None) is not None or getattr(optimizer, "found_inf", None) is not None:
        return False
    if any(g["capturable"] or g["differentiable"] for g in optimizer.param_groups):
        return False
    return all(len(optimizer.state.get(m, ())) > 0 for m in masters)


def _local(t: Tensor) -> Tensor:
    return t.to_local() if isinstance(t, DTensor) else t


@torch.no_grad()
def step(optimizer: torch.optim.AdamW, masters: Sequence[Tensor], grads: Sequence[Tensor]) -> None:
    """One AdamW step of ``masters`` with local gradient tensors ``grads`` (same order)."""
    grad_of = {id(m): g for m, g in zip(masters, grads)}
    for group in optimizer.param_groups:
        params, gs, avgs, sqs, max_sqs, steps = [], [], [], [], [], []
        for p in group["params"]:
            g = grad_of.get(id(p))
            if g is None:
                continue
            state = optimizer.state[p]
            params.append(_local(p))
            gs.append(g)
            avgs.append(_local(state["exp_avg"]))
            sqs.append(_local(state["exp_avg_sq"]))
            if group["amsgrad"]:
                max_sqs.append(_local(state["max_exp_avg_sq"]))
            steps.append(state["step"])
        if not params:
            continue
        impl = kernel(group, params[0].device)
        beta1, beta2 = group["betas"]
        adamw(
            params,
            gs,
            avgs,
            sqs,
            max_sqs,
            steps,
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
