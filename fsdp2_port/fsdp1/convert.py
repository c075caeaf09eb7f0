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

import contextlib
import contextvars
import functools
import importlib
import io
import math
import os
import pathlib
import pickle
import sys
import tempfile
import types
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from fsdp2_port.fsdp1 import torch_internals
from fsdp2_port.fsdp1.checkpoint_formats import FORMATS
from fsdp2_port.train.lr_schedules import own_form_offline
from fsdp2_port.train.master_weights import REBUILT_KEY

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
    if _dotted(new_type) == _SHARDED_TENSOR:
        local_shards, metadata, pg_state = state[0], state[1], state[2]
        return OfflineShardedTensor(
            torch.Size(metadata.size),
            [(list(s.metadata.shard_offsets), s.tensor) for s in local_shards],
            int(pg_state.local_world_size),  # its process group: one replica under HSDP
        )
    if isinstance(new_type, type) and issubclass(new_type, _Inert):
        return new_type()
    return torch_internals.load("rebuild_from_type_v2")(func, new_type, args, state)


def _rebuild_tensor_offline(storage: Any, storage_offset: int, size: Any, *args: Any) -> Any:
    """A tensor; one whose storage FSDP1 had freed (0 bytes) comes back empty. An fp32 FSDP1
    flat parameter is its own master, and pickling it pickles the views into its unsharded
    storage with it: ``torch.load`` fails on them ("Trying to resize storage that is not
    resizable"). Nothing converted reads them; a master that came back empty would not fit
    its parameter and be refused."""
    with warnings.catch_warnings():  # torch.load hands it a TypedStorage, deprecated
        warnings.filterwarnings("ignore", "TypedStorage is deprecated", UserWarning)
        freed = storage.nbytes() == 0
    if freed and math.prod(size) > 0:
        return torch.empty(0, dtype=storage.dtype)
    rebuild = torch_internals.load("rebuild_tensor_v2")
    return rebuild(storage, storage_offset, size, *args)


# -- loading without running code -------------------------------------------------------------
#
# A pickle names functions and classes that unpickling calls: a checkpoint from someone else
# can name os.system. Unless the caller trusts it (``--trust-pickle``), a checkpoint builds
# only what torch's own weights-only loading builds and the pieces of FSDP1's ShardedTensor
# and of DCP's metadata that conversion reads (``_allowed``). Anything else it names becomes
# an inert stand-in that calls nothing: a checkpoint of these formats may carry such objects
# where conversion never looks (an fp32 flat parameter pickles the modules it came from), and
# one that conversion would read is refused. DCP's own pickles (its metadata, its non-tensor
# items) are checked strictly, every name allowed, before torch unpickles them.

_TRUSTED: contextvars.ContextVar[bool] = contextvars.ContextVar("trust_pickle", default=False)
_SHARDED_TENSOR = ".".join((torch_internals.ENTRY_POINTS["sharded_tensor"].module, "ShardedTensor"))
_TRUST_HINT = "pass --trust-pickle to load it anyway, only for a checkpoint you trust"


class _Inert:
    """What a name outside ``_allowed`` unpickles to: a class that builds nothing and takes
    whatever unpickling hands it. ``name``: the dotted name the pickle asked for."""

    name = ""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        return object.__new__(cls)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        pass

    def __setitem__(self, key: Any, value: Any) -> None:
        pass

    def append(self, item: Any) -> None:
        pass

    def extend(self, items: Any) -> None:
        pass


@functools.cache
def _inert(name: str) -> type[_Inert]:
    return type(name.rpartition(".")[2] or "inert", (_Inert,), {"name": name})


def _dotted(value: Any) -> str:
    if isinstance(value, type) and issubclass(value, _Inert):
        return value.name
    module = getattr(value, "__module__", None) or ""
    return f"{module}.{getattr(value, '__qualname__', '')}"


@functools.cache
def _allowed() -> dict[str, Any]:
    """Dotted name -> what a pickle not trusted may build: what torch's weights-only loading
    builds, the parts of a ShardedTensor conversion reads (not the tensor itself: see
    ``_rebuild_offline``), and DCP's metadata classes."""
    from torch.distributed.checkpoint import metadata

    allowed = dict(torch_internals.call("weights_only_globals"))
    allowed.update(
        [
            _entry("sharded_tensor_pg_state"),
            _entry("sharded_tensor_shard"),
            _entry("shard_metadata"),
            _entry("sharded_tensor_metadata"),
            _entry("dcp_storage_info"),
            _entry("dcp_memory_format_encoding"),
        ]
    )
    for name in (
        "Metadata",
        "MetadataIndex",
        "StorageMeta",
        "TensorProperties",
        "TensorStorageMetadata",
        "BytesStorageMetadata",
        "ChunkStorageMetadata",
    ):
        allowed[f"{metadata.__name__}.{name}"] = getattr(metadata, name)
    allowed["pathlib.PosixPath"] = pathlib.PosixPath
    allowed["pathlib.PurePosixPath"] = pathlib.PurePosixPath
    allowed["builtins.frozenset"] = frozenset
    allowed["builtins.getattr"] = _getattr
    for key, replacement in (
        ("rebuild_from_type_v2", _rebuild_offline),
        ("rebuild_tensor_v2", _rebuild_tensor_offline),
    ):
        entry = torch_internals.ENTRY_POINTS[key]
        allowed[f"{entry.module}.{entry.name}"] = replacement
    return allowed


def _entry(key: str) -> tuple[str, Any]:
    """``(dotted name, object)`` of a torch_internals entry."""
    entry = torch_internals.ENTRY_POINTS[key]
    return f"{entry.module}.{entry.name}", torch_internals.load(key)


def _getattr(owner: Any, name: str) -> Any:
    """``getattr`` as a pickle uses it (a nested class): only for an allowed name."""
    dotted = f"{_dotted(owner)}.{name}"
    return _allowed().get(dotted, _inert(dotted))


class _OfflineUnpickler(pickle.Unpickler):
    """``mode``: "trusted" (Python's unpickler; only the two rebuild functions replaced),
    "inert" (names outside ``_allowed`` become ``_Inert``) or "strict" (they are refused)."""

    mode = "inert"
    source = ""

    def find_class(self, module: str, name: str) -> Any:
        module = "builtins" if module == "__builtin__" else module
        dotted = f"{module}.{name}"
        if self.mode == "trusted":
            for key, replacement in (
                ("rebuild_from_type_v2", _rebuild_offline),
                ("rebuild_tensor_v2", _rebuild_tensor_offline),
            ):
                entry = torch_internals.ENTRY_POINTS[key]
                if (module, name) == (entry.module, entry.name):
                    return replacement
            return super().find_class(module, name)
        found = _allowed().get(dotted)
        if found is not None:
            return found
        if self.mode == "strict":
            raise ConversionError(
                f"{self.source}: refused: its pickle names {dotted}, which a checkpoint of "
                f"these formats never holds and which could run code ({_TRUST_HINT})"
            )
        return _inert(dotted)


@functools.cache
def _pickle_module(mode: str, source: str = "") -> types.ModuleType:
    """A module ``torch.load`` takes as ``pickle_module``: ``_OfflineUnpickler`` in ``mode``
    for the data and for every header a legacy file pickles."""
    unpickler = type("Unpickler", (_OfflineUnpickler,), {"mode": mode, "source": source})
    module = types.ModuleType(f"fsdp2_port_offline_pickle_{mode}")
    module.Unpickler = unpickler  # type: ignore[attr-defined]
    module.load = lambda file, **kwargs: unpickler(file, **kwargs).load()  # type: ignore[attr-defined]
    return module


def _refuse_inert(value: Any, path: str | Path) -> None:
    """Raise when a stand-in (``_Inert``) sits where conversion reads: in the dicts, lists,
    tuples and sets of the loaded value (not inside tensors)."""
    stack = [value]
    while stack:
        item = stack.pop()
        stand_in = type(item) if isinstance(item, _Inert) else item
        if isinstance(stand_in, type) and issubclass(stand_in, _Inert):
            raise ConversionError(
                f"{path}: refused: it holds a {stand_in.name} object, which a checkpoint of "
                f"these formats never holds and whose loading could run code ({_TRUST_HINT})"
            )
        if isinstance(item, dict):
            stack += [*item.keys(), *item.values()]
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack += list(item)


def load_offline(path: str | Path, *, trust_pickle: bool | None = None) -> Any:
    """``torch.load`` of a file written by an FSDP1 rank; ``ShardedTensor`` values come back
    as ``OfflineShardedTensor`` (loading them as torch does needs the job's process group).
    Nothing in the file runs unless ``trust_pickle`` (None: as ``convert_checkpoint`` was
    told); see above."""
    trusted = _TRUSTED.get() if trust_pickle is None else trust_pickle
    try:
        loaded = torch.load(
            path,
            map_location="cpu",
            weights_only=False,
            pickle_module=_pickle_module("trusted" if trusted else "inert"),
        )
    except (FileNotFoundError, ConversionError):
        raise
    except Exception as e:
        raise ConversionError(f"cannot read {path}: {type(e).__name__}: {e}") from e
    if not trusted:
        _refuse_inert(loaded, path)
    return loaded


def _check_pickle(data: bytes, source: str) -> None:
    """Refuse (``ConversionError``) a pickle that names anything outside ``_allowed``."""
    try:
        _pickle_module("strict", source).Unpickler(io.BytesIO(data)).load()
    except ConversionError:
        raise
    except Exception as e:
        raise ConversionError(f"cannot read {source}: {type(e).__name__}: {e}") from e


def _check_saved(data: bytes, source: str) -> None:
    """Refuse a ``torch.save`` blob whose pickle names anything outside ``_allowed``."""
    try:
        torch.load(
            io.BytesIO(data), weights_only=False, pickle_module=_pickle_module("strict", source)
        )
    except ConversionError:
        raise
    except Exception as e:
        raise ConversionError(f"cannot read {source}: {type(e).__name__}: {e}") from e


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
    """The whole state dict of a DCP checkpoint, loaded as ``format_utils.dcp_to_torch_save``
    loads it; unless trusted, every pickle in it (its metadata, its non-tensor items) is
    checked before torch unpickles it."""
    from torch.distributed.checkpoint import CheckpointException, FileSystemReader

    trusted = _TRUSTED.get()
    planner_type = torch_internals.load("dcp_empty_load_planner")
    refused: list[ConversionError] = []  # DCP wraps what its planner raises: said once, here

    class Planner(planner_type):  # type: ignore[misc, valid-type]
        def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
            if not trusted:
                data = value.read()
                try:
                    _check_saved(data, f"{src} (item {read_item.dest_index.fqn})")
                except ConversionError as e:
                    refused.append(e)
                    raise
                value = io.BytesIO(data)
            super().load_bytes(read_item, value)

    for path in sorted(Path(src).iterdir()):  # before torch reads them (and logs failures)
        if path.name.endswith(".metadata") and not trusted:
            _check_pickle(path.read_bytes(), str(path))
    state: dict[str, Any] = {}
    try:
        torch_internals.call(
            "dcp_load_state_dict",
            state_dict=state,
            storage_reader=FileSystemReader(src),
            process_group=None,
            coordinator_rank=0,
            no_dist=True,
            planner=Planner(),
        )
    except (Exception, CheckpointException) as e:  # the latter is a BaseException
        if refused:
            raise refused[0] from None
        last = (str(e).strip().splitlines() or [""])[-1]
        raise ConversionError(f"cannot read {src}: {type(e).__name__}: {last}") from e
    return state


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
    trust_pickle: bool = False,
    rebuild_missing: str | Path | None = None,
    announce: Callable[[str], None] | None = None,
) -> str:
    """Convert ``src`` (see the module's docstring) into ``dst``; returns the format read.

    ``src`` holding ``{rank}`` names one file per rank of the FSDP1 job. ``model``: the model
    (``MODULE:FACTORY``, built on the meta device), needed for positions and flat parameters,
    and checked against for the others. ``units``: FSDP1 units' module paths ("" the root),
    for a SpecForge checkpoint saved with ``use_orig_params=False``. ``trust_pickle``: load
    ``src`` with Python's unpickler, which runs any code it names (otherwise nothing in it
    runs: see "loading without running code"). ``dst`` is never one of the files read.
    ``rebuild_missing``: the model weights saved with a SpecForge checkpoint whose optimizer
    state some ranks never wrote (``_with_rebuilt``); ``announce`` receives what was rebuilt,
    one line each.
    """
    src = str(src)
    if fmt not in FORMATS:
        raise ConversionError(f"unknown format {fmt!r}: one of {', '.join(FORMATS)}")
    _check_destination(src, Path(dst))
    trusted = _TRUSTED.set(trust_pickle)
    try:
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
    finally:
        _TRUSTED.reset(trusted)
    _save(_unaliased(out, set()), Path(dst))
    return kind


def _check_destination(src: str, dst: Path) -> None:
    """Refuse a ``dst`` that cannot be written, or that is one of the files ``src`` names
    (or lies inside a DCP checkpoint being read)."""
    if dst.is_dir():
        raise ConversionError(f"{dst} is a directory: give the file to write")
    if not dst.parent.resolve().is_dir():
        raise ConversionError(f"{dst}: no directory {dst.parent} to write it in")
    if Path(src).is_dir():
        if dst.resolve().is_relative_to(Path(src).resolve()):
            raise ConversionError(f"{dst} is inside the checkpoint being read ({src})")
        return
    read = []
    if "{rank}" in src:
        rank = 0
        while Path(src.replace("{rank}", str(rank))).is_file():
            read.append(Path(src.replace("{rank}", str(rank))))
            rank += 1
    else:
        read.append(Path(src))
    for path in read:
        if dst.resolve() == path.resolve() or (
            dst.exists() and path.exists() and os.path.samefile(dst, path)
        ):
            raise ConversionError(f"{dst} is the checkpoint being read ({path}): write elsewhere")


def _save(value: Any, dst: Path) -> None:
    """``torch.save`` into a new file of this process's beside ``dst`` (never through a link
    planted there), then renamed over it: ``dst`` appears whole or not at all."""
    fd, temporary = tempfile.mkstemp(prefix=f".{dst.name}.", suffix=".tmp", dir=dst.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            torch.save(value, handle)
            handle.flush()
            os.fsync(handle.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)  # what a plain open() would have given it
        os.replace(temporary, dst)
    except (OSError, RuntimeError) as e:
        raise ConversionError(f"cannot write {dst}: {e}") from e
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
