"""SpecForge's checkpoint (``fsdp2_port.compat.BF16Optimizer`` / SpecForge's ``fp32_params`` by
position)
named for ``fsdp2_port.BF16Optimizer``, what some ranks never saved rebuilt on request
(``--rebuild-missing``), and its scheduler state in ``fsdp2_port``'s form (``convert``'s
docstring says what the output holds)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from fsdp2_port.fsdp1.checkpoint_formats import ConversionError
from fsdp2_port.fsdp1.checkpoint_layout import (
    Layout,
    Target,
    join_pieces,
    position_targets,
    positional_optimizer_state,
)
from fsdp2_port.fsdp1.checkpoint_load import load_offline, rank_files
from fsdp2_port.train.lr_schedules import own_form_offline
from fsdp2_port.train.master_weights import REBUILT_KEY


def read_specforge(
    src: str, layout: Layout | None, units: Sequence[str] | None, rebuild: Rebuild | None = None
) -> dict[str, Any]:
    files = rank_files(src) if "{rank}" in src else [Path(src)]
    per_rank = [load_offline(f) for f in files]
    first = per_rank[0]
    if isinstance(first.get("fp32_params"), dict):
        return dict(first)  # already by name (fsdp2_port.compat.fsdp2_state_dict)
    if layout is None:
        raise ConversionError(
            "a SpecForge checkpoint keeps masters by position: give the model (--model "
            "MODULE:FACTORY building the module its optimizer was given) to name them"
        )
    count = len(first["fp32_params"])
    if any(len(r["fp32_params"]) != count for r in per_rank):
        raise ConversionError("the rank files hold different numbers of masters")
    targets = position_targets(count, layout, layout.trainable, units)
    incomplete = _incomplete(per_rank, targets, layout)
    if incomplete or rebuild is not None:
        return _with_rebuilt(src, per_rank, targets, layout, incomplete, rebuild)
    masters: dict[str, Tensor] = {}
    for i, t in enumerate(targets):
        masters.update(
            join_pieces([r["fp32_params"][i] for r in per_rank], t, layout, f"master {i}")
        )
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
    per_rank: Sequence[dict[str, Any]], targets: Sequence[Target], layout: Layout
) -> dict[str, tuple[int, int]]:
    """Per parameter whose saved master pieces do not make the whole tensor: (elements saved,
    elements in all). The pieces of a ``use_orig_params=True`` run are rank 0's, rank 1's, ...
    in order, so what the files hold is the first ``saved`` elements (SpecForge saves its
    ``training_state.pt`` on rank 0 only)."""
    missing: dict[str, tuple[int, int]] = {}
    for i, target in enumerate(targets):
        pieces = [r["fp32_params"][i] for r in per_rank if r["fp32_params"][i] is not None]
        if target.flat:
            continue  # join_pieces refuses a short flat parameter (padding needs the world size)
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
    targets: Sequence[Target],
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


def own_schedule(out: dict[str, Any]) -> dict[str, Any]:
    """``out`` with a SpecForge scheduler state in the form ``fsdp2_port`` writes."""
    schedule = out.get("scheduler_state_dict")
    if not isinstance(schedule, dict):
        return out
    try:
        return {**out, "scheduler_state_dict": own_form_offline(schedule)}
    except (KeyError, ValueError, TypeError) as e:
        raise ConversionError(f"the scheduler state cannot be read: {e}") from e
