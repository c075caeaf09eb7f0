"""The one rule of gradient norms: its only home.

A caller describes its gradients as *local* tensors, each with ``copies``: how many ranks of
the reduction group hold that same piece of the logical gradient (1 for a shard that exists
once, the group size for a tensor replicated on every rank, the replica count for an HSDP
shard). Then:

- every rank adds ``sum(|g|^p) / copies`` over its pieces, accumulated in fp32 or wider;
- ONE collective completes the norm: a SUM all-reduce over the group (a MAX for ``inf``,
  where copies do not matter), joined by every rank, also one that holds no gradient;
- the result is a plain fp32 tensor, the pre-clip job-wide norm, equal on every rank;
- without a group (no process group, or a group of one) the result is
  ``torch.nn.utils.clip_grad_norm_``'s, bit for bit on fp32 gradients.

Clipping multiplies every local piece by one device-tensor coefficient,
``clamp(max_norm / (norm + 1e-6), max=1)``, with no host synchronisation.

Cost. On the CPU a norm costs more per tensor (a few microseconds a call) than per byte, and a
low-precision tensor's fp32 norm copies it whole first. So with a group, CPU pieces are read in
fp32 chunks of ``CPU_CHUNK`` elements (``_cpu_chunks``): small pieces cast together into one
reused buffer, a large fp32 piece where it lies, a large low-precision one cast a slice at a
time; each chunk adds its ``sum(|g|^p)`` (one ``dot`` for p = 2). Without a group the
per-tensor norms stay torch's, for its bits.
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections import defaultdict
from collections.abc import Iterator, Sequence
from typing import Literal, cast

import torch
import torch.distributed as dist
from torch import Tensor
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor

from fsdp2_port import versions
from fsdp2_port.fsdp1 import torch_internals

# torch's own foreach helpers and kernels (private: pinned in torch_internals)
_device_has_foreach_support = torch_internals.load("device_has_foreach_support")
_group_tensors_by_device_and_dtype = torch_internals.load("group_tensors_by_device_and_dtype")
_has_foreach_support = torch_internals.load("has_foreach_support")
_foreach_norm = torch_internals.load("foreach_norm")
_foreach_mul_ = torch_internals.load("foreach_mul_")

NonFinitePolicy = Literal["skip", "raise", "ignore"]
NONFINITE_POLICIES: tuple[str, ...] = ("skip", "raise", "ignore")


def local_piece(t: Tensor) -> Tensor:
    """A gradient's rank-local data. A ``Partial`` DTensor holds unreduced sums: refused."""
    if not isinstance(t, DTensor):
        return t
    if any(p.is_partial() for p in t.placements):
        raise ValueError(
            f"a gradient is Partial on {t.device_mesh} ({t.placements}): reduce it first "
            "(grad.redistribute(placements=[Replicate() ...])), its norm is not defined yet"
        )
    return t.to_local()


def copies_of(t: Tensor, group: dist.ProcessGroup) -> int:
    """How many ranks of ``group`` hold the same local piece as this rank does.

    A plain tensor: every rank of the group (a replicated, unwrapped parameter). A DTensor:
    its mesh's ``Replicate`` dims (``Shard`` and ``_StridedShard`` split, they do not copy),
    times the slices of the root mesh its mesh was cut from (e.g. the TP ranks that each
    hold the same FSDP-only parameter on their own ``mesh["dp"]``). A mesh made on a subset
    of ranks holds the only copies; ranks outside it contribute nothing.
    """
    if not isinstance(t, DTensor):
        return dist.get_world_size(group)
    mesh = t.device_mesh
    copies = math.prod(mesh.size(i) for i, p in enumerate(t.placements) if p.is_replicate())
    return copies * _root_mesh(mesh).size() // mesh.size()


def _root_mesh(mesh: DeviceMesh) -> DeviceMesh:
    """The mesh ``mesh`` was sliced from (itself if none); older torch kept it elsewhere."""
    if versions.mesh_knows_its_root():
        return torch_internals.root_mesh(mesh)
    return torch_internals.root_mesh_from_environment(mesh)


def copies_of_each(tensors: Sequence[Tensor], group: dist.ProcessGroup) -> list[int]:
    """``copies_of`` for every tensor, worked out once per (mesh, placements)."""
    return local_pieces(tensors, group)[1]


def local_pieces(
    tensors: Sequence[Tensor], group: dist.ProcessGroup | None
) -> tuple[list[Tensor], list[int]]:
    """``local_piece`` of every tensor and its ``copies_of`` in ``group`` (1 without a group).

    One pass; the copies and the ``Partial`` check are worked out once per (mesh, placements):
    with thousands of gradients, what costs is per-tensor Python, not bytes.
    """
    pieces: list[Tensor] = []
    copies: list[int] = []
    known: dict[tuple[int, tuple], int] = {}  # the mesh by id: every tensor's lives meanwhile
    world = dist.get_world_size(group) if group is not None else 1
    for t in tensors:
        if not isinstance(t, DTensor):
            pieces.append(t)
            copies.append(world)
            continue
        key = (id(t.device_mesh), t.placements)
        c = known.get(key)
        if c is None:
            local_piece(t)  # refuses Partial
            c = known[key] = copies_of(t, group) if group is not None else 1
        pieces.append(t.to_local())
        copies.append(c)
    return pieces, copies


def check_norm_type(norm_type: float) -> float:
    """``norm_type`` as a float; a norm needs p > 0 (``inf`` included)."""
    p = float(norm_type)
    if not p > 0:
        raise ValueError(f"norm_type must be > 0 or inf, got {norm_type!r}")
    return p


def check_max_norm(max_norm: object, name: str = "max_grad_norm") -> float | None:
    """The clip threshold as a float, or None for "no clipping" (``None`` or ``inf``).

    Anything else must be a real number, finite and > 0: a negative threshold turns descent
    into ascent, 0 zeroes every gradient, NaN poisons the weights. ValueError otherwise.
    """
    if max_norm is None:
        return None
    value = _real(max_norm)
    if value == math.inf:
        return None
    if value is None or not (value > 0 and math.isfinite(value)):
        raise ValueError(
            f"{name} must be a finite number > 0, got {max_norm!r} "
            f"({name}=None or inf disables clipping)"
        )
    return value


def _real(value: object) -> float | None:
    """``value`` as a float if it is a real number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    return float(value)


def check_nonfinite_policy(policy: str) -> NonFinitePolicy:
    if policy not in NONFINITE_POLICIES:
        raise ValueError(f"nonfinite must be one of {NONFINITE_POLICIES}, got {policy!r}")
    return cast(NonFinitePolicy, policy)  # checked just above


def default_group() -> dist.ProcessGroup | None:
    """The group a job-wide norm spans when the caller names none: WORLD, if there is one."""
    return dist.group.WORLD if dist.is_available() and dist.is_initialized() else None


def collective_device(group: dist.ProcessGroup | None) -> torch.device:
    """Where the norm's one collective runs: the accelerator unless the backend is CPU-only."""
    backend = str(dist.get_backend(group))
    if backend == "gloo" or not torch.accelerator.is_available():
        return torch.device("cpu")
    accelerator = torch.accelerator.current_accelerator()
    assert accelerator is not None  # is_available() implies an accelerator
    return torch.device(accelerator.type, torch.accelerator.current_device_index())


def _by_device_and_dtype(
    tensors: Sequence[Tensor],
) -> list[tuple[torch.device, torch.dtype, list[Tensor]]]:
    """torch's device/dtype grouping of ``tensors``, in its order."""
    lists: list[list[Tensor | None]] = [list(tensors)]
    grouped = _group_tensors_by_device_and_dtype(lists)
    return [
        (device, dtype, cast("list[Tensor]", group_tensors))  # no None went in, none comes out
        for (device, dtype), ([group_tensors], _) in grouped.items()
    ]


def local_norms(
    tensors: Sequence[Tensor], norm_type: float, foreach: bool | None = None
) -> list[Tensor]:
    """Per-tensor p-norms in fp32 (or wider), in torch's device/dtype grouping order.

    Empty tensors are left out: they add nothing, and an inf-norm of one is an error.
    """
    tensors = [t for t in tensors if t.numel() > 0]
    if not tensors:
        return []
    norms: list[Tensor] = []
    for device, dtype, group_tensors in _by_device_and_dtype(tensors):
        acc = torch.promote_types(dtype, torch.float32)
        if (foreach is None and _has_foreach_support(group_tensors, device)) or (
            foreach and _device_has_foreach_support(device)
        ):
            norms.extend(_foreach_norm(group_tensors, norm_type, dtype=acc))
        elif foreach:
            raise RuntimeError(f"foreach=True, but {device.type} tensors have no foreach kernels")
        else:
            norms.extend(torch.linalg.vector_norm(t, norm_type, dtype=acc) for t in group_tensors)
    return norms


def total_norm(
    tensors: Sequence[Tensor],
    copies: Sequence[int] | None = None,
    norm_type: float = 2.0,
    *,
    group: dist.ProcessGroup | None = None,
    foreach: bool | None = None,
) -> Tensor:
    """The job-wide p-norm of local gradient pieces: fp32, equal on every rank of ``group``.

    ``copies[i]`` is how many ranks of ``group`` hold ``tensors[i]`` (default: 1 each).
    Issues exactly one collective on ``group`` when it has more than one rank, none otherwise.
    """
    p = check_norm_type(norm_type)
    copies = [1] * len(tensors) if copies is None else list(copies)
    if len(copies) != len(tensors):
        raise ValueError(f"{len(tensors)} tensors but {len(copies)} copy counts")
    if group is None or dist.get_world_size(group) == 1:
        if any(c != 1 for c in copies):
            raise ValueError("copies > 1 need a process group that holds the copies")
        return _unreduced_norm(tensors, p, foreach)

    by_copies: dict[int, list[Tensor]] = defaultdict(list)
    for t, c in zip(tensors, copies):
        if c < 1:
            raise ValueError(f"a gradient piece is held by at least one rank, got copies={c}")
        by_copies[c].append(t)
    device = collective_device(group)
    local = torch.zeros((), dtype=torch.float32, device=device)
    for c, pieces in by_copies.items():
        term = _power_sum(pieces, p, foreach, device)
        if term is None:
            continue
        term = term.float() if p == math.inf else (term / c).float()
        local = torch.maximum(local, term) if p == math.inf else local + term
    if p == math.inf:
        # A MAX reduction may drop a NaN on some ranks; inf keeps every rank's verdict equal.
        local = local.nan_to_num(nan=math.inf)
        dist.all_reduce(local, op=dist.ReduceOp.MAX, group=group)
        return local
    dist.all_reduce(local, op=dist.ReduceOp.SUM, group=group)
    return local.pow(1.0 / p)


#: How many fp32 elements a CPU norm reads per call (1 MiB: within a core's L2 cache).
CPU_CHUNK = 1 << 18
#: The dtypes whose norms accumulate in fp32: those the CPU reads in fp32 chunks.
_CHUNKED = (torch.float32, torch.bfloat16, torch.float16)


def _power_sum(
    pieces: Sequence[Tensor], p: float, foreach: bool | None, device: torch.device
) -> Tensor | None:
    """``sum(|g|^p)`` over every element of ``pieces`` (``max |g|`` for inf), in fp32 or wider,
    on ``device``; None when they hold no element.

    CPU pieces of ``_CHUNKED`` dtypes are read in ``_cpu_chunks``, the rest as per-tensor norms.
    """
    if not pieces:
        return None
    terms: list[Tensor] = []
    rest: list[Tensor] = []
    for piece_device, dtype, same in _by_device_and_dtype(pieces):
        if piece_device.type == "cpu" and dtype in _CHUNKED:
            terms.extend(_chunk_power(chunk, p).to(device) for chunk in _cpu_chunks(same))
        else:
            rest.extend(same)
    norms = local_norms(rest, p, foreach)
    if norms:
        stacked = torch.stack([n.to(device) for n in norms])
        terms.append(stacked.max() if p == math.inf else stacked.pow(p).sum())
    if not terms:
        return None
    stacked = torch.stack(terms)
    return stacked.max() if p == math.inf else stacked.sum()


def _cpu_chunks(tensors: Sequence[Tensor]) -> Iterator[Tensor]:
    """Every element of CPU ``tensors`` exactly once, in non-empty 1-D fp32 chunks.

    An fp32 tensor of at least ``CPU_CHUNK`` elements is read where it lies; everything else is
    cast (or copied) into one reused buffer of ``CPU_CHUNK`` elements, small tensors together in
    one ``cat``, large ones a slice at a time. A chunk in the buffer holds until the next one is
    drawn. Memory: the buffer, never a copy of all gradients.
    """
    buffer = torch.empty(CPU_CHUNK)
    pending: list[Tensor] = []
    filled = 0
    for part in _flat_parts(tensors):
        n = part.numel()
        if n >= CPU_CHUNK and part.dtype == torch.float32:
            yield part
            continue
        if filled + n > CPU_CHUNK:
            yield torch.cat(pending, out=buffer[:filled])
            pending, filled = [], 0
        pending.append(part)
        filled += n
    if pending:
        yield torch.cat(pending, out=buffer[:filled])


def _flat_parts(tensors: Sequence[Tensor]) -> Iterator[Tensor]:
    """The non-empty ``tensors`` as 1-D views (a copy if one is not contiguous); low-precision
    ones over ``CPU_CHUNK`` elements in slices of at most that many."""
    for t in tensors:
        n = t.numel()
        if not n:
            continue
        flat = t if t.dim() == 1 else t.reshape(-1)
        if n <= CPU_CHUNK or t.dtype == torch.float32:
            yield flat
        else:
            yield from flat.split(CPU_CHUNK)


def _chunk_power(chunk: Tensor, p: float) -> Tensor:
    """``sum(|x|^p)`` of a 1-D fp32 chunk (``max |x|`` for inf); p = 2 is one ``dot``."""
    if p == 2.0:
        return torch.dot(chunk, chunk)
    if p == math.inf:
        return torch.linalg.vector_norm(chunk, p)
    return torch.linalg.vector_norm(chunk, p).pow(p)


def _unreduced_norm(tensors: Sequence[Tensor], p: float, foreach: bool | None) -> Tensor:
    """torch's own reduction of per-tensor norms, so fp32 results match it bit for bit."""
    norms = local_norms(tensors, p, foreach)
    if not norms:
        return torch.tensor(0.0)
    first_device = tensors[0].device
    return torch.linalg.vector_norm(torch.stack([n.to(first_device) for n in norms]), p).float()


def clip_coefficient(norm: Tensor, max_norm: float) -> Tensor:
    """The one coefficient every rank applies: ``clamp(max_norm / (norm + 1e-6), max=1)``."""
    return torch.clamp(float(max_norm) / (norm + 1e-6), max=1.0)


def scale_(tensors: Sequence[Tensor], coefficient: Tensor, foreach: bool | None = None) -> None:
    """Multiply local gradient pieces in place by a device tensor (no host sync)."""
    if not tensors:
        return
    for device, _, group_tensors in _by_device_and_dtype(tensors):
        coef = coefficient.to(device)
        if (foreach is None and _has_foreach_support(group_tensors, device)) or (
            foreach and _device_has_foreach_support(device)
        ):
            _foreach_mul_(group_tensors, coef)
        elif foreach:
            raise RuntimeError(f"foreach=True, but {device.type} tensors have no foreach kernels")
        else:
            for t in group_tensors:
                t.mul_(coef)


def norm_and_coefficient(
    tensors: Sequence[Tensor],
    copies: Sequence[int] | None,
    max_norm: float,
    norm_type: float = 2.0,
    *,
    group: dist.ProcessGroup | None = None,
    foreach: bool | None = None,
    nonfinite: NonFinitePolicy = "ignore",
) -> tuple[Tensor, Tensor | None]:
    """The pre-clip job-wide norm of local pieces and the coefficient to scale them by.

    The coefficient is None when the non-finite policy skips the step (every rank agrees).
    """
    norm = total_norm(tensors, copies, norm_type, group=group, foreach=foreach)
    if not apply_nonfinite_policy(norm, nonfinite):
        return norm, None
    return norm, clip_coefficient(norm, max_norm)


def clip_(
    tensors: Sequence[Tensor],
    copies: Sequence[int] | None,
    max_norm: float,
    norm_type: float = 2.0,
    *,
    group: dist.ProcessGroup | None = None,
    foreach: bool | None = None,
    nonfinite: NonFinitePolicy = "ignore",
) -> tuple[Tensor, bool]:
    """Clip local gradient pieces in place by their job-wide norm.

    Returns ``(pre-clip norm, applied)``; ``applied`` is False only when the non-finite
    policy skips the step, and then no piece was touched.
    """
    norm, coefficient = norm_and_coefficient(
        tensors, copies, max_norm, norm_type, group=group, foreach=foreach, nonfinite=nonfinite
    )
    if coefficient is None:
        return norm, False
    scale_(tensors, coefficient, foreach)
    return norm, True


def apply_nonfinite_policy(
    norm: Tensor, policy: NonFinitePolicy, what: str = "gradient norm"
) -> bool:
    """Apply the non-finite policy to a global norm: whether the step goes on (every rank
    reaches the same verdict).

    ``"ignore"`` goes on without looking (no host sync). ``"raise"`` raises on a non-finite
    norm; ``"skip"`` warns and returns False, and the caller updates nothing.
    """
    if policy == "ignore":
        return True
    value = norm.item()
    if math.isfinite(value):
        return True
    if policy == "raise":
        raise RuntimeError(
            f"the {what} is {value}: refusing to update (nonfinite='raise'); "
            "use nonfinite='skip' to drop such steps or 'ignore' for torch's behaviour"
        )
    warnings.warn(f"the {what} is {value}: skipping this step on every rank", stacklevel=4)
    return False
