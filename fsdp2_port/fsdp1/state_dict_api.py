"""FSDP1's state-dict type APIs on any model: ``state_dict_type``, ``set_state_dict_type``,
``get_state_dict_type``, and FSDP1's plain ``state_dict()``/``load_state_dict()``
(``module_state_dict``, ``load_module_state_dict``).

FSDP1 models get FSDP1's own functions. Any other model (FSDP2, DDP, plain) gets what FSDP1
promises through ``torch.distributed.checkpoint.state_dict``: while a type is set, the model's
``state_dict`` and ``load_state_dict`` are instance attributes that call it (code the block
calls is covered too), removed when it is unset. DCP's ``options=StateDictOptions(...)`` is
read as the FSDP1 settings DCP applies to FSDP1 models (``_settings_of_options``).
"""

from __future__ import annotations

import contextlib
import types
import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import torch
import torch.distributed as dist
from torch import nn

from fsdp2_port.fsdp1.module_api import is_fsdp1

if TYPE_CHECKING:
    from torch.distributed.checkpoint.state_dict import StateDictOptions
    from torch.distributed.fsdp import (
        OptimStateDictConfig,
        StateDictConfig,
        StateDictSettings,
        StateDictType,
    )

__all__ = [
    "get_state_dict_type",
    "load_module_state_dict",
    "module_state_dict",
    "set_state_dict_type",
    "state_dict_type",
]


# -- state-dict settings of models without FSDP1 --------------------------------------------------


@dataclass
class _Route:
    """A state-dict type set on a model without FSDP1, and its instance attributes before."""

    settings: StateDictSettings
    saved: dict[str, Any]
    busy: bool = False  # inside our own call: torch's functions call module.state_dict() too


_ROUTES: weakref.WeakKeyDictionary[nn.Module, _Route] = weakref.WeakKeyDictionary()
_ROUTED = ("state_dict", "load_state_dict")
_ABSENT = object()


def _fsdp1_default() -> StateDictSettings:
    """What FSDP1 reports for a module nobody set a type on."""
    from torch.distributed.fsdp import (
        FullOptimStateDictConfig,
        FullStateDictConfig,
        StateDictSettings,
        StateDictType,
    )

    return StateDictSettings(
        StateDictType.FULL_STATE_DICT, FullStateDictConfig(), FullOptimStateDictConfig()
    )


def current_settings(module: nn.Module) -> StateDictSettings:
    """The state-dict settings set on a model without FSDP1 (FSDP1's default when none)."""
    route = _ROUTES.get(module)
    return _fsdp1_default() if route is None else route.settings


def _validated(
    state_dict_type: StateDictType,
    state_dict_config: StateDictConfig | None,
    optim_state_dict_config: OptimStateDictConfig | None,
) -> StateDictSettings:
    """FSDP1's settings, its default config filled in; refuses what cannot be honoured."""
    from torch.distributed.fsdp import StateDictSettings, StateDictType

    if state_dict_type == StateDictType.LOCAL_STATE_DICT:
        raise ValueError(
            "state_dict_type=LOCAL_STATE_DICT has no FSDP2 equivalent (it holds FSDP1's "
            "flattened shards): use StateDictType.SHARDED_STATE_DICT and save and load it with "
            "torch.distributed.checkpoint (dcp.save / dcp.load), which reshards"
        )
    configs = _config_classes()
    if state_dict_type not in configs:
        raise ValueError(f"state_dict_type: expected a StateDictType, got {state_dict_type!r}")
    model_type, optim_type = configs[state_dict_type]
    model_config = model_type() if state_dict_config is None else state_dict_config
    optim_config = optim_type() if optim_state_dict_config is None else optim_state_dict_config
    for name, want, got in (
        ("state_dict_config", model_type, model_config),
        ("optim_state_dict_config", optim_type, optim_config),
    ):
        if type(got) is not want:  # FSDP1 checks the exact type as well
            raise ValueError(
                f"{name}: {state_dict_type.name} takes a {want.__name__}, got {type(got).__name__}"
            )
    return StateDictSettings(state_dict_type, model_config, optim_config)


def _config_classes() -> dict[Any, tuple[type, type]]:
    """Each ``StateDictType``'s config classes: (the model's, the optimizer's)."""
    from torch.distributed.fsdp import (
        FullOptimStateDictConfig,
        FullStateDictConfig,
        LocalOptimStateDictConfig,
        LocalStateDictConfig,
        ShardedOptimStateDictConfig,
        ShardedStateDictConfig,
        StateDictType,
    )

    return {
        StateDictType.FULL_STATE_DICT: (FullStateDictConfig, FullOptimStateDictConfig),
        StateDictType.SHARDED_STATE_DICT: (ShardedStateDictConfig, ShardedOptimStateDictConfig),
        StateDictType.LOCAL_STATE_DICT: (LocalStateDictConfig, LocalOptimStateDictConfig),
    }


def _set(module: nn.Module, settings: StateDictSettings | None) -> None:
    """Route ``module``'s state_dict/load_state_dict by ``settings``; None: its own again."""
    route = _ROUTES.get(module)
    if settings is None:
        if route is not None:
            del _ROUTES[module]
            for name, saved in route.saved.items():
                if saved is _ABSENT:
                    del module.__dict__[name]
                else:
                    module.__dict__[name] = saved
        return
    if route is not None:
        route.settings = settings
        return
    saved = {name: module.__dict__.get(name, _ABSENT) for name in _ROUTED}
    _ROUTES[module] = _Route(settings, saved)
    # Bound methods, not closures: a deepcopy of the module binds them to the copy, which
    # has no route and so behaves as the module's class does.
    module.__dict__["state_dict"] = types.MethodType(_routed_state_dict, module)
    module.__dict__["load_state_dict"] = types.MethodType(_routed_load_state_dict, module)


def _native(module: nn.Module, name: str) -> Callable[..., Any]:
    return getattr(type(module), name).__get__(module)


def _state_dict_args(
    destination: dict[str, Any] | None = None, prefix: str = "", keep_vars: bool = False
) -> tuple[dict[str, Any] | None, str, bool]:
    return destination, prefix, keep_vars


def _routed_state_dict(module: nn.Module, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """``module.state_dict()`` under the type set on it, as FSDP1 returns it."""
    route = _ROUTES.get(module)
    if route is None or route.busy:
        return _native(module, "state_dict")(*args, **kwargs)
    destination, prefix, keep_vars = _state_dict_args(*args, **kwargs)
    if keep_vars:
        raise ValueError(
            "keep_vars=True: under a FULL or SHARDED state-dict type the model returns gathered "
            "or copied tensors, not its parameters (as FSDP1 does); call it without keep_vars"
        )
    route.busy = True
    try:
        result = _model_state_dict(module, route.settings)
    finally:
        route.busy = False
    if prefix:
        result = {prefix + key: value for key, value in result.items()}
    if destination is None:
        return result
    destination.update(result)
    return destination


def _routed_load_state_dict(
    module: nn.Module, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False
) -> Any:
    """``module.load_state_dict(sd)`` under the type set on it, as FSDP1 loads it."""
    route = _ROUTES.get(module)
    if route is None or route.busy:
        return _native(module, "load_state_dict")(state_dict, strict=strict, assign=assign)
    if assign:
        raise ValueError(
            "assign=True: under a FULL or SHARDED state-dict type the model copies the values "
            "into its (sharded) parameters, as FSDP1 does; call it without assign"
        )
    route.busy = True
    try:
        return _load_model_state_dict(module, state_dict, strict, route.settings)
    finally:
        route.busy = False


def _model_state_dict(module: nn.Module, settings: StateDictSettings) -> dict[str, Any]:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from torch.distributed.fsdp import StateDictType

    config: Any = settings.state_dict_config
    if settings.state_dict_type != StateDictType.FULL_STATE_DICT:
        return get_model_state_dict(
            module, options=StateDictOptions(cpu_offload=config.offload_to_cpu)
        )
    return full_state(
        lambda options: get_model_state_dict(module, options=options),
        offload=config.offload_to_cpu,
        rank0_only=config.rank0_only,
    )


def _load_model_state_dict(
    module: nn.Module, state_dict: Mapping[str, Any], strict: bool, settings: StateDictSettings
) -> Any:
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        set_model_state_dict,
    )
    from torch.distributed.fsdp import StateDictType

    given = dict(state_dict)  # torch writes the sharded tensors into the dict it is given
    if settings.state_dict_type != StateDictType.FULL_STATE_DICT:
        return set_model_state_dict(module, given, options=StateDictOptions(strict=strict))
    # torch's full load fills the keys a dict lacks with the model's current values, so it
    # never reports them missing: find them here, as nn.Module (and FSDP1) would.
    missing = [key for key in get_model_state_dict(module) if key not in given]
    if strict and missing:
        raise RuntimeError(
            f"Error(s) in loading state_dict for {type(module).__name__}:\n\t"
            f"Missing key(s) in state_dict: {', '.join(repr(k) for k in missing)}."
        )
    # Every rank passes the full tensors, as FSDP1 requires; torch scatters rank 0's.
    options = StateDictOptions(full_state_dict=True, strict=strict)
    result = set_model_state_dict(module, given, options=options)
    return type(result)(missing + list(result.missing_keys), list(result.unexpected_keys))


def full_state(
    get: Callable[[Any], dict[str, Any]], *, offload: bool, rank0_only: bool
) -> dict[str, Any]:
    """A full state dict from torch's ``get(options)`` with FSDP1's two separate switches.

    torch ties them (``cpu_offload=True`` with ``full_state_dict=True`` also means rank 0
    only); the two mixed cases take torch's sharded dict and gather it one tensor at a time,
    every rank joining each gather, so no rank holds more than FSDP1 would.
    """
    from torch.distributed.checkpoint.state_dict import StateDictOptions
    from torch.distributed.tensor import DTensor

    if offload == rank0_only:
        return get(StateDictOptions(full_state_dict=True, cpu_offload=offload))
    keep = not rank0_only or not dist.is_initialized() or dist.get_rank() == 0

    def gather(value: torch.Tensor) -> torch.Tensor | None:
        if isinstance(value, DTensor):
            mesh_device = value.device_mesh.device_type
            if value.device.type != mesh_device:  # shards FSDP2 offloads: gather on the mesh
                value = cast(DTensor, value.to(mesh_device))
            value = value.full_tensor()
        if not keep:
            return None
        return value.cpu() if offload else value

    result = _map_tensors(get(StateDictOptions()), gather)
    return result if keep else {}


def _map_tensors(obj: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    """``obj`` with ``fn`` applied to every tensor in it, in order, through dicts and lists."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, dict):
        return {key: _map_tensors(value, fn) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_map_tensors(value, fn) for value in obj)
    return obj


# -- DCP's StateDictOptions in FSDP1's words ----------------------------------------------------

#: The ``StateDictOptions`` fields that have an FSDP1 meaning, and so may differ from their
#: defaults in an ``options=`` argument: ``(full_state_dict, cpu_offload)``.
_MAPPED_FIELDS = ("full_state_dict", "cpu_offload")


def _settings_of_options(options: StateDictOptions) -> StateDictSettings:
    """The FSDP1 settings a ``StateDictOptions`` means: those DCP applies to an FSDP1 model
    (``torch.distributed.checkpoint.state_dict._verify_options``), for model and optimizer.

    - ``StateDictOptions(full_state_dict=True, cpu_offload=True)``: FULL_STATE_DICT,
      ``FullStateDictConfig(offload_to_cpu=True, rank0_only=True)``,
      ``FullOptimStateDictConfig(offload_to_cpu=True, rank0_only=True)``;
    - ``StateDictOptions(full_state_dict=True)``: FULL_STATE_DICT, ``FullStateDictConfig()``,
      ``FullOptimStateDictConfig(offload_to_cpu=False)`` (FSDP1's default offloads);
    - ``StateDictOptions(cpu_offload=True)``: SHARDED_STATE_DICT,
      ``ShardedStateDictConfig(offload_to_cpu=True)``, ``ShardedOptimStateDictConfig()``;
    - ``StateDictOptions()``: SHARDED_STATE_DICT, ``ShardedStateDictConfig()``,
      ``ShardedOptimStateDictConfig(offload_to_cpu=False)`` (FSDP1's default offloads).

    Every other field must keep its default: ``strict`` belongs to a load call,
    ``broadcast_from_rank0`` loads the model too (FSDP1's ``rank0_only`` only the optimizer),
    the rest has no FSDP1 setting. Anything else raises ValueError: say it in FSDP1's words.
    """
    from torch.distributed.checkpoint.state_dict import StateDictOptions
    from torch.distributed.fsdp import (
        FullOptimStateDictConfig,
        FullStateDictConfig,
        ShardedOptimStateDictConfig,
        ShardedStateDictConfig,
        StateDictSettings,
        StateDictType,
    )

    if not isinstance(options, StateDictOptions):
        raise ValueError(
            f"options: expected a torch.distributed.checkpoint.state_dict.StateDictOptions, got "
            f"{type(options).__name__}"
        )
    default = StateDictOptions()
    other = [
        name
        for name in vars(default)
        if name not in _MAPPED_FIELDS and getattr(options, name) != getattr(default, name)
    ]
    if other:
        raise ValueError(
            f"options: {', '.join(f'{n}={getattr(options, n)!r}' for n in other)} has no FSDP1 "
            "state-dict setting; only full_state_dict and cpu_offload map (pass strict= to "
            "load_state_dict, or give state_dict_type= and its configs instead)"
        )
    offload = bool(options.cpu_offload)
    if options.full_state_dict:
        return StateDictSettings(
            StateDictType.FULL_STATE_DICT,
            FullStateDictConfig(offload_to_cpu=offload, rank0_only=offload),
            FullOptimStateDictConfig(offload_to_cpu=offload, rank0_only=offload),
        )
    return StateDictSettings(
        StateDictType.SHARDED_STATE_DICT,
        ShardedStateDictConfig(offload_to_cpu=offload),
        ShardedOptimStateDictConfig(offload_to_cpu=offload),
    )


def _given(
    state_dict_type: StateDictType | str | None,
    state_dict_config: StateDictConfig | Mapping[str, Any] | None,
    optim_state_dict_config: OptimStateDictConfig | Mapping[str, Any] | None,
    options: StateDictOptions | None,
    optim_options: StateDictOptions | None = None,
) -> StateDictSettings:
    """The settings asked for, in FSDP1's words or in DCP's (``options``, and ``optim_options``
    for the optimizer where they differ): exactly one of them.

    FSDP1's words are passed on as given, names and dicts read as FSDP1's members and configs
    (a config left None stays None: FSDP1 fills in its own default)."""
    from torch.distributed.fsdp import StateDictSettings

    fsdp1 = {
        name: value
        for name, value in (
            ("state_dict_type", state_dict_type),
            ("state_dict_config", state_dict_config),
            ("optim_state_dict_config", optim_state_dict_config),
        )
        if value is not None
    }
    if optim_options is not None and options is None:
        raise ValueError("optim_options: given without options (the model's); pass both")
    if options is not None:
        if fsdp1:
            raise ValueError(
                f"options: given together with {', '.join(fsdp1)}; pass either options= "
                "(a StateDictOptions) or FSDP1's state_dict_type and configs, not both"
            )
        settings = _settings_of_options(options)
        if optim_options is None:
            return settings
        optim = _settings_of_options(optim_options)
        if optim.state_dict_type != settings.state_dict_type:
            raise ValueError(
                "optim_options: full_state_dict must agree with options' (FSDP1 has one "
                f"state-dict type for both), got {options.full_state_dict} and "
                f"{optim_options.full_state_dict}"
            )
        return StateDictSettings(
            settings.state_dict_type, settings.state_dict_config, optim.optim_state_dict_config
        )
    if state_dict_type is None:
        raise ValueError(
            "state_dict_type: missing; pass FSDP1's state_dict_type (and configs) or options= "
            "(a torch.distributed.checkpoint.state_dict.StateDictOptions)"
        )
    from torch.distributed.fsdp import StateDictType

    from fsdp2_port.fsdp1 import readers

    kind = readers.member_of(state_dict_type, StateDictType, "state_dict_type")
    assert kind is not None  # state_dict_type is not None here
    model_type, optim_type = _config_classes()[kind]
    return StateDictSettings(
        kind,
        _config(state_dict_config, model_type, "state_dict_config"),
        _config(optim_state_dict_config, optim_type, "optim_state_dict_config"),
    )


def _config(value: Any, cls: type, what: str) -> Any:
    """A config as given, or built from the dict of its fields the codemod writes where only
    ``fsdp2_port`` reads it (F2P013): FSDP1 models need FSDP1's own config objects."""
    if not isinstance(value, Mapping):
        return value
    from fsdp2_port.fsdp1 import readers

    readers.config_of(value, cls, what)  # its fields, or ValueError
    return cls(**value)


# -- the state-dict type APIs ---------------------------------------------------------------------


def state_dict_type(
    module: nn.Module,
    state_dict_type: StateDictType | str | None = None,
    state_dict_config: StateDictConfig | Mapping[str, Any] | None = None,
    optim_state_dict_config: OptimStateDictConfig | Mapping[str, Any] | None = None,
    *,
    options: StateDictOptions | None = None,
    optim_options: StateDictOptions | None = None,
) -> contextlib.AbstractContextManager[None]:
    """``FSDP.state_dict_type(...)``: inside the block, ``module.state_dict()`` and
    ``module.load_state_dict()`` (wherever they are called) and the optimizer functions below
    follow that type and those configs.

    The settings are given either in FSDP1's words (``state_dict_type`` and its configs) or in
    DCP's: ``options``, a ``torch.distributed.checkpoint.state_dict.StateDictOptions``, which
    means the FSDP1 settings DCP itself applies to FSDP1 models (``_settings_of_options``:
    ``StateDictOptions(full_state_dict=True, cpu_offload=True)`` is FULL, offloaded, rank 0
    only, for the model and the optimizer alike), with ``optim_options`` for the optimizer's
    where they differ (same ``full_state_dict``). One of the two, never both. FSDP1's words
    may be spelled without FSDP1, as the codemod writes them where only ``fsdp2_port`` reads
    them (F2P013): the type's name (``"FULL_STATE_DICT"``) and each config as the dict of its
    fields (``dict(offload_to_cpu=True, rank0_only=True)``).

    FSDP1 models: FSDP1's context manager. Others (FSDP2, DDP, plain): what was set before (a
    type, or nothing) is restored on exit, also by an exception.
    """
    settings = _given(
        state_dict_type, state_dict_config, optim_state_dict_config, options, optim_options
    )
    if is_fsdp1(module):
        from torch.distributed.fsdp import FullyShardedDataParallel

        return FullyShardedDataParallel.state_dict_type(
            module,
            settings.state_dict_type,
            settings.state_dict_config,
            settings.optim_state_dict_config,
        )
    return _fsdp2_state_dict_type(
        module,
        _validated(
            settings.state_dict_type,
            settings.state_dict_config,
            settings.optim_state_dict_config,
        ),
    )


@contextlib.contextmanager
def _fsdp2_state_dict_type(module: nn.Module, settings: StateDictSettings) -> Iterator[None]:
    route = _ROUTES.get(module)
    before = None if route is None else route.settings
    _set(module, settings)
    try:
        yield
    finally:
        _set(module, before)


def set_state_dict_type(
    module: nn.Module,
    state_dict_type: StateDictType | str | None = None,
    state_dict_config: StateDictConfig | Mapping[str, Any] | None = None,
    optim_state_dict_config: OptimStateDictConfig | Mapping[str, Any] | None = None,
    *,
    options: StateDictOptions | None = None,
    optim_options: StateDictOptions | None = None,
) -> StateDictSettings:
    """``FSDP.set_state_dict_type(...)``: as ``state_dict_type``, until changed; returns the
    previous settings. ``options`` and ``optim_options`` (DCP's words) instead of the FSDP1
    arguments: as in ``state_dict_type``.

    A model without FSDP1 that nobody set a type on reports FSDP1's default (FULL, default
    configs): the optimizer functions follow it. Its own ``state_dict()`` is its class's until a
    type is set (DTensors on FSDP2); setting FULL explicitly gives FSDP1's default there too.
    """
    given = _given(
        state_dict_type, state_dict_config, optim_state_dict_config, options, optim_options
    )
    if is_fsdp1(module):
        from torch.distributed.fsdp import FullyShardedDataParallel

        return FullyShardedDataParallel.set_state_dict_type(
            module, given.state_dict_type, given.state_dict_config, given.optim_state_dict_config
        )
    settings = _validated(
        given.state_dict_type, given.state_dict_config, given.optim_state_dict_config
    )
    previous = current_settings(module)
    _set(module, settings)
    return previous


def get_state_dict_type(module: nn.Module) -> StateDictSettings:
    """``FSDP.get_state_dict_type(module)``: the settings the functions here follow."""
    if is_fsdp1(module):
        from torch.distributed.fsdp import FullyShardedDataParallel

        return FullyShardedDataParallel.get_state_dict_type(module)
    return current_settings(module)


def module_state_dict(module: nn.Module, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """FSDP1's plain ``module.state_dict(...)``, on any model.

    A model with FSDP2 modules and no state-dict type set gets FSDP1's default, the full state
    dict (FSDP2's own is sharded DTensors). Any other model answers itself: FSDP1 under its
    type, FSDP2 under the type ``set_state_dict_type`` gave it, DDP and plain modules as always
    (DDP's keys keep their ``module.`` prefix); so does any other object with a ``state_dict``
    (an optimizer, a scheduler: the codemod writes this call where it cannot tell).
    """
    if module in _ROUTES or not _has_fsdp2(module):
        return module.state_dict(*args, **kwargs)
    with _fsdp2_state_dict_type(module, _fsdp1_default()):
        return module.state_dict(*args, **kwargs)


def load_module_state_dict(
    module: nn.Module, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False
) -> Any:
    """FSDP1's plain ``module.load_state_dict(...)``, on any model: on FSDP2 with no type set,
    the full state dict FSDP1 loads by default; any other model as in ``module_state_dict``.
    An object that is no module is given only the arguments that differ from the defaults."""
    if not isinstance(module, nn.Module):
        given = {"strict": strict} if not strict else {}
        return module.load_state_dict(state_dict, **given, **({"assign": True} if assign else {}))
    if module in _ROUTES or not _has_fsdp2(module):
        return module.load_state_dict(state_dict, strict=strict, assign=assign)
    with _fsdp2_state_dict_type(module, _fsdp1_default()):
        return module.load_state_dict(state_dict, strict=strict, assign=assign)


def _has_fsdp2(module: nn.Module) -> bool:
    """Whether ``fully_shard`` was applied to ``module`` or inside it (FSDP1 mixed in: refused);
    never for an object that is no module."""
    from torch.distributed.fsdp import FSDPModule

    return (
        isinstance(module, nn.Module)
        and not is_fsdp1(module)
        and any(isinstance(m, FSDPModule) for m in module.modules())
    )
