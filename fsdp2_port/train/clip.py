"""``torch.nn.utils.clip_grad_norm_`` for any mix of meshes, placements and plain tensors.

One collective per call, a plain fp32 norm equal on every rank, scaling done on the local
shards with a device-tensor coefficient (no redistribution, no host sync by default).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.distributed as dist
from torch import Tensor
from torch.distributed.tensor import DTensor

from fsdp2_port.fsdp1.torch_internals import refuse_fsdp1_tensors
from fsdp2_port.train import grad_norm


def _pieces(
    grads: list[Tensor], process_group: dist.ProcessGroup | None
) -> tuple[list[Tensor], list[int], dist.ProcessGroup | None]:
    """Local pieces, their copy counts and the group; plain tensors alone reduce nowhere."""
    group = process_group
    if group is None and any(isinstance(g, DTensor) for g in grads):
        group = grad_norm.default_group()
    pieces, copies = grad_norm.local_pieces(grads, group)
    return pieces, copies, group


@torch.no_grad()
def global_grad_norm(
    tensors: Tensor | Iterable[Tensor],
    norm_type: float = 2.0,
    *,
    foreach: bool | None = None,
    process_group: dist.ProcessGroup | None = None,
) -> Tensor:
    """The job-wide norm of gradient tensors, as ``torch.nn.utils.get_total_norm`` takes them.

    DTensors count by placement on any number of meshes; plain tensors next to them, or with
    an explicit ``process_group``, count as replicated on every rank of the group. FSDP1 flat
    parameters (or their views) are refused: they are shards, not replicas.
    """
    tensors = [tensors] if isinstance(tensors, Tensor) else list(tensors)
    refuse_fsdp1_tensors(
        tensors, "fsdp2_port.global_grad_norm", "fsdp2_port.compat.clip_grad_norm_"
    )
    pieces, copies, group = _pieces(tensors, process_group)
    return grad_norm.total_norm(pieces, copies, norm_type, group=group, foreach=foreach)


@torch.no_grad()
def clip_grad_norm_(
    parameters: Tensor | Iterable[Tensor],
    max_norm: float,
    norm_type: float = 2.0,
    *,
    error_if_nonfinite: bool = False,
    foreach: bool | None = None,
    nonfinite: grad_norm.NonFinitePolicy | None = None,
    process_group: dist.ProcessGroup | None = None,
) -> Tensor:
    """Drop-in for ``torch.nn.utils.clip_grad_norm_`` that is right on every mesh.

    ``nonfinite`` defaults to ``"raise"`` if ``error_if_nonfinite`` else ``"ignore"``;
    ``"skip"`` leaves the gradients untouched (and warns) when the norm is not finite.
    Returns the pre-clip norm: a plain fp32 tensor, equal on every rank. Parameters of an
    FSDP1 model are refused (``fsdp2_port.compat.clip_grad_norm_`` is for them).
    """
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    refuse_fsdp1_tensors(params, "fsdp2_port.clip_grad_norm_", "fsdp2_port.compat.clip_grad_norm_")
    policy = nonfinite or ("raise" if error_if_nonfinite else "ignore")
    grads = [g for p in params if (g := p.grad) is not None]
    pieces, copies, group = _pieces(grads, process_group)
    norm, _ = grad_norm.clip_(
        pieces,
        copies,
        max_norm,
        norm_type,
        group=group,
        foreach=foreach,
        nonfinite=grad_norm.check_nonfinite_policy(policy),
    )
    return norm
