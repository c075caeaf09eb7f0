"""The BF16 master-weight optimizer both packages share: fp32 masters, one norm, AdamW.

A subclass says only which parameters it takes from what it is given (``_trainable``, where
it also refuses what it cannot handle) and where their gradients live: for each one, how many
ranks of the reduction group hold the same gradient piece (``_norm_copies``). Everything else —
the constructor's signature (SpecForge's), the step, the schedule, the non-finite policy, the
state dict — is here, once.

Invariants after every ``step()``:
- each low-precision parameter equals ``master.to(param.dtype)`` bit for bit;
- an fp32 parameter (not offloaded) is its own master: no copy, no extra memory;
- all gradients are cleared; the schedule advanced unless the step was skipped;
- the returned norm is the pre-clip job-wide norm, from exactly one collective.
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.distributed.tensor import DTensor

from fsdp2_port.fsdp1 import torch_internals
from fsdp2_port.train import grad_norm, local_adamw
from fsdp2_port.train.lr_schedules import build_scheduler

_foreach_copy_ = torch_internals.load("foreach_copy_")  # private torch: see torch_internals

#: Where ``fsdp2-port convert-checkpoint --rebuild-missing`` records what it rebuilt (the
#: weights it read; per parameter, the elements saved and in all): a load of such a state warns.
REBUILT_KEY = "fsdp2_port_rebuilt"


class MasterWeightOptimizer:
    """AdamW on fp32 masters of (usually bf16) parameters, clipped by the global norm.

    ``BF16Optimizer(model, lr, weight_decay=0.0, max_grad_norm=0.5, total_steps=800_000,
    warmup_ratio=0.015, lr_scheduler="cosine", offload_master=False, *, nonfinite="skip",
    optimizer_cls=torch.optim.AdamW, optimizer_kwargs=None)``: SpecForge's constructor, plus
    the non-finite policy and the inner optimizer by keyword.

    ``max_grad_norm``: a finite number > 0 clips by the global norm; ``None`` or
    ``float("inf")`` disables clipping (the norm is still computed and returned, the
    gradients are used as they are). ``lr`` must be finite and >= 0, ``weight_decay`` >= 0,
    ``total_steps`` an integer >= 1, ``warmup_ratio`` finite and >= 0 (above 1, the warmup
    outlasts the run, as SpecForge allows); anything else (0, negative, NaN, a non-number) is
    a ValueError naming the argument, before anything is allocated. ``lr_scheduler`` and the
    schedule's own limits: ``lr_schedules.build_scheduler``, SpecForge's errors.
    """

    #: Whether ``torch.optim.AdamW`` runs its fused kernel unless ``optimizer_kwargs`` name a
    #: kernel (``fused`` or ``foreach``), where it can (``_kernel_kwargs``). Fused AdamW
    #: differs from torch's default AdamW in the last bits only, and is several times faster
    #: on the CPU (benchmarks/optimizer_step.py).
    FUSED_BY_DEFAULT = False

    def __init__(
        self,
        model: Any,
        lr: float,
        weight_decay: float = 0.0,
        max_grad_norm: float = 0.5,
        total_steps: int = 800_000,
        warmup_ratio: float = 0.015,
        lr_scheduler: str = "cosine",
        offload_master: bool = False,
        *,
        nonfinite: grad_norm.NonFinitePolicy = "skip",
        optimizer_cls: Callable[..., torch.optim.Optimizer] = torch.optim.AdamW,
        optimizer_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        self._clip_at = grad_norm.check_max_norm(max_grad_norm)
        _check_options(lr, weight_decay, total_steps, warmup_ratio)
        named_params = self._trainable(model, offload_master)
        if not named_params:
            raise ValueError("no trainable parameters: every parameter has requires_grad=False")
        self.nonfinite = grad_norm.check_nonfinite_policy(nonfinite)
        self.param_names = [name for name, _ in named_params]
        self.model_params = [p for _, p in named_params]
        self.offload_master = offload_master
        self.fp32_params = [self._make_master(p) for p in self.model_params]
        self.max_grad_norm = max_grad_norm
        self.lr_scheduler_type = lr_scheduler
        self.optimizer = optimizer_cls(
            self.fp32_params,
            lr=lr,
            weight_decay=weight_decay,
            **self._kernel_kwargs(optimizer_cls, dict(optimizer_kwargs or {})),
        )
        self.scheduler = build_scheduler(self.optimizer, lr_scheduler, total_steps, warmup_ratio)
        self.last_grad_norm: Tensor | None = None
        self.skipped_steps = 0
        self.configure_grad_norm_reduction()

    def _kernel_kwargs(self, optimizer_cls: Callable, kwargs: dict[str, Any]) -> dict[str, Any]:
        """``kwargs``, with ``fused=True`` added as ``FUSED_BY_DEFAULT`` says, where torch's
        fused AdamW can run: every master on a device it has the kernel for, and all masters
        DTensors or none (its one kernel call over both is refused by DTensor)."""
        if (
            not self.FUSED_BY_DEFAULT
            or optimizer_cls is not torch.optim.AdamW
            or kwargs.get("fused") is not None
            or kwargs.get("foreach") is not None
            or len({isinstance(m, DTensor) for m in self.fp32_params}) > 1
        ):
            return kwargs
        devices = set(torch_internals.call("fused_kernel_devices"))
        if all(m.device.type in devices for m in self.fp32_params):
            kwargs["fused"] = True
        return kwargs

    # -- what a subclass decides: its parameters, and where their gradients live -------------

    def _trainable(self, model: Any, offload_master: bool) -> list[tuple[str, nn.Parameter]]:
        """The ``(name, parameter)`` pairs to optimise, from what the constructor was given."""
        raise NotImplementedError

    def _norm_copies(self, group: dist.ProcessGroup) -> list[int]:
        """For each master, how many ranks of ``group`` hold the same gradient piece."""
        raise NotImplementedError

    def configure_grad_norm_reduction(
        self, *, process_group: dist.ProcessGroup | None = None, enabled: bool = True
    ) -> None:
        """Choose the group the norm's one collective spans (default WORLD, if initialised).

        ``enabled=False`` makes the norm rank-local (no collective): only right when every
        rank trains its own, unsharded model.
        """
        group = (process_group or grad_norm.default_group()) if enabled else None
        self._norm_group = group
        self._copies = (
            self._norm_copies(group) if group is not None else [1] * len(self.fp32_params)
        )

    # -- the step ---------------------------------------------------------------------------

    def _make_master(self, param: nn.Parameter) -> Tensor:
        device = torch.device("cpu") if self.offload_master else param.device
        if param.dtype == torch.float32 and param.device == device:
            return param
        master = param.detach().to(device=device, dtype=torch.float32, copy=True)
        return nn.Parameter(master, requires_grad=True)

    @torch.no_grad()
    def step(self) -> Tensor:
        """Global norm of the grads as they are, then per block: cast, clip, AdamW, write back.

        Returns the pre-clip global norm (fp32, equal on every rank). Under
        ``nonfinite="skip"`` a non-finite norm updates nothing on any rank. Works on local
        shards throughout; AdamW via ``local_adamw.update`` when it applies (fp32 gradients
        live one block at a time), else ``optimizer.step()`` on DTensor grads.
        """
        held = [(i, p.grad) for i, p in enumerate(self.model_params) if p.grad is not None]
        live = [i for i, _ in held]
        pieces, _ = grad_norm.local_pieces([g for _, g in held], None)  # copies: self._copies
        norm, coefficient = grad_norm.norm_and_coefficient(
            pieces,
            [self._copies[i] for i in live],
            math.inf if self._clip_at is None else self._clip_at,
            group=self._norm_group,
            nonfinite=self.nonfinite,
        )
        if coefficient is not None and self._clip_at is None:
            coefficient = torch.ones_like(coefficient)  # x * 1.0 is x: no clipping, bitwise
        self.last_grad_norm = norm
        if coefficient is None:
            self.skipped_steps += 1
            self.zero_grad()
            return norm
        if self.offload_master:  # one copy to the masters' device, not one per tensor
            coefficient = coefficient.cpu()
        masters = [self.fp32_params[i] for i in live]
        if local_adamw.supports(self.optimizer, masters):
            params = [self._lowp(i) for i in live]
            local_adamw.update(self.optimizer, masters, pieces, coefficient, params)
        else:
            grads = self._fp32_grads(live, pieces)
            self._attach_grads(live, grads)
            if local_adamw.clips_in_kernel(self.optimizer):
                with local_adamw.scaled_by(self.optimizer, coefficient):
                    self.optimizer.step()
            else:
                grad_norm.scale_(grads, coefficient)
                self.optimizer.step()
            self._write_back()
        self.scheduler.step()
        self.zero_grad()
        return norm

    def _lowp(self, i: int) -> Tensor | None:
        """The parameter master ``i`` is written back to; None when the master is the parameter."""
        p = self.model_params[i]
        return None if self.fp32_params[i] is p else p

    def _fp32_grads(self, indices: list[int], pieces: list[Tensor]) -> list[Tensor]:
        """fp32 copies of the local gradient ``pieces`` of masters ``indices``, one batched cast.

        An fp32 parameter's own gradient is used as is (clipping scales it in place).
        """
        pairs: list[tuple[Tensor, Tensor | None]] = []
        for i, src in zip(indices, pieces):
            m = self.fp32_params[i]
            own = m is self.model_params[i]
            pairs.append((src, None if own else torch.empty_like(local_adamw.local(m))))
        return local_adamw.cast_fp32(pairs)

    def _attach_grads(self, live: list[int], grads: list[Tensor]) -> None:
        """Give every master its fp32 gradient (a DTensor like the master).

        For ``optimizer.step()``.
        """
        for p, m in zip(self.model_params, self.fp32_params):
            if m is not p:
                m.grad = None
        for i, g in zip(live, grads):
            m = self.fp32_params[i]
            if m is self.model_params[i]:
                continue
            if isinstance(m, DTensor):
                g = DTensor.from_local(
                    g,
                    m.device_mesh,
                    m.placements,
                    run_check=False,
                    shape=m.shape,
                    stride=m.stride(),
                )
            m.grad = g

    def _write_back(self, indices: Sequence[int] | None = None) -> None:
        """Low-precision parameters ``indices`` (default all) := their masters, one batched copy."""
        indices = range(len(self.model_params)) if indices is None else indices
        pairs = [(self.model_params[i], self.fp32_params[i]) for i in indices]
        pairs = [(p, m) for p, m in pairs if m is not p]
        if pairs:
            _foreach_copy_(
                [local_adamw.local(p) for p, _ in pairs], [local_adamw.local(m) for _, m in pairs]
            )

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear the gradients of the model parameters and of the masters."""
        for p, m in zip(self.model_params, self.fp32_params):
            for t in (p, m):
                if t.grad is None:
                    continue
                if set_to_none:
                    t.grad = None
                else:
                    t.grad.zero_()

    def get_learning_rate(self) -> float:
        return self.optimizer.param_groups[0]["lr"]

    # -- checkpoints (SpecForge's keys) -----------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        masters, optim = self._pack(list(self.fp32_params), self.optimizer.state_dict())
        return {
            "optimizer_state_dict": optim,
            "scheduler_state_dict": self.scheduler.state_dict(),
            "fp32_params": masters,
            "max_grad_norm": self.max_grad_norm,
            "lr_scheduler_type": self.lr_scheduler_type,
        }

    def full_state_dict(self) -> dict[str, Any]:
        """``state_dict()`` with every DTensor gathered whole onto the CPU: a collective every
        rank of its mesh must join. Saved from one rank, it resumes every rank, each keeping
        its own piece (``load_state_dict``). Plain tensors (an FSDP1 rank's flat pieces, one
        process) stay as they are: there it is ``state_dict()``."""
        return map_tensors(self.state_dict(), _gathered)

    @torch.no_grad()
    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore masters, moments and schedule exactly; keys other than ours are ignored.

        All or nothing: the whole state (keys, shapes, dtypes, layouts, optimizer groups, the
        schedule) is checked before the first write, so a refused state changes no master,
        moment, step, lr or parameter.
        """
        self._check_compatible(state_dict)
        masters, optim = self._unpack(state_dict["fp32_params"], state_dict["optimizer_state_dict"])
        schedule = self.scheduler.own_form(state_dict["scheduler_state_dict"])
        for name, saved, m in zip(self.param_names, masters, self.fp32_params):
            _check_tensor_like(f"master of {name!r}", saved, m)
        self._check_optimizer_state(optim)
        _check_same_form("scheduler state", schedule, self.scheduler.state_dict())
        for saved, m in zip(masters, self.fp32_params):
            if saved is not m:
                m.copy_(saved)
        self.optimizer.load_state_dict(self._with_own_kernels(optim))
        self.scheduler.load_state_dict(dict(schedule))
        self._write_back()
        _warn_if_rebuilt(state_dict.get(REBUILT_KEY))

    def _check_optimizer_state(self, optim: Mapping[str, Any]) -> None:
        """ValueError unless ``optim`` (torch's form, by position) fits this optimizer: the same
        group sizes, every position once, per-element state shaped and typed like its master."""
        groups, ours = optim["param_groups"], self.optimizer.param_groups
        sizes = [len(g["params"]) for g in groups]
        if sizes != [len(g["params"]) for g in ours]:
            raise ValueError(
                f"checkpoint optimizer state has param groups of sizes {sizes}, this optimizer "
                f"{[len(g['params']) for g in ours]}: saved for another model"
            )
        n = len(self.fp32_params)
        if sorted(i for g in groups for i in g["params"]) != list(range(n)):
            raise ValueError("checkpoint optimizer groups do not name each parameter once")
        for i, state in optim["state"].items():
            if i not in range(n):
                raise ValueError(f"checkpoint optimizer state for unknown parameter {i!r}")
            for key, value in state.items():
                what = f"optimizer state {key!r} of {self.param_names[i]!r}"
                if isinstance(value, Tensor) and value.dim() > 0:
                    _check_tensor_like(what, value, self.fp32_params[i])

    def _with_own_kernels(self, optim: dict[str, Any]) -> dict[str, Any]:
        """A saved optimizer state whose groups keep this optimizer's kernel (``fused``,
        ``foreach``): the kernel is how this run computes, not part of the training state (a
        run carried over from compat's single-tensor AdamW gets the fused default here)."""
        groups = [
            {**saved, **{k: g[k] for k in ("fused", "foreach") if k in g}}
            for saved, g in zip(optim["param_groups"], self.optimizer.param_groups)
        ]
        return {**optim, "param_groups": groups}

    def _pack(self, masters: list[Tensor], optim: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """How a checkpoint keys masters and optimizer state: here by position (SpecForge)."""
        return masters, optim

    def _unpack(self, masters: Any, optim: dict[str, Any]) -> tuple[list[Tensor], dict[str, Any]]:
        """Masters in ``fp32_params`` order and a torch optimizer state dict.

        From ``_pack``'s form.
        """
        if len(masters) != len(self.fp32_params):
            raise ValueError(
                f"checkpoint holds {len(masters)} master parameters, this optimizer "
                f"{len(self.fp32_params)}: it was saved for another model or sharding"
            )
        return list(masters), optim

    def _check_compatible(self, state_dict: Mapping[str, Any]) -> None:
        """SpecForge's checks first, with its messages (a checkpoint without
        ``lr_scheduler_type`` is a cosine one, as SpecForge reads it), then the keys."""
        kind = state_dict.get("lr_scheduler_type", "cosine")
        if kind != self.lr_scheduler_type:
            raise ValueError(
                f"checkpoint optimizer used lr_scheduler={kind!r} but this run has "
                f"lr_scheduler={self.lr_scheduler_type!r}; construct it with the checkpoint's"
            )
        saved = state_dict.get("max_grad_norm", self.max_grad_norm)
        if saved != self.max_grad_norm and not (_no_clip(saved) and self._clip_at is None):
            raise ValueError(
                f"checkpoint optimizer used max_grad_norm={saved} but this run has "
                f"max_grad_norm={self.max_grad_norm}; construct it with the checkpoint's"
            )
        missing = [
            k
            for k in ("optimizer_state_dict", "scheduler_state_dict", "fp32_params")
            if k not in state_dict
        ]
        if missing:
            raise KeyError(f"not a BF16Optimizer checkpoint: missing {', '.join(missing)}")


def map_tensors(value: Any, change: Callable[[Tensor], Any]) -> Any:
    """``value`` (a state dict: dicts, lists, tuples) with each tensor replaced by
    ``change(tensor)``, met in the same order on every rank (keys and lists as they are)."""
    if isinstance(value, Tensor):
        return change(value)
    if isinstance(value, Mapping):
        return {k: map_tensors(v, change) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(map_tensors(v, change) for v in value)
    return value


def _gathered(tensor: Tensor) -> Tensor:
    """A DTensor's full tensor on the CPU (a collective); any other tensor as it is."""
    return tensor.full_tensor().cpu() if isinstance(tensor, DTensor) else tensor


def _warn_if_rebuilt(record: object) -> None:
    """One warning, when the state loaded was converted with ``--rebuild-missing``."""
    if not isinstance(record, Mapping):
        return
    parameters = record.get("parameters") or {}
    lost = sum(int(p["total"]) - int(p["saved"]) for p in parameters.values())
    warnings.warn(
        f"this optimizer state was converted with --rebuild-missing: the fp32 masters of "
        f"{len(parameters)} parameters ({lost} elements) were rebuilt from "
        f"{record.get('weights')} and their missing Adam moments started at zero; the run "
        "does not continue bit for bit from where it was saved",
        UserWarning,
        stacklevel=4,  # the caller of load_state_dict (under its no_grad wrapper)
    )


def _no_clip(max_grad_norm: object) -> bool:
    """Whether a saved ``max_grad_norm`` means "no clipping" (None or inf)."""
    return max_grad_norm is None or max_grad_norm == math.inf


def _check_options(lr: object, weight_decay: object, total_steps: object, warmup: object) -> None:
    """ValueError naming the first constructor number out of its range (see the class)."""
    rules = (
        ("lr", lr, numbers.Real, lambda v: 0 <= v < math.inf, "a finite number >= 0"),
        (
            "weight_decay",
            weight_decay,
            numbers.Real,
            lambda v: 0 <= v < math.inf,
            "a finite number >= 0",
        ),
        ("total_steps", total_steps, numbers.Integral, lambda v: v >= 1, "an integer >= 1"),
        ("warmup_ratio", warmup, numbers.Real, lambda v: 0 <= v < math.inf, "a finite number >= 0"),
    )
    for name, value, kind, ok, rule in rules:
        if isinstance(value, bool) or not isinstance(value, kind) or not ok(value):
            raise ValueError(f"{name} must be {rule}, got {value!r}")


def _check_tensor_like(what: str, saved: object, like: Tensor) -> None:
    """ValueError unless ``saved`` can be copied into ``like`` exactly: a tensor of its
    shape and dtype, a DTensor on its mesh with its placements where ``like`` is one."""
    if not isinstance(saved, Tensor):
        raise ValueError(f"{what}: checkpoint holds {type(saved).__name__}, expected a tensor")
    if tuple(saved.shape) != tuple(like.shape):
        whose = "global shape" if isinstance(like, DTensor) else "shape"
        raise ValueError(
            f"{what}: checkpoint {whose} {tuple(saved.shape)}, expected {tuple(like.shape)}: "
            "saved for another model"
        )
    if isinstance(saved, DTensor) and isinstance(like, DTensor):
        _check_own_shard(what, saved, like)
    if saved.dtype != like.dtype:
        raise ValueError(f"{what}: checkpoint dtype {saved.dtype}, expected {like.dtype}")
    layout = [
        (t.device_mesh, t.placements) if isinstance(t, DTensor) else None for t in (saved, like)
    ]
    if layout[0] != layout[1]:
        raise ValueError(f"{what}: checkpoint layout {layout[0]}, expected {layout[1]}")


_SAVE_EVERY_RANK = (
    "a torch.save of one rank's state_dict() holds that rank's shards only: save "
    "full_state_dict() (every rank joins; any rank may write it) or use "
    "torch.distributed.checkpoint (dcp.save), which reshards on load"
)


def _check_own_shard(what: str, saved: DTensor, like: DTensor) -> None:
    """ValueError, naming which, unless the DTensor ``saved`` holds this rank's piece of
    ``like``: sharded over a mesh of the same shape, by the rank at this rank's coordinate.

    A DTensor pickled by ``torch.save`` keeps the saving rank's mesh coordinate, so a file
    one rank wrote and another loads is told apart from its own (the shapes alone agree).
    """
    ours, theirs = like.device_mesh, saved.device_mesh
    if tuple(theirs.shape) != tuple(ours.shape):
        raise ValueError(
            f"{what}: checkpoint sharded over {theirs.size()} ranks (mesh "
            f"{tuple(theirs.shape)}), this run over {ours.size()} (mesh {tuple(ours.shape)}): "
            f"{_SAVE_EVERY_RANK}"
        )
    mine, saver = ours.get_coordinate(), theirs.get_coordinate()
    if saver != mine:
        rank = "another rank" if saver is None else f"rank {int(theirs.mesh[tuple(saver)])}"
        me = "a rank outside the mesh" if mine is None else f"rank {int(ours.mesh[tuple(mine)])}"
        raise ValueError(
            f"{what}: checkpoint holds {rank}'s shard, this is {me}: {_SAVE_EVERY_RANK}"
        )


def _check_same_form(what: str, saved: object, own: object) -> None:
    """ValueError unless ``saved`` has the form of ``own``: mappings with the same keys,
    sequences of the same length, numbers of the same kind (bool, integer, real), None for
    None, else the same type; recursively."""
    kinds: tuple[type, ...] = (bool, numbers.Integral, numbers.Real, Mapping, list, tuple)
    kind = next((k for k in kinds if isinstance(own, k)), type(own))
    fits = isinstance(saved, kind) and (kind is bool or not isinstance(saved, bool))
    if not fits:
        raise ValueError(f"{what}: checkpoint holds {saved!r}, expected a {kind.__name__}")
    if isinstance(own, Mapping):
        assert isinstance(saved, Mapping)
        if set(saved) != set(own):
            raise ValueError(f"{what}: checkpoint keys {sorted(saved)}, expected {sorted(own)}")
        for key in own:
            _check_same_form(f"{what} {key!r}", saved[key], own[key])
    elif isinstance(own, (list, tuple)):
        assert isinstance(saved, (list, tuple))
        if len(saved) != len(own):
            raise ValueError(f"{what}: checkpoint length {len(saved)}, expected {len(own)}")
        for i, (a, b) in enumerate(zip(saved, own)):
            _check_same_form(f"{what}[{i}]", a, b)
