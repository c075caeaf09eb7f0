"""torch's AdamW run on the local shards of the masters, a block at a time, its kernel chosen here.

``update(optimizer, masters, grads, coefficient, params)`` stands in for: every gradient cast to
fp32 and multiplied by ``coefficient`` (the clip), ``optimizer.step()``, then every low-precision
parameter := its master. It runs on plain local tensors (DTensor moments stay the optimizer's,
so checkpoints do not change), one block (``blocks``) at a time: the block's gradients are cast
into one reused fp32 buffer and scaled there, AdamW updates the block's masters and moments, and
the block's parameters are written back while the masters are still in cache. fp32 gradients
never exist for more than one block.

Invariant: masters, moments and steps equal ``optimizer.step()`` on the same clipped fp32
gradients bit for bit. AdamW is elementwise; each block runs the kernel family torch's AdamW
runs for its group; only fused groups' blocks cut a tensor, and only at multiples of ``ALIGN``
elements from its start, where the fused kernels' vector loops (and their per-thread ranges)
restart anyway, so every element takes the same code path as in one call on the whole tensor.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeGuard

import torch
from torch import Tensor
from torch.distributed.tensor import DTensor
from torch.optim.adamw import adamw

from fsdp2_port.fsdp1 import torch_internals
from fsdp2_port.train import grad_norm

# torch's foreach kernels (private: pinned in torch_internals)
_foreach_add_ = torch_internals.load("foreach_add_")
_foreach_copy_ = torch_internals.load("foreach_copy_")

#: The default kernel per device type, when a group leaves ``foreach``/``fused`` unset: torch's
#: own default there, bit for bit. On the CPU single-tensor and foreach agree and single-tensor
#: is faster. Other devices: foreach. (``fsdp2_port.BF16Optimizer`` sets ``fused=True`` itself
#: where torch has a fused kernel; see ``MasterWeightOptimizer.FUSED_BY_DEFAULT``.)
DEFAULT_KERNEL = {"cpu": "single"}

#: How many bytes of fp32 gradient one block (cast, clip, AdamW, write-back) may hold, per device
#: type. The CPU: 2 MiB, so that a block's gradients, cast once, are read again from cache by
#: AdamW and a block's masters by the write-back, in a few calls per block (each call costs
#: microseconds; benchmarks/optimizer_step.py). Other devices: a few launches per block
#: and never the fp32 gradients of the whole model at once. A block always takes at least one
#: tensor: one larger than a block is cut for the fused kernel, left whole for the others.
BLOCK_BYTES = {"cpu": 2 << 20}
DEFAULT_BLOCK_BYTES = 256 << 20
#: A fused group's tensor is cut at multiples of this many elements only (256 B of fp32: a
#: multiple of every vector width and of the 64-byte units the CPU kernel splits threads at).
ALIGN = 64

#: ``(position in masters, first element, end)``: a flat range of one master.
Segment = tuple[int, int, int]


def kernel(group: dict, device: torch.device) -> str:
    """``"fused"``, ``"foreach"`` or ``"single"``: what one param group runs on ``device``."""
    if group.get("fused"):
        return "fused"
    if group.get("foreach") is not None:
        return "foreach" if group["foreach"] else "single"
    return DEFAULT_KERNEL.get(device.type, "foreach")


def clips_in_kernel(optimizer: torch.optim.Optimizer) -> bool:
    """Whether the clip coefficient goes into the AdamW kernel instead of a pass of its own:
    when every group is fused, as the fused kernels' ``grad_scale``, a divisor (``1 /
    coefficient``; GradScaler's way in). It saves a pass over the gradients (~15% of the
    update on the CPU) and differs from multiplying by the coefficient in the last bit only.
    ``update`` and ``optimizer.step()`` (``scaled_by``) both clip this way, bit for bit alike.
    """
    return all(g.get("fused") for g in optimizer.param_groups)


@contextmanager
def scaled_by(optimizer: torch.optim.Optimizer, coefficient: Tensor) -> Iterator[None]:
    """``optimizer.step()`` inside clips its gradients in its fused kernel by ``coefficient``.

    (``clips_in_kernel`` must hold; GradScaler's protocol: ``optimizer.grad_scale``.)
    """
    optimizer.grad_scale = coefficient.reciprocal()  # type: ignore[attr-defined]
    try:
        yield
    finally:
        del optimizer.grad_scale  # type: ignore[attr-defined]


def supports(
    optimizer: torch.optim.Optimizer, masters: Sequence[Tensor]
) -> TypeGuard[torch.optim.AdamW]:
    """True when ``update`` may stand in for ``optimizer.step()``.

    Plain ``torch.optim.AdamW`` only, no step hooks (they would be skipped), no grad scaler
    attached, no capturable or differentiable groups, float hyperparameters, state already made
    by torch for every master (the first step runs through ``optimizer.step()``, so torch alone
    decides how state is created), and for fused groups contiguous masters and moments (the
    fused kernels pair elements by memory order, and gradients here are contiguous).
    """
    if type(optimizer) is not torch.optim.AdamW:
        return False
    if torch_internals.optimizer_has_step_hooks(optimizer):
        return False
    if (
        getattr(optimizer, "grad_scale", None) is not None
        or getattr(optimizer, "found_inf", None) is not None
    ):
        return False
    for g in optimizer.param_groups:
        if g["capturable"] or g["differentiable"]:
            return False
        if any(isinstance(v, Tensor) for v in (g["lr"], *g["betas"])):
            return False
    if not all(len(optimizer.state.get(m, ())) > 0 for m in masters):
        return False
    fused = {id(p) for g in optimizer.param_groups if g.get("fused") for p in g["params"]}
    return all(_contiguous(optimizer, m) for m in masters if id(m) in fused)


def _contiguous(optimizer: torch.optim.Optimizer, master: Tensor) -> bool:
    tensors = [master, *(v for v in optimizer.state[master].values() if v.dim() > 0)]
    return all(local(t).is_contiguous() for t in tensors)


def local(t: Tensor) -> Tensor:
    """A tensor's rank-local storage (the tensor itself unless it is a DTensor)."""
    return t.to_local() if isinstance(t, DTensor) else t


def blocks(
    optimizer: torch.optim.Optimizer,
    masters: Sequence[Tensor],
    cuttable: Sequence[bool] | None = None,
    numels: Sequence[int] | None = None,
) -> list[tuple[dict, list[Segment]]]:
    """``(param group, segments)`` in the order ``update`` runs them.

    Every element of every master is in exactly one segment, masters in their group's order.
    A block holds at most ``BLOCK_BYTES`` of fp32 for its device, or one whole tensor. A tensor
    that does not fit in what is left of a block starts the next one; one larger than a block,
    in a fused group and ``cuttable`` (default: all), is cut into block-sized segments at
    multiples of ``ALIGN``, each a block of its own but the last, which starts the next block.
    ``numels``: the masters' local sizes, if known. Masters outside the optimizer are an error.
    """
    numels = [local(m).numel() for m in masters] if numels is None else numels
    position = {id(m): k for k, m in enumerate(masters)}
    out: list[tuple[dict, list[Segment]]] = []
    for group in optimizer.param_groups:
        ks = [position.pop(id(p)) for p in group["params"] if id(p) in position]
        if not ks:
            continue
        device = masters[ks[0]].device
        budget = max(BLOCK_BYTES.get(device.type, DEFAULT_BLOCK_BYTES) // 4, 1)
        cut = max(budget // ALIGN * ALIGN, ALIGN) if kernel(group, device) == "fused" else 0
        block: list[Segment] = []
        size = 0
        for k in ks:
            n = numels[k]
            start = 0
            if cut and n > budget and (cuttable is None or cuttable[k]):
                if block:
                    out.append((group, block))
                    block, size = [], 0
                start = n - n % cut
                out.extend((group, [(k, s, s + cut)]) for s in range(0, start, cut))
                if start == n:
                    continue
            elif block and size + n > budget:
                out.append((group, block))
                block, size = [], 0
            block.append((k, start, n))
            size += n - start
        if block:
            out.append((group, block))
    if position:
        raise ValueError(f"{len(position)} masters are not in the optimizer's param groups")
    return out


@dataclass
class _Shards:
    """The rank-local tensors of one ``update``, looked up once (``to_local`` of a Parameter
    DTensor makes a new view at each call): masters, their parameters (None: the master is the
    parameter), gradients (contiguous) and optimizer state."""

    masters: list[Tensor]
    params: list[Tensor | None]
    grads: list[Tensor]
    states: list[dict[str, Tensor]]


@torch.no_grad()
def update(
    optimizer: torch.optim.AdamW,
    masters: Sequence[Tensor],
    grads: Sequence[Tensor],
    coefficient: Tensor,
    params: Sequence[Tensor | None],
) -> None:
    """Clip, AdamW and write back, block by block, as the module docstring says.

    ``grads[k]`` is the local gradient of ``masters[k]`` in any float dtype; ``params[k]`` the
    low-precision parameter that gets the master's value, or None when the master is the
    parameter (its gradient is then used, and scaled, in place).
    """
    shards = _Shards(
        [local(m) for m in masters],
        [None if p is None else local(p) for p in params],
        [g if g.is_contiguous() else g.contiguous() for g in grads],
        [{k: local(v) for k, v in optimizer.state[m].items()} for m in masters],
    )
    cuttable = [p is None or p.is_contiguous() for p in shards.params]
    plan = blocks(optimizer, masters, cuttable, [m.numel() for m in shards.masters])
    for group in optimizer.param_groups:  # fused: one step per tensor, however it is cut
        if group.get("fused"):
            mine = {id(p) for p in group["params"]}
            steps = [st["step"] for m, st in zip(masters, shards.states) if id(m) in mine]
            if steps:
                _foreach_add_(steps, 1)
    buffers = _buffers(plan, shards)
    grad_scale = coefficient.reciprocal() if clips_in_kernel(optimizer) else None
    for group, segments in plan:
        grads_32 = _fp32_grads(segments, shards, buffers)
        if grad_scale is None:
            grad_norm.scale_(grads_32, coefficient)
        _adamw(group, segments, shards, grads_32, grad_scale)
        lowp = [(p, k, s, e) for k, s, e in segments if (p := shards.params[k]) is not None]
        if lowp:
            _foreach_copy_(
                [_part(p, s, e) for p, _, s, e in lowp],
                [_part(shards.masters[k], s, e) for _, k, s, e in lowp],
            )


def _buffers(plan: list[tuple[dict, list[Segment]]], shards: _Shards) -> dict[torch.device, Tensor]:
    """One fp32 buffer per device, for the cast gradients of its largest block."""
    sizes: dict[torch.device, int] = {}
    for _, segments in plan:
        cast = [(k, s, e) for k, s, e in segments if shards.params[k] is not None]
        if cast:
            device = shards.masters[cast[0][0]].device
            sizes[device] = max(sizes.get(device, 0), sum(e - s for _, s, e in cast))
    return {d: torch.empty(n, dtype=torch.float32, device=d) for d, n in sizes.items()}


def _part(t: Tensor, start: int, end: int) -> Tensor:
    """Elements ``[start, end)`` of ``t`` in memory order: ``t`` itself when that is all of it."""
    return t if start == 0 and end == t.numel() else t.view(-1)[start:end]


def _fp32_grads(
    segments: list[Segment], shards: _Shards, buffers: dict[torch.device, Tensor]
) -> list[Tensor]:
    """The segments' gradients in fp32: cast into their device's buffer, or, for a parameter
    that is its own master, its own gradient."""
    pairs: list[tuple[Tensor, Tensor | None]] = []
    offset = 0
    for k, s, e in segments:
        src = _part(shards.grads[k], s, e)
        if shards.params[k] is None:
            pairs.append((src, None))
            continue
        buffer = buffers[shards.masters[k].device]
        pairs.append((src, buffer[offset : offset + e - s].view(src.shape)))
        offset += e - s
    return cast_fp32(pairs)


def cast_fp32(pairs: Sequence[tuple[Tensor, Tensor | None]]) -> list[Tensor]:
    """For each ``(gradient, destination)``: the destination holding the gradient (one batched
    copy for all), or the gradient itself where there is no destination (fp32 already)."""
    copies = [(g, d) for g, d in pairs if d is not None]
    if copies:
        _foreach_copy_([d for _, d in copies], [g for g, _ in copies])
    return [g if d is None else d for g, d in pairs]


def _adamw(
    group: dict,
    segments: list[Segment],
    shards: _Shards,
    grads: list[Tensor],
    grad_scale: Tensor | None,
) -> None:
    """One AdamW step of a block's segments, with the kernel ``kernel`` picks for the group.

    Fused: ``torch._fused_adamw_`` itself, on the segments (their steps were counted once, in
    ``update``), gradients divided by ``grad_scale`` if given. Otherwise torch's functional
    AdamW on whole tensors (it counts their steps).
    """
    params = [_part(shards.masters[k], s, e) for k, s, e in segments]

    def parts(key: str) -> list[Tensor]:
        return [_part(shards.states[k][key], s, e) for k, s, e in segments]

    impl = kernel(group, params[0].device)
    beta1, beta2 = group["betas"]
    hyper = dict(
        amsgrad=group["amsgrad"],
        beta1=beta1,
        beta2=beta2,
        lr=group["lr"],
        weight_decay=group["weight_decay"],
        eps=group["eps"],
        maximize=group["maximize"],
    )
    max_sq = parts("max_exp_avg_sq") if group["amsgrad"] else []
    steps = [shards.states[k]["step"] for k, _, _ in segments]
    if impl == "fused":
        torch_internals.call(
            "fused_adamw_",
            self=params,
            grads=grads,
            exp_avgs=parts("exp_avg"),
            exp_avg_sqs=parts("exp_avg_sq"),
            max_exp_avg_sqs=max_sq,
            state_steps=steps,
            grad_scale=grad_scale,
            **hyper,
        )
        return
    adamw(
        params,
        grads,
        parts("exp_avg"),
        parts("exp_avg_sq"),
        max_sq,
        steps,
        foreach=impl == "foreach",
        **hyper,
    )
