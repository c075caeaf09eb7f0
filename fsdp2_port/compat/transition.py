"""Carry a run in flight between FSDP1 + compat and FSDP2 + fsdp2_port without losing state.

``fsdp2_state_dict`` gathers the compat optimizer's masters, Adam moments, step counts and
schedule into full tensors keyed by fully-qualified parameter name: exactly the layout of
``fsdp2_port.BF16Optimizer.state_dict()``, which loads it at any world size. ``rank_pieces``
goes the other way: such a state (also what ``fsdp2-port convert-checkpoint`` writes) as this
rank's pieces, which ``fsdp2_port.compat.BF16Optimizer.load_state_dict`` takes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FullOptimStateDictConfig, FullStateDictConfig, StateDictType
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

from fsdp2_port.fsdp1 import torch_internals

_MASTER = "fp32_master"


def fsdp2_state_dict(optimizer: Any, root: FSDP | None = None) -> dict[str, Any]:
    """A full, name-keyed checkpoint of ``optimizer`` for ``fsdp2_port.BF16Optimizer``.

    A collective over the FSDP1 group: every rank calls it, every rank gets the whole dict
    (save it from rank 0). ``root`` is the FSDP1 root, needed when the optimizer was given
    an inner module; names are then relative to that inner module, as FSDP2 will see them.
    """
    given: nn.Module = optimizer.model if root is None else root
    if not isinstance(given, FSDP):
        raise TypeError("fsdp2_state_dict needs the FSDP1 root: pass root=<the FSDP module>")
    root = given
    gathered: dict[str, dict[str, Any]] = {}
    for key in [*_tensor_state_keys(optimizer), _MASTER]:
        for fqn, entry in _gather_one_key(optimizer, root, key).items():
            gathered.setdefault(fqn, {}).update(entry)
    prefix = _prefix_of(root, optimizer.model)
    masters, state = {}, {}
    for fqn, entry in gathered.items():
        if not fqn.startswith(prefix):
            continue
        entry = dict(entry)
        masters[fqn[len(prefix) :]] = entry.pop(_MASTER)
        state[fqn[len(prefix) :]] = entry
    group = {k: v for k, v in optimizer.optimizer.param_groups[0].items() if k != "params"}
    return {
        "optimizer_state_dict": {
            "state": state,
            "param_groups": [{**group, "params": list(masters)}],
        },
        "scheduler_state_dict": optimizer.scheduler.state_dict(),
        "fp32_params": masters,
        "max_grad_norm": optimizer.max_grad_norm,
        "lr_scheduler_type": optimizer.lr_scheduler_type,
    }


def _tensor_state_keys(optimizer: Any) -> list[str]:
    """The optimizer's per-element state keys (``exp_avg``, ...), agreed on by every rank."""
    local = sorted(
        {
            k
            for state in optimizer.optimizer.state.values()
            for k, v in state.items()
            if isinstance(v, torch.Tensor) and v.dim() > 0
        }
    )
    # Placeholders: all_gather_object replaces every entry with that rank's list.
    every: list[list[str]] = [[] for _ in range(dist.get_world_size())]
    dist.all_gather_object(every, local)
    keys: set[str] = set().union(*every)
    return sorted(keys)


def _gather_one_key(optimizer: Any, root: FSDP, key: str) -> dict[str, dict[str, Any]]:
    """Full tensors of one state key (the master for ``_MASTER``), by FQN.

    FSDP1 gathers optimizer state of its own parameters by name; the masters ride along as
    a state tensor of the parameter they belong to. One key per call, cloned: on the CPU,
    torch 2.13 returns every key of a ``use_orig_params=True`` parameter as views of one
    reused buffer, so that gathering them together silently makes exp_avg == exp_avg_sq.
    """
    carrier = torch.optim.AdamW(optimizer.model_params, lr=0.0)
    for p, m in zip(optimizer.model_params, optimizer.fp32_params):
        state = optimizer.optimizer.state.get(m, {})
        value = m.detach() if key == _MASTER else state.get(key)
        scalars = {
            k: v for k, v in state.items() if not (isinstance(v, torch.Tensor) and v.dim() > 0)
        }
        carrier.state[p] = {} if value is None else {**scalars, key: value}
    with FSDP.state_dict_type(
        root,
        StateDictType.FULL_STATE_DICT,
        FullStateDictConfig(rank0_only=False),
        FullOptimStateDictConfig(rank0_only=False),
    ):
        full = FSDP.optim_state_dict(root, carrier)
    return {
        fqn: {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in entry.items()}
        for fqn, entry in full["state"].items()
    }


def _prefix_of(root: nn.Module, module: nn.Module) -> str:
    """``module``'s name inside ``root`` as FSDP1 writes FQNs (wrappers left out), dotted."""
    for name, m in root.named_modules():
        if m is module:
            name = torch_internals.without_fsdp1_wrappers(name)
            return f"{name}." if name else ""
    raise ValueError("the optimizer's model is not inside the given FSDP1 root")


def rank_pieces(
    optimizer: Any, masters: Mapping[str, Any], optim: Mapping[str, Any]
) -> tuple[list[Any], dict[str, Any]]:
    """Full name-keyed masters and optimizer state (``fsdp2_state_dict``'s form) as this rank's
    pieces, by position: ``(masters, optimizer state dict)`` for
    ``fsdp2_port.compat.BF16Optimizer``.

    A collective over the FSDP1 group, as FSDP1's own loading is: one state key at a time
    rides on a carrier optimizer through ``FSDP.optim_state_dict_to_load`` (the masters as a
    key of their own), so FSDP1 cuts each full tensor exactly as it shards the parameter.
    Names are relative to the module the optimizer was given; its FSDP1 root is found from it.
    """
    root = _root_of(optimizer.model)
    prefix = _prefix_of(root, optimizer.model)
    names = _names_of(optimizer, root, prefix)
    unknown = sorted(set(masters) - set(names))
    if unknown or len(masters) != len(names):
        missing = [n for n in names if n not in masters]
        raise ValueError(
            f"checkpoint masters do not match this model: missing {missing[:5]}, unknown "
            f"{unknown[:5]}: saved for another model, or for another module of it"
        )
    state = optim.get("state", {})
    group = {k: v for k, v in optim["param_groups"][0].items() if k != "params"}
    keys = sorted({k for entry in state.values() for k in entry})
    pieces: dict[int, dict[str, Any]] = {i: {} for i in range(len(names))}
    for key in [*keys, _MASTER]:
        source = masters if key == _MASTER else {n: state.get(n, {}).get(key) for n in names}
        full = {
            "state": {prefix + n: {key: value} for n, value in source.items() if value is not None},
            "param_groups": [{**group, "params": [prefix + n for n in names]}],
        }
        carrier = torch.optim.AdamW(optimizer.model_params, lr=0.0)
        with FSDP.state_dict_type(
            root,
            StateDictType.FULL_STATE_DICT,
            FullStateDictConfig(rank0_only=False),
            FullOptimStateDictConfig(rank0_only=False),
        ):
            local = FSDP.optim_state_dict_to_load(root, carrier, full)
        for i, entry in local["state"].items():
            if key in entry:
                value = entry[key]
                pieces[i][key] = value.clone() if isinstance(value, torch.Tensor) else value
    rank_masters = []
    for i, m in enumerate(optimizer.fp32_params):
        if _MASTER in pieces[i]:
            rank_masters.append(pieces[i].pop(_MASTER))
        elif m.numel() == 0:  # this rank holds no element of it
            rank_masters.append(m.detach().clone())
        else:
            raise ValueError(f"FSDP1 gave this rank no piece of the master of {names[i]!r}")
    positional = {
        "state": {i: entry for i, entry in pieces.items() if entry},
        "param_groups": [{**group, "params": list(range(len(names)))}],
    }
    return rank_masters, positional


def _root_of(module: nn.Module) -> FSDP:
    """The outermost live FSDP1 instance whose tree holds ``module`` (itself if it is one)."""
    import gc

    candidates = [
        o
        for o in gc.get_objects()
        if issubclass(type(o), FSDP) and any(m is module for m in o.modules())
    ]
    if not candidates:
        raise ValueError("the optimizer's model is inside no live FSDP1 instance")
    return max(candidates, key=lambda o: sum(1 for _ in o.modules()))


def _names_of(optimizer: Any, root: FSDP, prefix: str) -> list[str]:
    """The optimizer's parameters by name relative to its module, in position order."""
    by_id = {id(p): torch_internals.without_fsdp1_wrappers(n) for n, p in root.named_parameters()}
    names = []
    for p in optimizer.model_params:
        fqn = by_id.get(id(p))
        if fqn is None or fqn.split(".")[-1] == torch_internals.FSDP1_FLAT_PARAM:
            raise ValueError(
                "a name-keyed checkpoint needs use_orig_params=True parameters (FSDP1's flat "
                "parameters have no names of their own): convert it for this run, or resume "
                "on FSDP2"
            )
        names.append(fqn[len(prefix) :])
    return names
