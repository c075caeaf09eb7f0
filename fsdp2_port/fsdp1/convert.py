"""Old checkpoints, new run: what FSDP1 saved, turned offline into what the FSDP2 code loads.

``convert_checkpoint(src, dst, fmt="auto", model=None)`` reads a checkpoint written before
the migration and writes one ``torch.save`` file of full (unsharded) tensors keyed by
fully-qualified parameter name. No process group and no FSDP1 job are needed.

Formats (``fmt``) and what the output holds:

- ``specforge``: ``fsdp2_port.compat.BF16Optimizer.state_dict()`` / SpecForge's (``fp32_params`` by
  position). One file of full tensors, or one file per rank (``SRC`` holds ``{rank}``) of
  FSDP1 shards: ``use_orig_params=True`` views (1-D pieces, concatenated in rank order) or,
  with ``units``, flat parameters. Positions are the trainable parameters of the module the
  old optimizer was given, in its ``named_parameters()`` order (``model`` builds that module).
  Output: the name-keyed form ``fsdp2_port.BF16Optimizer.load_state_dict`` takes
  (``fsdp2_port.compat.fsdp2_state_dict``'s), other top-level keys kept, SpecForge's scheduler state
  (``after_scheduler_dict``, ``warmup_epochs``) in ``fsdp2_port``'s form. Files that hold some
  ranks' pieces only (SpecForge's ``training_state.pt``: rank 0's) are refused, naming what is
  missing, unless ``rebuild_missing`` names the model weights to rebuild it from
  (``convert_specforge``; recorded under ``REBUILT_KEY``).
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

Every refusal is a ``ConversionError`` naming what did not fit. Files are read by
``checkpoint_load`` (no pickled code runs unless trusted), named by ``checkpoint_layout``
(shards, flat parameters, optimizer positions); SpecForge's format is ``convert_specforge``'s.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from fsdp2_port.fsdp1 import torch_internals
from fsdp2_port.fsdp1.checkpoint_formats import FORMATS, ConversionError
from fsdp2_port.fsdp1.checkpoint_layout import (
    Layout,
    Target,
    assemble,
    layout_from_factory,
    position_targets,
    positional_optimizer_state,
    unflatten,
    unit_members,
    unit_order,
)
from fsdp2_port.fsdp1.checkpoint_load import (
    TRUSTED,
    OfflineShardedTensor,
    check_pickle,
    check_saved,
    load_offline,
    rank_files,
)
from fsdp2_port.fsdp1.convert_specforge import Rebuild, own_schedule, read_specforge

_FLAT = torch_internals.FSDP1_FLAT_PARAM


def _clean(fqn: str) -> str:
    return torch_internals.without_fsdp1_wrappers(fqn)


# -- the formats --------------------------------------------------------------------------


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

    trusted = TRUSTED.get()
    planner_type = torch_internals.load("dcp_empty_load_planner")
    refused: list[ConversionError] = []  # DCP wraps what its planner raises: said once, here

    class Planner(planner_type):  # type: ignore[misc, valid-type]
        def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
            if not trusted:
                data = value.read()
                try:
                    check_saved(data, f"{src} (item {read_item.dest_index.fqn})")
                except ConversionError as e:
                    refused.append(e)
                    raise
                value = io.BytesIO(data)
            super().load_bytes(read_item, value)

    for path in sorted(Path(src).iterdir()):  # before torch reads them (and logs failures)
        if path.name.endswith(".metadata") and not trusted:
            check_pickle(path.read_bytes(), str(path))
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
            targets = [Target(tuple(members[u]), True) for u in ordered]
        else:
            targets = position_targets(count, layout, layout.names, None)
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
    runs: see ``checkpoint_load``). ``dst`` is never one of the files read.
    ``rebuild_missing``: the model weights saved with a SpecForge checkpoint whose optimizer
    state some ranks never wrote (``convert_specforge``); ``announce`` receives what was rebuilt,
    one line each.
    """
    src = str(src)
    if fmt not in FORMATS:
        raise ConversionError(f"unknown format {fmt!r}: one of {', '.join(FORMATS)}")
    _check_destination(src, Path(dst))
    trusted = TRUSTED.set(trust_pickle)
    try:
        kind = detect(src) if fmt == "auto" else fmt
        layout = layout_from_factory(model) if model is not None else None
        if rebuild_missing is not None and kind != "specforge":
            raise ConversionError(
                f"--rebuild-missing rebuilds SpecForge optimizer state; {src} is {kind!r}"
            )
        if kind == "specforge":
            rebuild = None if rebuild_missing is None else Rebuild(Path(rebuild_missing), announce)
            out = own_schedule(read_specforge(src, layout, units, rebuild))
        elif kind == "local":
            out = _local(src, layout, model_key, optim_key)
        else:
            out = {"full": _full, "dcp": _dcp, "sharded": _sharded}[kind](src)
            _check_by_name(out, layout, model_key, optim_key)
    finally:
        TRUSTED.reset(trusted)
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
