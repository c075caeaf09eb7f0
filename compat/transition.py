"""Carry a run in flight from FSDP1 + compat to FSDP2 + fsdp2_port without losing state.

``fsdp2_state_dict`` gathers the compat optimizer's masters, Adam moments, step counts and
schedule into full tensors keyed by fully-qualified parameter name: exactly the layout of
``fsdp2_port.BF16Optimizer.state_dict()``, which loads it at any world size.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FullOptimStateDictConfig, FullStateDictConfig, StateDictType
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

from compat.bf16_optimizer import BF16Optimizer
from fsdp2_port.fsdp1 import torch_internals

_MASTER = "fp32_master"


def fsdp2_state_dict(optimizer: BF16Optimizer, root: FSDP | None = None) -> dict[str, Any]:
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


def _tensor_state_keys(optimizer: BF16Optimizer) -> list[str]:
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


def _gather_one_key(optimizer: BF16Optimizer, root: FSDP, key: str) -> dict[str, dict[str, Any]]:
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
