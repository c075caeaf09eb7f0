"""Where FSDP1 keeps each parameter's gradient, found from the module alone.

FSDP1 shards a parameter over its handle's process group (for HYBRID_SHARD and
_HYBRID_SHARD_ZERO2, the intra-node group; the inter-node ranks hold replicas of that
shard). NO_SHARD handles, ignored modules and unwrapped modules keep whole tensors on every
rank. Assuming every rank of the reduction group runs the same model data-parallel, a piece
sharded over ``S`` ranks is held by ``|R| / |S|`` ranks of the reduction group ``R``, and a
whole tensor by ``|R|``.
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Sequence

import torch.distributed as dist
from torch import Tensor, nn
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.tensor import DTensor

from fsdp2_port.fsdp1 import torch_internals
from fsdp2_port.fsdp1.torch_internals import is_fsdp1_flattened as _is_fsdp_flattened


def refuse_dtensors(params: Iterable[Tensor], tool: str, instead: str) -> None:
    """TypeError if any of ``params`` is a DTensor (an FSDP2 model's parameter).

    compat counts a parameter that is not an FSDP1 view as a whole tensor held by every rank;
    an FSDP2 parameter is a shard (or an HSDP replica of one), so the norm would be wrong.
    """
    if any(isinstance(p, DTensor) for p in params):
        raise TypeError(
            f"{tool} was given DTensor parameters (an FSDP2 / fully_shard model): compat is "
            f"for FSDP1 models. Use {instead}, which counts DTensor shards and replicas"
        )


def shard_groups(module: nn.Module, params: Sequence[Tensor]) -> list[dist.ProcessGroup | None]:
    """For each of ``module``'s ``params``: the group FSDP1 shards it over, or None if whole.

    ``module`` may be an FSDP1 root, any module inside a wrapped model whose parameters are
    FSDP views (``use_orig_params`` True or False), or a model FSDP1 never touched.
    """
    owners = _owning_groups(FSDP.fsdp_modules(module))
    if any(_is_fsdp_flattened(p) and id(p) not in owners for p in params):
        # An inner module: the FSDP1 instances that own its parameters wrap it from outside,
        # and nn.Module keeps no parent links, so look among the live ones.
        owners = _owning_groups(o for o in gc.get_objects() if issubclass(type(o), FSDP))
    orphans = [i for i, p in enumerate(params) if _is_fsdp_flattened(p) and id(p) not in owners]
    if orphans:
        raise RuntimeError(
            f"parameters {orphans} are FSDP1 views, but no live FSDP1 instance owns them"
        )
    return [owners.get(id(p)) for p in params]


def _owning_groups(states: Iterable[FSDP]) -> dict[int, dist.ProcessGroup | None]:
    """id(parameter) -> its shard group, for flat parameters and original-parameter views."""
    owners: dict[int, dist.ProcessGroup | None] = {}
    for state in states:
        shards = torch_internals.fsdp1_shards(state)
        if shards is None:
            continue
        flat, group, views = shards
        owners[id(flat)] = group
        for p in views:
            owners[id(p)] = group
    return owners


def copies_in(group: dist.ProcessGroup, shard_group: dist.ProcessGroup | None) -> int:
    """How many ranks of ``group`` hold one piece sharded over ``shard_group`` (None: whole)."""
    world = dist.get_world_size(group)
    shard = 1 if shard_group is None else dist.get_world_size(shard_group)
    if world % shard:
        raise ValueError(
            f"the norm's group has {world} ranks, not a multiple of the FSDP shard group's "
            f"{shard}: pass a group made of whole replicas to configure_grad_norm_reduction"
        )
    return world // shard
