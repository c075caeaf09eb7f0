"""Where a checkpoint's tensors get their names: the model's parameters (``Layout``), every
rank's shards put back into whole tensors (``assemble``), FSDP1's flat parameters unflattened
(``unflatten``, with FSDP1's unit membership and order), and state saved by optimizer position
named (``position_targets``, ``positional_optimizer_state``)."""

from __future__ import annotations

import importlib
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from fsdp2_port.fsdp1 import torch_internals
from fsdp2_port.fsdp1.checkpoint_formats import ConversionError
from fsdp2_port.fsdp1.checkpoint_load import OfflineShardedTensor

# -- the model's parameters: where positions and flat parameters get their names ---------------


@dataclass(frozen=True)
class Layout:
    """Names (``named_parameters()`` order), shapes and dtypes of a model's parameters."""

    names: tuple[str, ...]
    shapes: dict[str, torch.Size]
    dtypes: dict[str, torch.dtype]
    trainable: tuple[str, ...]

    @classmethod
    def of(cls, model: nn.Module) -> Layout:
        named = list(model.named_parameters())
        return cls(
            tuple(n for n, _ in named),
            {n: p.shape for n, p in named},
            {n: p.dtype for n, p in named},
            tuple(n for n, p in named if p.requires_grad),
        )


def layout_from_factory(spec: str | Callable[[], nn.Module]) -> Layout:
    """The layout of the module ``spec`` (``MODULE:FACTORY`` or a callable) builds, built on
    the meta device: no memory, no initialisation."""
    if isinstance(spec, str):
        module_name, sep, attr = spec.partition(":")
        if not sep or not module_name or not attr:
            raise ConversionError(f"--model takes MODULE:FACTORY, got {spec!r}")
        if "" not in sys.path:
            sys.path.insert(0, "")
        factory = getattr(importlib.import_module(module_name), attr, None)
        if not callable(factory):
            raise ConversionError(f"{module_name!r} has no callable {attr!r}")
    else:
        factory = spec
    with torch.device("meta"):
        made = factory()
    model = made[0] if isinstance(made, tuple) else made
    if not isinstance(model, nn.Module):
        raise ConversionError(f"the model factory returned {type(model).__name__}, not a module")
    return Layout.of(model)


# -- shards back into whole tensors ----------------------------------------------------------


def assemble(pieces: Sequence[OfflineShardedTensor], what: str) -> Tensor:
    """The whole tensor from every rank's ``ShardedTensor`` shards; each element exactly once."""
    size = pieces[0].size
    if any(p.size != size for p in pieces):
        raise ConversionError(f"{what}: ranks disagree on its size")
    ranks = {p.world_size for p in pieces}
    if ranks != {len(pieces)}:
        raise ConversionError(
            f"{what}: saved by a job of {sorted(ranks)} ranks, {len(pieces)} rank files given"
        )
    shards = [s for p in pieces for s in p.shards]
    if not shards:
        raise ConversionError(f"{what}: no rank holds a shard")
    out = torch.empty(size, dtype=shards[0][1].dtype)
    seen = torch.zeros(size, dtype=torch.int32)
    for offsets, t in shards:
        index = tuple(slice(o, o + n) for o, n in zip(offsets, t.shape))
        out[index] = t
        seen[index] += 1
    if not bool((seen == 1).all()):
        raise ConversionError(f"{what}: the rank files do not cover it exactly once")
    return out


def flat_offsets(
    names: Sequence[str], layout: Layout, world_size: int, aligned: bool, dtype: torch.dtype
) -> tuple[list[tuple[str, int]], int]:
    """Where FSDP1 puts each parameter in a unit's flat parameter: ``(name, offset)`` and the
    total length. ``aligned`` (``use_orig_params=True``): each parameter starts at a multiple
    of 16 bytes of ``dtype`` (the flat parameter's) and the total is padded to a multiple of
    the world size."""
    step = torch_internals.call("aligned_numel", unsharded_dtype=dtype) if aligned else 1
    placed, total = [], 0
    for n in names:
        total += -total % step
        placed.append((n, total))
        total += layout.shapes[n].numel()
    if aligned:
        total += -total % world_size
    return placed, total


def unflatten(
    flat: Tensor,
    names: Sequence[str],
    layout: Layout,
    world_size: int,
    what: str,
    aligned: bool | None = None,
) -> dict[str, Tensor]:
    """``flat`` (a unit's flat parameter, or a state tensor shaped like it) as its parameters.

    ``aligned``: whether FSDP1 padded for alignment (``use_orig_params=True``); None: the
    layout whose length fits. A length that fits both layouts with different offsets is
    refused. A length padded up to a multiple of ``world_size`` (a sharded flat parameter
    put back together) fits too.
    """
    fits = []
    for candidate in (False, True) if aligned is None else (aligned,):
        placed, total = flat_offsets(names, layout, world_size, candidate, flat.dtype)
        if flat.numel() in (total, total + (-total % world_size)):
            fits.append(placed)
    if not fits:
        sizes = [int(layout.shapes[n].numel()) for n in names]
        raise ConversionError(
            f"{what}: {flat.numel()} elements do not hold the parameters {list(names)} "
            f"({sizes} elements, with or without FSDP1's alignment padding): saved for another "
            "model, another wrap policy or another world size"
        )
    if any(f != fits[0] for f in fits):
        raise ConversionError(
            f"{what}: {flat.numel()} elements fit FSDP1's layout with and without alignment "
            "padding, at different offsets: cannot tell whether use_orig_params was set"
        )
    return {
        n: flat[o : o + layout.shapes[n].numel()].reshape(layout.shapes[n]).clone()
        for n, o in fits[0]
    }


def unit_members(units: Sequence[str], layout: Layout) -> dict[str, list[str]]:
    """The parameters each FSDP1 unit (by module path, "" the root) flattened: those under it
    and under no deeper unit, in ``named_parameters()`` order."""

    def under(name: str, unit: str) -> bool:
        return unit == "" or name.startswith(unit + ".")

    members: dict[str, list[str]] = {u: [] for u in units}
    for n in layout.names:
        owners = [u for u in units if under(n, u)]
        if owners:
            members[max(owners, key=len)].append(n)  # the innermost: a proper prefix is shorter
    empty = [u for u, names in members.items() if not names]
    if empty:
        raise ConversionError(f"FSDP1 units {empty} hold no parameter of the model given")
    return members


def unit_order(units: Sequence[str], layout: Layout) -> list[str]:
    """Units in FSDP1's parameter order (the root's ``named_parameters()``: module pre-order,
    a unit's flat parameter before those of the units inside it)."""
    first = {}
    for u in units:
        idx = [i for i, n in enumerate(layout.names) if u == "" or n.startswith(u + ".")]
        first[u] = min(idx) if idx else math.inf
    return sorted(units, key=lambda u: (first[u], u.count(".") + (1 if u else 0)))


# -- positional state (SpecForge masters, an optimizer's own state_dict) ---------------------


@dataclass(frozen=True)
class Target:
    """What one optimizer position holds: a parameter, or a unit's flat parameter."""

    names: tuple[str, ...]
    flat: bool


def position_targets(count: int, layout: Layout, names: Sequence[str], units: Sequence[str] | None):
    if units is not None:
        members = unit_members(units, layout)
        order = unit_order(units, layout)
        if count == len(order):
            return [Target(tuple(members[u]), True) for u in order]
        raise ConversionError(
            f"the checkpoint holds {count} positions, the model has {len(order)} FSDP1 units"
        )
    if count != len(names):
        raise ConversionError(
            f"the checkpoint holds {count} positional tensors, the model given has "
            f"{len(names)} trainable parameters: it was saved for another model, for an inner "
            "module (build that module), or with use_orig_params=False (give the FSDP1 units)"
        )
    return [Target((n,), False) for n in names]


def join_pieces(
    pieces: Sequence[Tensor | None], target: Target, layout: Layout, what: str
) -> dict[str, Tensor]:
    """One position's pieces from every rank (None: the rank holds none) as whole tensors."""
    held = [p for p in pieces if p is not None]
    if not held:
        raise ConversionError(f"{what}: no rank holds it")
    if not target.flat:
        (name,) = target.names
        shape = layout.shapes[name]
        if all(p.shape == shape for p in held):  # whole on every rank (one file, NO_SHARD)
            return {name: held[0].clone()}
        whole = torch.cat([p.reshape(-1) for p in held])
        if whole.numel() != shape.numel():
            raise ConversionError(
                f"{what}: the ranks' pieces hold {whole.numel()} elements, parameter "
                f"{name!r} has shape {tuple(shape)}: saved for another model or a missing rank"
            )
        return {name: whole.reshape(shape).clone()}
    # An optimizer holds flat parameters only with use_orig_params=False: no alignment.
    whole = torch.cat([p.reshape(-1) for p in held])
    return unflatten(whole, target.names, layout, len(pieces), what, aligned=False)


def positional_optimizer_state(
    per_rank: Sequence[dict[str, Any]], targets: Sequence[Target], layout: Layout, what: str
) -> dict[str, Any]:
    """Every rank's ``optimizer.state_dict()`` (by position) as one name-keyed full state."""
    groups = per_rank[0]["param_groups"]
    positions = sorted(i for g in groups for i in g["params"])
    if positions != list(range(len(targets))):
        raise ConversionError(
            f"{what}: optimizer groups name {len(positions)} positions, {len(targets)} expected"
        )
    state: dict[str, dict[str, Any]] = {}
    for i, target in enumerate(targets):
        entries = [r["state"].get(i) for r in per_rank]
        present = [e for e in entries if e]
        if not present:
            continue
        keys = sorted(present[0])
        for key in keys:
            values = [None if not e else e.get(key) for e in entries]
            sample = next(v for v in values if v is not None)
            if isinstance(sample, Tensor) and sample.dim() > 0:
                whole = join_pieces(values, target, layout, f"{what} {key!r} at position {i}")
            else:
                whole = {
                    n: sample.clone() if isinstance(sample, Tensor) else sample
                    for n in target.names
                }
            for n, v in whole.items():
                state.setdefault(n, {})[key] = v
    named_groups = [
        {**g, "params": [n for i in g["params"] for n in targets[i].names]} for g in groups
    ]
    return {"state": state, "param_groups": named_groups}
