"""FSDP1's optimizer-state functions on any model: ``optim_state_dict``,
``optim_state_dict_to_load`` and the legacy ``full_optim_state_dict``,
``sharded_optim_state_dict``, ``scatter_full_optim_state_dict``,
``shard_full_optim_state_dict``.

FSDP1 models get FSDP1's own functions. Any other model gets the same result through
``torch.distributed.checkpoint.state_dict``'s optimizer functions, in the form the model's
state-dict type (``state_dict_api``) asks for; the optimizer is left as it was unless loading
into it is what the call means.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from fsdp2_port.fsdp1.module_api import is_distributed, is_fsdp1
from fsdp2_port.fsdp1.state_dict_api import current_settings, full_state

__all__ = [
    "full_optim_state_dict",
    "optim_state_dict",
    "optim_state_dict_to_load",
    "scatter_full_optim_state_dict",
    "shard_full_optim_state_dict",
    "sharded_optim_state_dict",
]

_ABSENT = object()


# -- optimizer state ------------------------------------------------------------------------------


def optim_state_dict(
    model: nn.Module,
    optim: torch.optim.Optimizer,
    optim_state_dict: dict[str, Any] | None = None,
    group: dist.ProcessGroup | None = None,
) -> dict[str, Any]:
    """``FSDP.optim_state_dict(...)``: the optimizer state keyed by parameter name, in the form
    the model's state-dict type asks for (FSDP1's default FULL when none is set).

    FULL: full tensors (``FullOptimStateDictConfig``: on the CPU when offloading, an empty dict
    off rank 0 with ``rank0_only``). SHARDED: DTensors (FSDP1: ShardedTensor).
    FSDP2, DDP and plain modules: ``torch.distributed.checkpoint.state_dict``'s
    ``get_optimizer_state_dict``.
    """
    if is_fsdp1(model):
        from torch.distributed.fsdp import FullyShardedDataParallel

        return FullyShardedDataParallel.optim_state_dict(model, optim, optim_state_dict, group)
    from torch.distributed.fsdp import StateDictType

    _check_fsdp2_group(model, group)
    settings = current_settings(model)
    config: Any = settings.optim_state_dict_config
    full = settings.state_dict_type == StateDictType.FULL_STATE_DICT
    return _get_optim(
        model,
        optim,
        optim_state_dict,
        full=full,
        offload=config.offload_to_cpu,
        rank0_only=full and config.rank0_only,
    )


def _get_optim(
    model: nn.Module,
    optim: torch.optim.Optimizer,
    given: dict[str, Any] | None,
    *,
    full: bool,
    offload: bool,
    rank0_only: bool,
) -> dict[str, Any]:
    """torch's ``get_optimizer_state_dict`` of ``given`` (else ``optim``'s own state), keyed by
    name: full tensors (``{}`` off rank 0 with ``rank0_only``) or DTensors; ``optim`` is left
    as it was."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    # torch first gives an optimizer without state one with a zero-lr step (step 1, zero
    # moments) and keeps it: the next real step would then be step 2. Put it back as it was.
    before = None if optim.state else optim.state_dict()
    try:
        with _optimizer_state_from(optim, given):
            if not full:
                options = StateDictOptions(cpu_offload=offload)
                result = get_optimizer_state_dict(model, optim, options=options)
            else:
                result = full_state(
                    lambda options: get_optimizer_state_dict(model, optim, options=options),
                    offload=offload,
                    rank0_only=rank0_only,
                )
    finally:
        if before is not None:
            optim.load_state_dict(before)
    source = before if given is None else given
    if result and source is not None and not source.get("state"):
        result["state"] = {}  # FSDP1: no state before the first step
    return result


def optim_state_dict_to_load(
    model: nn.Module,
    optim: torch.optim.Optimizer,
    optim_state_dict: dict[str, Any],
    is_named_optimizer: bool = False,
    load_directly: bool = False,
    group: dist.ProcessGroup | None = None,
) -> dict[str, Any]:
    """``FSDP.optim_state_dict_to_load(...)``: the dict to pass to ``optim.load_state_dict``
    for a name-keyed ``optim_state_dict``, read in the model's state-dict type; loaded into
    ``optim`` as well with ``load_directly=True``.

    FSDP2, DDP and plain modules: torch's ``set_optimizer_state_dict`` loads it (FULL with
    ``rank0_only``: rank 0's dict, broadcast), the result is ``optim.state_dict()`` then, and
    without ``load_directly`` the optimizer's previous state is put back before returning.
    """
    if is_fsdp1(model):
        from torch.distributed.fsdp import FullyShardedDataParallel

        return FullyShardedDataParallel.optim_state_dict_to_load(
            model, optim, optim_state_dict, is_named_optimizer, load_directly, group
        )
    from torch.distributed.fsdp import StateDictType

    if is_named_optimizer:
        raise ValueError(
            "is_named_optimizer=True: an FSDP2 model's optimizer is a torch.optim.Optimizer "
            "(NamedOptimizer/KeyedOptimizer are FSDP1-only here); pass is_named_optimizer=False"
        )
    _check_fsdp2_group(model, group)
    settings = current_settings(model)
    full = settings.state_dict_type == StateDictType.FULL_STATE_DICT
    rank0_only = full and bool(getattr(settings.optim_state_dict_config, "rank0_only", False))
    return _load_optim(
        model, optim, optim_state_dict, full=full, rank0_only=rank0_only, keep=load_directly
    )


def _load_optim(
    model: nn.Module,
    optim: torch.optim.Optimizer,
    given: dict[str, Any],
    *,
    full: bool,
    rank0_only: bool,
    keep: bool,
) -> dict[str, Any]:
    """Load the name-keyed ``given`` into ``optim`` with torch's ``set_optimizer_state_dict``
    (``rank0_only``: rank 0's dict, broadcast) and return ``optim.state_dict()``; without
    ``keep`` the optimizer's previous state is put back before returning."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    # strict=False: a parameter without state in the dict gets none, as with FSDP1 (torch's
    # strict SHARDED load refuses such a dict).
    options = StateDictOptions(full_state_dict=full, broadcast_from_rank0=rank0_only, strict=False)
    before = None if keep else optim.state_dict()
    tuples = [
        {key for key, value in param_group.items() if isinstance(value, tuple)}
        for param_group in optim.param_groups
    ]
    try:
        with _grads_aside(optim):
            set_optimizer_state_dict(model, optim, _structure_copy(given), options=options)
        _drop_state_not_loaded(model, optim, given, rank0_only)
        # torch's full load flattens the dict, which turns tuples (AdamW's betas) into lists;
        # FSDP1 keeps them, and code compares them to its configuration: make them tuples again.
        for param_group, keys in zip(optim.param_groups, tuples):
            for key in keys:
                if isinstance(param_group[key], list):
                    param_group[key] = tuple(param_group[key])
        return optim.state_dict()
    finally:
        if before is not None:
            optim.load_state_dict(before)


@contextlib.contextmanager
def _grads_aside(optim: torch.optim.Optimizer) -> Iterator[None]:
    """An optimizer without state has no gradients while open; they are put back after.

    torch's full load first gives such an optimizer state with a zero-lr step, but skips that
    step when some parameter has a gradient, and then fails ("Expected device to be set").
    """
    if optim.state:
        yield
        return
    params = [p for group in optim.param_groups for p in group["params"]]
    grads = [p.grad for p in params]
    for p in params:
        p.grad = None
    try:
        yield
    finally:
        for p, grad in zip(params, grads):
            p.grad = grad


def _drop_state_not_loaded(
    model: nn.Module, optim: torch.optim.Optimizer, given: dict[str, Any], rank0_only: bool
) -> None:
    """Leave state only for the parameters ``given`` has state for, as FSDP1's result does.

    torch's full load keeps the optimizer's own state for the others: for an optimizer
    without state, the zero-lr step it takes first (step 1, zero moments).
    """
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    loaded = [set(given.get("state", {}))]
    if rank0_only:  # only rank 0's dict counts: every rank needs its names
        dist.broadcast_object_list(loaded, src=0)
    if not optim.state:
        return
    # torch names each parameter group's parameters in the optimizer's order.
    named_groups: Any = get_optimizer_state_dict(model, optim)["param_groups"]
    for param_group, named in zip(optim.param_groups, named_groups):
        for param, name in zip(param_group["params"], named["params"]):
            if name not in loaded[0]:
                optim.state.pop(param, None)


def _check_fsdp2_group(model: nn.Module, group: dist.ProcessGroup | None) -> None:
    """FSDP2 takes each parameter's group from its mesh: ``group`` may only name that group."""
    if group is None:
        return
    from torch.distributed.tensor import DTensor

    meshes = {p.device_mesh for p in model.parameters() if isinstance(p, DTensor)}
    if any(mesh.ndim != 1 or mesh.get_group() != group for mesh in meshes):
        raise ValueError(
            "group: FSDP2 shards each parameter over its device mesh, and this group is not "
            "the (1-D) mesh of every sharded parameter; pass group=None"
        )


@contextlib.contextmanager
def _optimizer_state_from(
    optim: torch.optim.Optimizer, given: dict[str, Any] | None
) -> Iterator[None]:
    """While open, ``optim.state_dict()`` returns ``given`` (FSDP1's ``optim_state_dict=``)."""
    if given is None:
        yield
        return
    saved = optim.__dict__.get("state_dict", _ABSENT)
    optim.__dict__["state_dict"] = lambda: _structure_copy(given)
    try:
        yield
    finally:
        if saved is _ABSENT:
            del optim.__dict__["state_dict"]
        else:
            optim.__dict__["state_dict"] = saved


def _structure_copy(obj: Any) -> Any:
    """New dicts and lists around the same tensors (torch re-keys the dicts it is given), and
    a copy of each scalar tensor: FSDP1's full optimizer state shares one ``step`` tensor among
    all parameters (also through ``torch.save``), which a loaded optimizer would advance once
    per parameter at every step."""
    if isinstance(obj, dict):
        return {key: _structure_copy(value) for key, value in obj.items()}
    if isinstance(obj, list):
        return [_structure_copy(value) for value in obj]
    if isinstance(obj, torch.Tensor) and obj.dim() == 0:
        return obj.clone()
    return obj


# -- FSDP1's legacy optimizer-state functions ------------------------------------------------------


def full_optim_state_dict(
    model: nn.Module,
    optim: torch.optim.Optimizer,
    optim_input: Any = None,
    rank0_only: bool = True,
    group: dist.ProcessGroup | None = None,
) -> dict[str, Any]:
    """``FSDP.full_optim_state_dict(...)``: the full optimizer state keyed by parameter name,
    on the CPU, ``{}`` off rank 0 with ``rank0_only``.

    FSDP2, DDP and plain modules: torch's ``get_optimizer_state_dict`` with full tensors, offloaded
    as FSDP1 offloads them; the optimizer is left as it was. ``optim_input`` (deprecated by
    FSDP1) is refused: the optimizer names its parameters.
    """
    if is_fsdp1(model):
        from torch.distributed.fsdp import FullyShardedDataParallel

        return FullyShardedDataParallel.full_optim_state_dict(
            model, optim, optim_input, rank0_only, group
        )
    _refuse_optim_input(optim_input)
    _check_fsdp2_group(model, group)
    return _get_optim(model, optim, None, full=True, offload=True, rank0_only=rank0_only)


def sharded_optim_state_dict(
    model: nn.Module, optim: torch.optim.Optimizer, group: dist.ProcessGroup | None = None
) -> dict[str, Any]:
    """``FSDP.sharded_optim_state_dict(...)``: the optimizer state keyed by parameter name,
    sharded (FSDP2: DTensors on the parameters' meshes; FSDP1: ShardedTensor, offloaded)."""
    if is_fsdp1(model):
        from torch.distributed.fsdp import FullyShardedDataParallel

        return FullyShardedDataParallel.sharded_optim_state_dict(model, optim, group)
    _check_fsdp2_group(model, group)
    return _get_optim(model, optim, None, full=False, offload=False, rank0_only=False)


def scatter_full_optim_state_dict(
    full_optim_state_dict: dict[str, Any] | None,
    model: nn.Module,
    optim_input: Any = None,
    optim: torch.optim.Optimizer | None = None,
    group: Any | None = None,
) -> dict[str, Any]:
    """``FSDP.scatter_full_optim_state_dict(...)``: rank 0's full dict (ignored on the others)
    as this rank's ``optim.load_state_dict`` input; ``optim`` is left as it was.

    FSDP2, DDP and plain modules: torch's ``set_optimizer_state_dict`` with
    ``broadcast_from_rank0`` (FSDP1's deprecated ``optim_input`` is refused). Keys may be names
    (FSDP1's) or the ids of ``optim.state_dict()``. Without ``optim``, as FSDP1 allows: the
    input of an optimizer built on ``model.parameters()`` in their order (FSDP1's promise then),
    each state tensor shaped like its parameter placed as that parameter (``_by_position``).
    """
    if is_fsdp1(model):
        from torch.distributed.fsdp import FullyShardedDataParallel

        return FullyShardedDataParallel.scatter_full_optim_state_dict(
            full_optim_state_dict, model, optim_input, optim, group
        )
    _refuse_optim_input(optim_input)
    _check_fsdp2_group(model, group)
    is_source = not dist.is_initialized() or dist.get_rank() == 0
    if optim is None:
        return _by_position(model, full_optim_state_dict or {}, from_rank0=is_distributed())
    given = _by_name(model, optim, full_optim_state_dict or {}) if is_source else {}
    return _load_optim(model, optim, given, full=True, rank0_only=is_distributed(), keep=False)


def shard_full_optim_state_dict(
    full_optim_state_dict: dict[str, Any],
    model: nn.Module,
    optim_input: Any = None,
    optim: torch.optim.Optimizer | None = None,
) -> dict[str, Any]:
    """``FSDP.shard_full_optim_state_dict(...)``: the full dict every rank holds, as this rank's
    ``optim.load_state_dict`` input; ``optim`` is left as it was. On FSDP2, DDP and plain
    modules as ``scatter_full_optim_state_dict``, without the broadcast (also without
    ``optim``)."""
    if is_fsdp1(model):
        from torch.distributed.fsdp import FullyShardedDataParallel

        return FullyShardedDataParallel.shard_full_optim_state_dict(
            full_optim_state_dict, model, optim_input, optim
        )
    _refuse_optim_input(optim_input)
    if optim is None:
        return _by_position(model, full_optim_state_dict, from_rank0=False)
    given = _by_name(model, optim, full_optim_state_dict)
    return _load_optim(model, optim, given, full=True, rank0_only=False, keep=False)


def _refuse_optim_input(optim_input: Any) -> None:
    if optim_input is not None:
        raise ValueError(
            "optim_input: FSDP1 deprecated it and FSDP2 has no equivalent; the optimizer names "
            "its own parameters: pass optim= (and optim_input=None)"
        )


def _by_name(model: nn.Module, optim: torch.optim.Optimizer, osd: dict[str, Any]) -> dict[str, Any]:
    """``osd`` with parameter names for keys: ids (``optim.state_dict()``'s, in its
    param_groups order) become the names torch gives the same parameters; names stay."""
    groups = osd.get("param_groups", [])
    ids = [key for key in osd.get("state", {}) if isinstance(key, int)]
    ids += [p for group in groups for p in group.get("params", []) if isinstance(p, int)]
    if not ids:
        return osd
    named = _get_optim(model, optim, None, full=False, offload=False, rank0_only=False)
    names = [name for group in named["param_groups"] for name in group["params"]]
    if max(ids) >= len(names) or min(ids) < 0:
        raise ValueError(
            f"full_optim_state_dict: parameter id {max(ids)} is not among the optimizer's "
            f"{len(names)} parameters"
        )

    def name(key: Any) -> Any:
        return names[key] if isinstance(key, int) else key

    state = {name(key): value for key, value in osd.get("state", {}).items()}
    param_groups = [
        {**group, "params": [name(p) for p in group.get("params", [])]} for group in groups
    ]
    return {**osd, "state": state, "param_groups": param_groups}


def _by_position(model: nn.Module, osd: dict[str, Any], *, from_rank0: bool) -> dict[str, Any]:
    """FSDP1's result without an optimizer: ``osd`` (full tensors, keyed by name as FSDP1's
    ``full_optim_state_dict`` writes it, or by position) keyed by the position of each
    parameter in ``model.parameters()``, every tensor shaped like its parameter placed as that
    parameter (its DTensor shard, no communication where each rank holds ``osd``); other
    values (``step``) as they are. ``from_rank0``: only rank 0's ``osd`` counts; its layout is
    broadcast, then each tensor scattered (DTensors) or broadcast (plain parameters).
    """
    from torch.distributed.tensor import DTensor, distribute_tensor

    from fsdp2_port.fsdp1.module_api import unwrapped

    names = [name for name, _ in unwrapped(model).named_parameters()]
    params = list(model.parameters())
    if from_rank0:
        layout = [_layout(osd, names) if dist.get_rank() == 0 else None]
        dist.broadcast_object_list(layout, src=0)
        state_layout, groups = layout[0]  # type: ignore[misc]
    else:
        state_layout, groups = _layout(osd, names)
    source = not from_rank0 or dist.get_rank() == 0
    state: dict[int, dict[str, Any]] = {}
    for i, entry in sorted(state_layout.items()):
        param, saved = params[i], _entry(osd, names, i) if source else {}
        state[i] = {}
        for key, kind in entry.items():
            if not isinstance(kind, tuple):  # a shared step tensor becomes one per parameter
                state[i][key] = kind.clone() if isinstance(kind, torch.Tensor) else kind
                continue
            shape, dtype = kind
            if shape != tuple(param.shape):
                raise ValueError(
                    f"full_optim_state_dict: state {key!r} of {names[i]!r} has shape {shape}, "
                    f"its parameter {tuple(param.shape)}: it cannot be placed like the "
                    "parameter without the optimizer; pass optim="
                )
            value = saved[key] if source else torch.empty(shape, dtype=dtype)
            if isinstance(param, DTensor):
                mesh = param.device_mesh
                value = distribute_tensor(
                    value.to(mesh.device_type),
                    mesh,
                    param.placements,
                    src_data_rank=0 if from_rank0 else None,
                )
            else:
                value = value.to(param.device)
                if from_rank0:
                    dist.broadcast(value, src=0)
            state[i][key] = value
    return {"state": state, "param_groups": groups}


def _entry(osd: dict[str, Any], names: list[str], i: int) -> dict[str, Any]:
    """The state of the parameter at position ``i``, keyed by its name or by ``i``."""
    state = osd.get("state", {})
    return state[names[i]] if names[i] in state else state[i]


def _layout(
    osd: dict[str, Any], names: list[str]
) -> tuple[dict[int, dict[str, Any]], list[dict[str, Any]]]:
    """Per position, each state key: (shape, dtype) for a tensor shaped like its parameter
    (the tensors to place), the value itself otherwise; and the param groups by position.
    ValueError, one line, for a name the model lacks or a tensor of another shape."""
    index = {name: i for i, name in enumerate(names)}

    def position(key: Any) -> int:
        if isinstance(key, int) and 0 <= key < len(names):
            return key
        if key in index:
            return index[key]
        raise ValueError(
            f"full_optim_state_dict: parameter {key!r} is not one of the model's "
            f"{len(names)} parameters (names as FSDP1 writes them, or positions)"
        )

    layout: dict[int, dict[str, Any]] = {}
    for key, entry in osd.get("state", {}).items():
        layout[position(key)] = {
            k: (tuple(v.shape), v.dtype) if isinstance(v, torch.Tensor) and v.dim() > 0 else v
            for k, v in entry.items()
        }
    groups = [
        {**g, "params": [position(p) for p in g.get("params", [])]}
        for g in osd.get("param_groups", [])
    ]
    return layout, groups
