"""Old checkpoints, new run: what FSDP1 saved, turned offline into what the FSDP2 code loads.

``convert_checkpoint(src, dst, fmt="auto", model=None)`` reads a checkpoint written before
the migration and writes one ``torch.save`` file of full (unsharded) tensors keyed by
fully-qualified parameter name. No process group and no FSDP1 job are needed.

Formats (``fmt``) and what the output holds:

- ``specforge``: ``compat.BF16Optimizer.state_dict()`` / SpecForge's (``fp32_params`` by
  position). One file of full tensors, or one file per rank (``SRC`` holds ``{rank}``) of
  FSDP1 shards: ``use_orig_params=True`` views (1-D pieces, concatenated in rank order) or,
  with ``units``, flat parameters. Positions are the trainable parameters of the module the
  old optimizer was given, in its ``named_parameters()`` order (``model`` builds that module).
  Output: the name-keyed form ``fsdp2_port.BF16Optimizer.load_state_dict`` takes
  (``compat.fsdp2_state_dict``'s), other top-level keys kept, SpecForge's scheduler state
  (``after_scheduler_dict``, ``warmup_epochs``) in ``fsdp2_port``'s form. Files that hold some
  ranks' pieces only (SpecForge's ``training_state.pt``: rank 0's) are refused, naming what is
  missing, unless ``rebuild_missing`` names the model weights to rebuild it from
  (``_with_rebuilt``; recorded under ``REBUILT_KEY``).
- ``full``: FSDP1 ``FULL_STATE_DICT`` model state and ``FSDP.optim_state_dict`` (already by
  name): checked and copied. ``dcp``: FSDP1 ``SHARDED_STATE_DICT`` saved with
  ``torch.distributed.checkpoint`` (a directory with ``.metadata``): read whole.
  ``sharded``: the legacy form, FSDP1 ``SHARDED_STATE_DICT`` ``torch.save``-d per rank
  (``ShardedTensor``): shards placed at their offsets. ``local``: ``LOCAL_STATE_DICT`` per
  rank (each unit's flat parameter, a ``ShardedTensor``) with each rank's
  ``optimizer.state_dict()``: flat parameters unflattened with the layout FSDP1 builds from
  ``model``'s parameters (its alignment padding under ``use_orig_params=True`` included).
  Output: ``{"model": {fqn: tensor}, "optim": {"state": {fqn: ...}, "param_groups": [...]},
  ...}`` for ``set_model_state_dict`` / ``set_optimizer_state_dict`` with
  ``StateDictOptions(full_state_dict=True)``; other top-level keys (a scheduler, the step)
  kept as they are.

Every refusal is a ``ConversionError`` naming what did not fit.
"""

from __future__ import annotations

import importlib
import math
import pickle
import sys
import tempfile
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from fsdp2_port.fsdp1 import torch_internals
from fsdp2_port.train.lr_schedules import own_form_offline
from fsdp2_port.train.master_weights import REBUILT_KEY

FORMATS = ("auto", "specforge", "full", "dcp", "sharded", "local")
_FLAT = torch_internals.FSDP1_FLAT_PARAM


class ConversionError(ValueError):
    """The checkpoint cannot be converted as asked; the message says why."""


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


# -- reading per-rank files without a process group -----------------------------------------


@dataclass
class OfflineShardedTensor:
    """A pickled FSDP1 ``ShardedTensor``, read without a process group: its global size and
    this rank's shards, each as ``(offsets, tensor)``."""

    size: torch.Size
    shards: list[tuple[list[int], Tensor]]
    world_size: int


def _rebuild_offline(func: Any, new_type: type, args: Any, state: Any) -> Any:
    if new_type.__name__ == "ShardedTensor":
        local_shards, metadata, pg_state = state[0], state[1], state[2]
        return OfflineShardedTensor(
            torch.Size(metadata.size),
            [(list(s.metadata.shard_offsets), s.tensor) for s in local_shards],
            int(pg_state.local_world_size),  # its process group: one replica under HSDP
        )
    return torch_internals.load("rebuild_from_type_v2")(func, new_type, args, state)


def _rebuild_tensor_offline(storage: Any, storage_offset: int, size: Any, *args: Any) -> Any:
    """A tensor; one whose storage FSDP1 had freed (0 bytes) comes back empty. An fp32 FSDP1
    flat parameter is its own master, and pickling it pickles the views into its unsharded
    storage with it: ``torch.load`` fails on them ("Trying to resize storage that is not
    resizable"). Nothing converted reads them; a master that came back empty would not fit
    its parameter and be refused."""
    if storage.nbytes() == 0 and math.prod(size) > 0:
        return torch.empty(0, dtype=storage.dtype)
    rebuild = torch_internals.load("rebuild_tensor_v2")
    return rebuild(storage, storage_offset, size, *args)


class _OfflineUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        for key, replacement in (
            ("rebuild_from_type_v2", _rebuild_offline),
            ("rebuild_tensor_v2", _rebuild_tensor_offline),
        ):
            entry = torch_internals.ENTRY_POINTS[key]
            if (module, name) == (entry.module, entry.name):
                return replacement
        return super().find_class(module, name)


_OFFLINE_PICKLE = types.ModuleType("fsdp2_port_offline_pickle")
_OFFLINE_PICKLE.Unpickler = _OfflineUnpickler  # type: ignore[attr-defined]
_OFFLINE_PICKLE.load = pickle.load  # type: ignore[attr-defined]


def load_offline(path: str | Path) -> Any:
    """``torch.load`` of a file written by an FSDP1 rank; ``ShardedTensor`` values come back
    as ``OfflineShardedTensor`` (loading them as torch does needs the job's process group)."""
    try:
        return torch.load(
            path, map_location="cpu", weights_only=False, pickle_module=_OFFLINE_PICKLE
        )
    except FileNotFoundError:
        raise
    except Exception as e:
        raise ConversionError(f"cannot read {path}: {type(e).__name__}: {e}") from e


def rank_files(src: str) -> list[Path]:
    """``src`` with ``{rank}`` replaced by 0, 1, ... while the file exists (at least rank 0)."""
    found: list[Path] = []
    while Path(src.replace("{rank}", str(len(found)))).is_file():
        found.append(Path(src.replace("{rank}", str(len(found)))))
    if not found:
        raise ConversionError(f"no rank files {src} (looked for {src.replace('{rank}', '0')})")
    return found


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


def _clean(fqn: str) -> str:
    return torch_internals.without_fsdp1_wrappers(fqn)


# -- positional state (SpecForge masters, an optimizer's own state_dict) ---------------------


@dataclass(frozen=True)
class _Target:
    """What one optimizer position holds: a parameter, or a unit's flat parameter."""

    names: tuple[str, ...]
    flat: bool


def _targets(count: int, layout: Layout, names: Sequence[str], units: Sequence[str] | None):
    if units is not None:
        members = unit_members(units, layout)
        order = unit_order(units, layout)
        if count == len(order):
            return [_Target(tuple(members[u]), True) for u in order]
        raise ConversionError(
            f"the checkpoint holds {count} positions, the model has {len(order)} FSDP1 units"
        )
    if count != len(names):
        raise ConversionError(
            f"the checkpoint holds {count} positional tensors, the model given has "
            f"{len(names)} trainable parameters: it was saved for another model, for an inner "
            "module (build that module), or with use_orig_params=False (give the FSDP1 units)"
        )
    return [_Target((n,), False) for n in names]


def _join(
    pieces: Sequence[Tensor | None], target: _Target, layout: Layout, what: str
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
    per_rank: Sequence[dict[str, Any]], targets: Sequence[_Target], layout: Layout, what: str
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
                whole = _join(values, target, layout, f"{what} {key!r} at position {i}")
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


# -- the formats --------------------------------------------------------------------------


def _specforge(
    src: str, layout: Layout | None, units: Sequence[str] | None, rebuild: Rebuild | None = None
) -> dict[str, Any]:
    files = rank_files(src) if "{rank}" in src else [Path(src)]
    per_rank = [load_offline(f) for f in files]
    first = per_rank[0]
    if isinstance(first.get("fp32_params"), dict):
        return dict(first)  # already by name (compat.fsdp2_state_dict)
    if layout is None:
        raise ConversionError(
            "a SpecForge checkpoint keeps masters by position: give the model (--model "
            "MODULE:FACTORY building the module its optimizer was given) to name them"
        )
    count = len(first["fp32_params"])
    if any(len(r["fp32_params"]) != count for r in per_rank):
        raise ConversionError("the rank files hold different numbers of masters")
    targets = _targets(count, layout, layout.trainable, units)
    incomplete = _incomplete(per_rank, targets, layout)
    if incomplete or rebuild is not None:
        return _with_rebuilt(src, per_rank, targets, layout, incomplete, rebuild)
    masters: dict[str, Tensor] = {}
    for i, t in enumerate(targets):
        masters.update(_join([r["fp32_params"][i] for r in per_rank], t, layout, f"master {i}"))
    optim = positional_optimizer_state(
        [r["optimizer_state_dict"] for r in per_rank], targets, layout, "optimizer state"
    )
    return {**first, "fp32_params": masters, "optimizer_state_dict": optim}


# -- SpecForge state some ranks never saved, and its schedule ----------------------------------


@dataclass(frozen=True)
class Rebuild:
    """``--rebuild-missing``: the model weights to rebuild missing masters from."""

    weights: Path
    announce: Callable[[str], None] | None = None


def _incomplete(
    per_rank: Sequence[dict[str, Any]], targets: Sequence[_Target], layout: Layout
) -> dict[str, tuple[int, int]]:
    """Per parameter whose saved master pieces do not make the whole tensor: (elements saved,
    elements in all). The pieces of a ``use_orig_params=True`` run are rank 0's, rank 1's, ...
    in order, so what the files hold is the first ``saved`` elements (SpecForge saves its
    ``training_state.pt`` on rank 0 only)."""
    missing: dict[str, tuple[int, int]] = {}
    for i, target in enumerate(targets):
        pieces = [r["fp32_params"][i] for r in per_rank if r["fp32_params"][i] is not None]
        if target.flat:
            continue  # _join refuses a short flat parameter (its padding needs the world size)
        (name,) = target.names
        shape = layout.shapes[name]
        if pieces and all(p.shape == shape for p in pieces):
            continue
        saved = sum(p.numel() for p in pieces)
        if saved < shape.numel():
            missing[name] = (saved, shape.numel())
    return missing


def _what_is_missing(src: str, missing: dict[str, tuple[int, int]], files: int) -> str:
    each = [f"{n!r} ({k} of {t} elements saved)" for n, (k, t) in missing.items()]
    shown = ", ".join(each[:3]) + (f" and {len(each) - 3} more" if len(each) > 3 else "")
    whose = "one rank's pieces" if files == 1 else f"the pieces of {files} ranks only"
    return (
        f"{src} holds {whose} of the optimizer state (SpecForge saves training_state.pt on "
        f"rank 0 only): the fp32 masters and Adam moments of {len(missing)} parameters are "
        f"incomplete, {shown}; the other ranks' pieces were never saved. Convert every rank's "
        "file (SRC with {rank}) if the run wrote them, or pass --rebuild-missing WEIGHTS (the "
        "model weights saved with this checkpoint) to rebuild the missing masters from them "
        "and start the missing Adam moments at zero"
    )


def _with_rebuilt(
    src: str,
    per_rank: Sequence[dict[str, Any]],
    targets: Sequence[_Target],
    layout: Layout,
    missing: dict[str, tuple[int, int]],
    rebuild: Rebuild | None,
) -> dict[str, Any]:
    """The name-keyed state with what no file holds rebuilt, recorded under ``REBUILT_KEY``.

    A master's missing elements come from the model weights (the saved elements, cast to the
    weights' dtype, must equal them: the optimizer writes its masters back to the weights);
    missing Adam moments start at zero. A parameter with no saved element at all restarts
    Adam (``step`` 0, so its bias correction is a fresh one's); a partly saved one keeps its
    step. Refused (one line, what is missing) without ``rebuild``.
    """
    if rebuild is None:
        raise ConversionError(_what_is_missing(src, missing, len(per_rank)))
    say = rebuild.announce or (lambda line: None)
    if not missing:
        say(f"--rebuild-missing: {src} holds every piece; nothing rebuilt")
    if any(t.flat for t in targets):
        raise ConversionError(
            "--rebuild-missing needs the per-parameter pieces of a use_orig_params=True run; "
            "this checkpoint holds FSDP1 flat parameters"
        )
    weights = _weights(rebuild.weights)
    optims = [r["optimizer_state_dict"] for r in per_rank]
    template = next(
        (
            {k: v for k, v in e.items() if isinstance(v, Tensor)}
            for o in optims
            for e in o["state"].values()
            if e
        ),
        None,
    )
    masters: dict[str, Tensor] = {}
    state: dict[str, dict[str, Any]] = {}
    for i, target in enumerate(targets):
        (name,) = target.names
        shape = layout.shapes[name]
        pieces = [r["fp32_params"][i] for r in per_rank if r["fp32_params"][i] is not None]
        master = _prefix(pieces, shape)
        saved = master.numel()
        if saved < shape.numel():
            master = torch.cat([master, _weight(weights, name, shape, master)[saved:].float()])
        masters[name] = master.reshape(shape).clone()
        entries = [o["state"].get(i) for o in optims if o["state"].get(i)]
        if not entries and template:  # no rank saved a piece: a fresh Adam's state, explicit
            entries = [{k: v[:0] if v.dim() > 0 else v for k, v in template.items()}]
        for key in sorted(entries[0]) if entries else ():
            values = [e[key] for e in entries if key in e]
            if isinstance(values[0], Tensor) and values[0].dim() > 0:
                known = _prefix([v for v in values if v.numel()], shape)
                rest = torch.zeros(shape.numel() - known.numel(), dtype=known.dtype)
                value: Any = torch.cat([known, rest]).reshape(shape)
            elif key == "step" and saved == 0 and isinstance(values[0], Tensor):
                value = torch.zeros_like(values[0])
            else:
                value = values[0].clone() if isinstance(values[0], Tensor) else values[0]
            state.setdefault(name, {})[key] = value
    groups = optims[0]["param_groups"]
    named_groups = [
        {**g, "params": [n for i in g["params"] for n in targets[i].names]} for g in groups
    ]
    record = {
        "weights": str(rebuild.weights),
        "parameters": {n: {"saved": k, "total": t} for n, (k, t) in missing.items()},
    }
    if missing:
        lost = sum(t - k for k, t in missing.values())
        say(
            f"--rebuild-missing: {len(missing)} parameters' fp32 masters rebuilt from "
            f"{rebuild.weights} ({lost} elements) and their missing Adam moments started at "
            f"zero; recorded under {REBUILT_KEY!r}: the resumed run does not continue bit for "
            "bit (its optimizer warns when it loads this file)"
        )
    out = {**per_rank[0], "fp32_params": masters}
    out["optimizer_state_dict"] = {"state": state, "param_groups": named_groups}
    if missing:
        out[REBUILT_KEY] = record
    return out


def _prefix(pieces: Sequence[Tensor], shape: torch.Size) -> Tensor:
    """The saved pieces of one tensor, in rank order, as its first elements (1-D)."""
    if len(pieces) == 1 and pieces[0].shape == shape:
        return pieces[0].reshape(-1)
    joined = torch.cat([p.reshape(-1) for p in pieces]) if pieces else torch.empty(0)
    if joined.numel() > shape.numel():
        raise ConversionError(
            f"the saved pieces hold {joined.numel()} elements, the parameter {shape.numel()}"
        )
    return joined


def _weights(path: Path) -> dict[str, Tensor]:
    """Model weights by name: a ``.safetensors`` file, a ``torch.save``-d dict of tensors
    (read without pickled code), or a ``save_pretrained`` directory holding one of them."""
    if path.is_dir():
        found = [
            path / f for f in ("model.safetensors", "pytorch_model.bin") if (path / f).is_file()
        ]
        if not found:
            raise ConversionError(
                f"--rebuild-missing: {path} holds neither model.safetensors nor "
                "pytorch_model.bin (give the weights file itself)"
            )
        path = found[0]
    if not path.is_file():
        raise ConversionError(f"--rebuild-missing: no weights file {path}")
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            loaded: Any = load_file(str(path))
        else:
            loaded = torch.load(path, map_location="cpu", weights_only=True)
    except ImportError:
        raise ConversionError(
            f"--rebuild-missing: reading {path} needs the safetensors package "
            "(pip install safetensors)"
        ) from None
    except Exception as e:
        raise ConversionError(f"--rebuild-missing: cannot read {path}: {e}") from e
    if not isinstance(loaded, dict) or not all(isinstance(v, Tensor) for v in loaded.values()):
        raise ConversionError(f"--rebuild-missing: {path} is not a dict of tensors by name")
    return loaded


def _weight(weights: dict[str, Tensor], name: str, shape: torch.Size, known: Tensor) -> Tensor:
    """The weight of ``name``, flat, checked against the master's saved elements."""
    if name not in weights:
        some = ", ".join(repr(k) for k in list(weights)[:3])
        raise ConversionError(
            f"--rebuild-missing: the weights have no {name!r} (they hold {some}, ...): give "
            "the weights of the module the optimizer was given"
        )
    weight = weights[name]
    if weight.shape != shape:
        raise ConversionError(
            f"--rebuild-missing: weight {name!r} has shape {tuple(weight.shape)}, the "
            f"parameter {tuple(shape)}"
        )
    flat = weight.reshape(-1)
    if not torch.equal(known.to(weight.dtype), flat[: known.numel()]):
        raise ConversionError(
            f"--rebuild-missing: weight {name!r} is not its saved master cast to "
            f"{weight.dtype}: the weights were saved at another step than the optimizer state"
        )
    return flat


def _own_schedule(out: dict[str, Any]) -> dict[str, Any]:
    """``out`` with a SpecForge scheduler state in the form ``fsdp2_port`` writes."""
    schedule = out.get("scheduler_state_dict")
    if not isinstance(schedule, dict):
        return out
    try:
        return {**out, "scheduler_state_dict": own_form_offline(schedule)}
    except (KeyError, ValueError, TypeError) as e:
        raise ConversionError(f"the scheduler state cannot be read: {e}") from e


def _check_by_name(out: dict[str, Any], layout: Layout | None, model_key: str, optim_key: str):
    model = out.get(model_key)
    if not isinstance(model, dict):
        raise ConversionError(f"no model state dict under {model_key!r}")
    optim = out.get(optim_key)
    if optim is not None:
        params = [n for g in optim.get("param_groups", []) for n in g["params"]]
        unknown = [n for n in [*params, *optim.get("state", {})] if n not in model]
        if unknown:
            raise ConversionError(
                f"optimizer state names parameters not in the model: {unknown[:5]}"
            )
    if layout is not None:
        for n in layout.names:
            if n not in model:
                raise ConversionError(f"the checkpoint has no parameter {n!r}")
            if model[n].shape != layout.shapes[n]:
                raise ConversionError(
                    f"{n!r}: checkpoint shape {tuple(model[n].shape)}, the model "
                    f"{tuple(layout.shapes[n])}"
                )


def _plain(value: Any, what: str) -> Any:
    """``value`` with no ``OfflineShardedTensor`` left (a single-rank file holds whole ones)."""
    if isinstance(value, OfflineShardedTensor):
        return assemble([value], what)
    if isinstance(value, dict):
        return {k: _plain(v, f"{what}.{k}") for k, v in value.items()}
    return value


def _full(src: str) -> dict[str, Any]:
    return _plain(dict(load_offline(src)), "checkpoint")


def _dcp(src: str) -> dict[str, Any]:
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    with tempfile.TemporaryDirectory() as tmp:
        dcp_to_torch_save(src, Path(tmp) / "whole.pt")
        return torch.load(Path(tmp) / "whole.pt", weights_only=False)


def _gather_sharded(per_rank: Sequence[Any], what: str) -> Any:
    """Per-rank nested dicts, merged: ``OfflineShardedTensor`` leaves assembled, others from
    rank 0."""
    first = per_rank[0]
    if isinstance(first, OfflineShardedTensor):
        return assemble(per_rank, what)
    if isinstance(first, dict):
        return {k: _gather_sharded([r[k] for r in per_rank], f"{what}.{k}") for k in first}
    return first


def _sharded(src: str) -> dict[str, Any]:
    per_rank = [load_offline(f) for f in rank_files(src)]
    return _gather_sharded(per_rank, "checkpoint")


def _local(src: str, layout: Layout | None, model_key: str, optim_key: str) -> dict[str, Any]:
    if layout is None:
        raise ConversionError(
            "a LOCAL_STATE_DICT keeps flat parameters without their parameters' names and "
            "shapes: give the model (--model MODULE:FACTORY) to unflatten them"
        )
    per_rank = [load_offline(f) for f in rank_files(src)]
    models = [r[model_key] for r in per_rank]
    world = len(per_rank)
    flats = {k: [m[k] for m in models] for k in models[0] if k.split(".")[-1] == _FLAT}
    if not flats:
        raise ConversionError(f"no flat parameters under {model_key!r}: not a LOCAL_STATE_DICT")
    units = {_clean(k[: -len(_FLAT)]): k for k in flats}
    members = unit_members(list(units), layout)
    model: dict[str, Tensor] = {}
    for unit, key in units.items():
        whole = assemble(flats[key], key)
        model.update(unflatten(whole, members[unit], layout, world, f"flat parameter {key!r}"))
    for k, v in models[0].items():  # buffers: whole on every rank
        if k not in flats and _clean(k) not in layout.names:
            model[_clean(k)] = v
    out: dict[str, Any] = {k: v for k, v in per_rank[0].items() if k not in (model_key, optim_key)}
    out[model_key] = model
    if optim_key in per_rank[0]:
        optims = [r[optim_key] for r in per_rank]
        count = sum(len(g["params"]) for g in optims[0]["param_groups"])
        ordered = unit_order(list(units), layout)
        if count == len(ordered) and count != len(layout.names):
            targets = [_Target(tuple(members[u]), True) for u in ordered]
        else:
            targets = _targets(count, layout, layout.names, None)
        out[optim_key] = positional_optimizer_state(optims, targets, layout, "optimizer state")
    return out


def _unaliased(value: Any, seen: set[int]) -> Any:
    """``value`` with every tensor its own memory. FSDP1 can hand out one ``step`` tensor for
    every parameter; ``torch.save`` keeps that sharing, and a loaded optimizer would then
    count each step once per parameter."""
    if isinstance(value, Tensor):
        key = value.untyped_storage().data_ptr()
        if value.dim() == 0 or value.numel() == 0 or key in seen:
            return value.clone()
        seen.add(key)
        return value
    if isinstance(value, dict):
        return {k: _unaliased(v, seen) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_unaliased(v, seen) for v in value)
    return value


def detect(src: str) -> str:
    """The format of ``src`` (see the module's docstring)."""
    path = Path(src)
    if path.is_dir():
        if (path / ".metadata").is_file():
            return "dcp"
        raise ConversionError(f"{src} is a directory without DCP .metadata")
    first = load_offline(rank_files(src)[0] if "{rank}" in src else path)
    if not isinstance(first, dict):
        raise ConversionError(f"{src} holds a {type(first).__name__}, not a state dict")
    if "fp32_params" in first:
        return "specforge"
    if "{rank}" not in src:
        return "full"
    leaves = [k for v in first.values() if isinstance(v, dict) for k in v]
    return "local" if any(k.split(".")[-1] == _FLAT for k in leaves) else "sharded"


def convert_checkpoint(
    src: str | Path,
    dst: str | Path,
    fmt: str = "auto",
    model: str | Callable[[], nn.Module] | None = None,
    *,
    units: Sequence[str] | None = None,
    model_key: str = "model",
    optim_key: str = "optim",
    rebuild_missing: str | Path | None = None,
    announce: Callable[[str], None] | None = None,
) -> str:
    """Convert ``src`` (see the module's docstring) into ``dst``; returns the format read.

    ``src`` holding ``{rank}`` names one file per rank of the FSDP1 job. ``model``: the model
    (``MODULE:FACTORY``, built on the meta device), needed for positions and flat parameters,
    and checked against for the others. ``units``: FSDP1 units' module paths ("" the root),
    for a SpecForge checkpoint saved with ``use_orig_params=False``. ``rebuild_missing``: the
    model weights saved with a SpecForge checkpoint whose optimizer state some ranks never
    wrote (``_with_rebuilt``); ``announce`` receives what was rebuilt, one line each.
    """
    src = str(src)
    if fmt not in FORMATS:
        raise ConversionError(f"unknown format {fmt!r}: one of {', '.join(FORMATS)}")
    kind = detect(src) if fmt == "auto" else fmt
    layout = layout_from_factory(model) if model is not None else None
    if rebuild_missing is not None and kind != "specforge":
        raise ConversionError(
            f"--rebuild-missing rebuilds SpecForge optimizer state; {src} is {kind!r}"
        )
    if kind == "specforge":
        rebuild = None if rebuild_missing is None else Rebuild(Path(rebuild_missing), announce)
        out = _own_schedule(_specforge(src, layout, units, rebuild))
    elif kind == "local":
        out = _local(src, layout, model_key, optim_key)
    else:
        out = {"full": _full, "dcp": _dcp, "sharded": _sharded}[kind](src)
        _check_by_name(out, layout, model_key, optim_key)
    tmp = Path(f"{dst}.tmp")
    try:
        torch.save(_unaliased(out, set()), tmp)
        tmp.replace(dst)  # DST appears whole or not at all
    finally:
        tmp.unlink(missing_ok=True)
    return kind
