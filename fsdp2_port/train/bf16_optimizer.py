"""The DTensor-native BF16 master optimizer: fsdp2_port.compat.BF16Optimizer's API for FSDP2 models.

Masters are fp32 DTensors with each parameter's mesh, placements, global shape and stride,
so the gradient norm reduces across any mesh by itself (``grad_norm.copies_of``) and
``torch.distributed.checkpoint`` reshards masters and moments between world sizes.
Checkpoints key everything by parameter name, never by position.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from types import FrameType
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.distributed.tensor import DTensor, distribute_tensor

from fsdp2_port.fsdp1.torch_internals import DCP_LOADER_MODULE, refuse_fsdp1_tensors
from fsdp2_port.train import grad_norm
from fsdp2_port.train.master_weights import MasterWeightOptimizer, map_tensors


def _named_trainable(model_or_params: nn.Module | Iterable[Any]) -> list[tuple[str, nn.Parameter]]:
    if isinstance(model_or_params, nn.Module):
        items = list(model_or_params.named_parameters())
    else:
        items = list(model_or_params)
        if items and not isinstance(items[0], tuple):
            items = [(str(i), p) for i, p in enumerate(items)]
    return [(name, p) for name, p in items if p.requires_grad]


class BF16Optimizer(MasterWeightOptimizer):
    """fp32 DTensor masters, one global norm, AdamW (or ``optimizer_cls``), bf16 write-back.

    ``model``: a module (names from ``named_parameters``), parameters, or ``(name, parameter)``
    pairs. Same constructor, attributes and methods as ``fsdp2_port.compat.BF16Optimizer``:
    migrating is
    an import change. Parameters of an FSDP1 model are refused (TypeError naming
    ``fsdp2_port.compat.BF16Optimizer``). AdamW is fused by default where torch has the kernel
    (``FUSED_BY_DEFAULT``; torchtitan's default): last-bit differences from torch's default
    AdamW; ``optimizer_kwargs={"foreach": False}`` restores those bits on the CPU.
    """

    FUSED_BY_DEFAULT = True

    def _trainable(self, model: Any, offload_master: bool) -> list[tuple[str, nn.Parameter]]:
        named = _named_trainable(model)
        refuse_fsdp1_tensors(
            (p for _, p in named), "fsdp2_port.BF16Optimizer", "fsdp2_port.compat.BF16Optimizer"
        )
        if offload_master and any(
            isinstance(p, DTensor) and p.device.type != "cpu" for _, p in named
        ):
            raise NotImplementedError(
                "offload_master=True with accelerator DTensor parameters: use FSDP2's "
                "CPUOffloadPolicy, which keeps the sharded parameters (the masters) on the CPU"
            )
        return named

    def _norm_copies(self, group: dist.ProcessGroup) -> list[int]:
        members = set(dist.get_process_group_ranks(group))
        for m in self.fp32_params:
            if isinstance(m, DTensor) and not set(m.device_mesh.mesh.flatten().tolist()) <= members:
                raise ValueError(
                    f"the norm's group {sorted(members)} does not hold every rank of "
                    f"{m.device_mesh}: the one collective must span all meshes"
                )
        return grad_norm.copies_of_each(self.fp32_params, group)

    # -- DCP-native checkpoints, keyed by parameter name ------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Masters and optimizer state as DTensors under parameter names, ready for DCP.

        Optimizer state is allocated first if no step has run, so that a DCP load into this
        state dict has tensors to fill (an unallocated moment would be silently dropped).
        Asked by ``dcp.load``, which writes in place, every tensor is a fresh staging copy
        (same shape, dtype and layout, contents undefined): the live state changes only when
        ``load_state_dict`` has checked all of it and commits.
        """
        self._materialize_state()
        state = super().state_dict()
        # every tensor a fresh uninitialised one like it (DTensors too)
        return map_tensors(state, torch.empty_like) if _asked_by_dcp_load() else state

    @torch.no_grad()
    def _materialize_state(self) -> None:
        """Run one zero-lr step on zero grads for the masters that have no state yet."""
        todo = [m for m in self.fp32_params if m not in self.optimizer.state]
        if not todo:
            return
        grads = [m.grad for m in self.fp32_params]
        lrs = [g["lr"] for g in self.optimizer.param_groups]
        for m in self.fp32_params:
            m.grad = None
        for m in todo:
            m.grad = torch.zeros_like(m)
        for g in self.optimizer.param_groups:
            g["lr"] = 0.0
        self.optimizer.step()
        for g, lr in zip(self.optimizer.param_groups, lrs):
            g["lr"] = lr
        for m in todo:  # a fresh state counts no step: the next real one is step 1
            step = self.optimizer.state[m].get("step")
            if isinstance(step, Tensor):
                step.zero_()
        for m, grad in zip(self.fp32_params, grads):
            m.grad = grad

    def _pack(self, masters: list[Tensor], optim: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        names = self.param_names
        state = {names[i]: s for i, s in optim["state"].items()}
        groups = [{**g, "params": [names[i] for i in g["params"]]} for g in optim["param_groups"]]
        return dict(zip(names, masters)), {"state": state, "param_groups": groups}

    def _unpack(self, masters: Any, optim: dict[str, Any]) -> tuple[list[Tensor], dict[str, Any]]:
        if not isinstance(masters, Mapping):
            masters, optim = self._by_name(masters, optim)
        names = self.param_names
        missing = [n for n in names if n not in masters]
        unknown = [n for n in masters if n not in set(names)]
        if missing or unknown:
            raise KeyError(
                f"checkpoint masters do not match this model: missing {missing[:5]}, "
                f"unknown {unknown[:5]} (a checkpoint saved without masters cannot restore them)"
            )
        saved_names = [n for g in optim["param_groups"] for n in g["params"]]
        if sorted(saved_names) != sorted(names) or len(optim["param_groups"]) != 1:
            raise ValueError("checkpoint optimizer state is for other parameters or param groups")
        index = {n: i for i, n in enumerate(names)}
        state = {}
        for n, s in optim["state"].items():
            like = self.fp32_params[index[n]]
            state[index[n]] = {k: _placed_like(v, like) for k, v in s.items()}
        groups = [{**optim["param_groups"][0], "params": list(range(len(names)))}]
        masters = [_placed_like(masters[n], m) for n, m in zip(names, self.fp32_params)]
        return masters, {"state": state, "param_groups": groups}

    def _by_name(self, masters: Any, optim: Mapping[str, Any]) -> tuple[dict[str, Any], Any]:
        """A positional (SpecForge / compat) checkpoint of whole tensors, keyed by name.

        Position ``i`` is this optimizer's ``param_names[i]``: the ``i``-th trainable parameter
        in ``named_parameters()`` order of the module it was given. ``fully_shard`` keeps a
        module's names and order, so that is the old optimizer's position ``i`` when both were
        given the same module (the root, or the same inner module). The count and every
        master's shape must match; FSDP1 shards (per-rank pieces) are refused: convert them
        offline with ``fsdp2-port convert-checkpoint`` from every rank's file.
        """
        names = self.param_names
        if not isinstance(masters, (list, tuple)) or len(masters) != len(names):
            count = len(masters) if isinstance(masters, (list, tuple)) else type(masters).__name__
            raise ValueError(
                f"checkpoint holds {count} positional masters (SpecForge / compat format), this "
                f"optimizer {len(names)} trainable parameters: saved for another model, or "
                "for another module of it (give this optimizer the module the old one was given)"
            )
        for i, (name, saved, m) in enumerate(zip(names, masters, self.fp32_params)):
            shape = tuple(getattr(saved, "shape", ()))
            if isinstance(saved, DTensor) or shape != tuple(m.shape):
                raise ValueError(
                    f"positional master {i} has shape {shape}, parameter {name!r} (position {i} "
                    f"of named_parameters()) {tuple(m.shape)}: an FSDP1 rank's shard or another "
                    "model. Convert every rank's file with `fsdp2-port convert-checkpoint "
                    "'optim_{rank}.pt' OUT --format specforge --model MODULE:FACTORY`"
                )
        groups = optim.get("param_groups", [])
        positions = [i for g in groups for i in g.get("params", [])]
        if sorted(positions, key=str) != sorted(range(len(names)), key=str) or any(
            i not in range(len(names)) for i in optim.get("state", {})
        ):
            raise ValueError("checkpoint optimizer state does not name each position once")
        state = {names[i]: s for i, s in optim["state"].items()}
        named = [{**g, "params": [names[i] for i in g["params"]]} for g in groups]
        return dict(zip(names, masters)), {"state": state, "param_groups": named}


def _asked_by_dcp_load() -> bool:
    """Whether the first caller outside this package is ``dcp.load`` (which fills the tensors
    of the state dict it is given in place; ``dcp.save`` only reads them)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").startswith("fsdp2_port"):
        frame = frame.f_back
    return frame is not None and frame.f_globals.get("__name__") == DCP_LOADER_MODULE


def _placed_like(value: Any, master: Tensor) -> Any:
    """A full (unsharded) tensor of a DTensor master's global shape, as that master's shard.

    Full tensors come from an FSDP1 run in flight (``fsdp2_port.compat.transition``): every rank
    holds
    all of it, so each keeps its own piece without communication. Anything else is as is.
    """
    if (
        isinstance(master, DTensor)
        and isinstance(value, Tensor)
        and not isinstance(value, DTensor)
        and value.shape == master.shape
    ):
        return distribute_tensor(
            value.to(master.device), master.device_mesh, master.placements, src_data_rank=None
        )
    return value
