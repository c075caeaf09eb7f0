"""FSDP1's module-level APIs, right on FSDP1, FSDP2 and DDP modules alike.

The codemod emits these where an FSDP1 call cannot become pure torch: a state-dict context
returned from a helper or chosen at run time, ``set_state_dict_type`` followed by plain
``model.state_dict()`` calls in other functions, ``no_sync`` or ``.module`` on a receiver that
may be DDP, ``clip_grad_norm_``/``summon_full_params``/``fsdp_modules`` and the legacy
optimizer-state functions on a receiver it cannot tie to one model. Each function takes
``FullyShardedDataParallel``'s arguments in its order; ``state_dict_type`` and
``set_state_dict_type`` also take DCP's ``options=StateDictOptions(...)`` instead, which means
exactly the FSDP1 settings DCP applies to FSDP1 models (``_settings_of_options``), and
``optim_options=`` for the optimizer's where they differ (as one would call
``get_model_state_dict`` and ``get_optimizer_state_dict`` with options of their own).

- A model holding FSDP1 instances gets FSDP1's own function, unchanged.
- Any other model (FSDP2: ``fully_shard`` at the root or only inside; DDP; a plain module)
  gets what FSDP1 promises, through torch's public ``torch.distributed.checkpoint.state_dict``
  functions: while a state-dict type is set, the model's own ``state_dict`` and
  ``load_state_dict`` are instance attributes that call them (so code the block calls is
  covered too), removed when it is unset. Keys are the parameters' names, without DDP's
  ``module.`` prefix, as FSDP1 writes them. (FSDP1's own context fails on a model without FSDP1
  instances: it cannot restore the settings it found, None.)
- What cannot be honoured raises ValueError naming the argument; nothing silently changes.

By design, SHARDED_STATE_DICT on FSDP2 gives DTensors, FSDP2's sharded form (FSDP1 gives
ShardedTensor); both save and load with ``torch.distributed.checkpoint``, which reshards, so
either loads the other's checkpoint. LOCAL_STATE_DICT (FSDP1's flat shards) has no FSDP2 form.
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

from fsdp2_port.fsdp1 import torch_internals

if TYPE_CHECKING:
    from torch.distributed.checkpoint.state_dict import StateDictOptions
    from torch.distributed.fsdp import (
        OptimStateDictConfig,
        StateDictConfig,
        StateDictSettings,
        StateDictType,
    )

__all__ = [
    "fsdp_modules",
    "fsdp_wrapped_module",
    "full_optim_state_dict",
    "get_state_dict_type",
    "load_module_state_dict",
    "module_clip_grad_norm_",
    "module_state_dict",
    "no_sync",
    "optim_state_dict",
    "optim_state_dict_to_load",
    "reshard",
    "scatter_full_optim_state_dict",
    "set_state_dict_type",
    "shard_full_optim_state_dict",
    "sharded_optim_state_dict",
    "state_dict_type",
    "summon_full_params",
    "unwrapped",
]


# -- gradient sync and the wrapped module --------------------------------------------------------

#: How many ``no_sync`` blocks are open on each FSDP2 module: only the outermost turns sync
#: back on, as FSDP1 and DDP restore the flag they found.
_NO_SYNC_DEPTH: weakref.WeakKeyDictionary[nn.Module, int] = weakref.WeakKeyDictionary()


def no_sync(module: nn.Module) -> contextlib.AbstractContextManager[None]:
    """``module.no_sync()``: gradients accumulate locally, unreduced, inside the block.

    FSDP2: ``set_requires_gradient_sync(False)`` on the module and its FSDP submodules, set
    back to True when the outermost block exits, also by an exception. FSDP1, DDP and
    anything else with a ``no_sync()``: that context manager itself.
    """
    from torch.distributed.fsdp import FSDPModule

    if isinstance(module, FSDPModule):
        return _fsdp2_no_sync(module)
    method = getattr(module, "no_sync", None)
    if callable(method):
        return method()
    raise TypeError(
        f"no_sync: {type(module).__name__} is neither an FSDP2 module (fully_shard) nor a "
        "wrapper with no_sync() (FullyShardedDataParallel, DistributedDataParallel)"
    )


@contextlib.contextmanager
def _fsdp2_no_sync(module: Any) -> Iterator[None]:
    depth = _NO_SYNC_DEPTH.get(module, 0)
    _NO_SYNC_DEPTH[module] = depth + 1
    module.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        if depth == 0:
            del _NO_SYNC_DEPTH[module]
            module.set_requires_gradient_sync(True)
        else:
            _NO_SYNC_DEPTH[module] = depth


def unwrapped(module: Any) -> Any:
    """What ``module.module`` read before the migration, on any receiver.

    DDP, DataParallel and FSDP1: the wrapped module (FSDP1's skips an activation-checkpoint
    wrapper, as it always did). An FSDP2 module is itself: ``fully_shard`` changes the class in
    place and wraps nothing. Any other object: its ``module`` attribute when it has one (another
    library's wrapper), else the object itself.
    """
    from torch.distributed.fsdp import FSDPModule, FullyShardedDataParallel
    from torch.nn.parallel import DataParallel, DistributedDataParallel

    if isinstance(module, (DistributedDataParallel, DataParallel, FullyShardedDataParallel)):
        return module.module
    if isinstance(module, FSDPModule):
        return module
    return getattr(module, "module", module)


def reshard(module: Any, free_unsharded_flat_param: bool = True) -> None:
    """What ``module._handle.reshard(free_unsharded_flat_param)`` did before the migration: the
    module's own parameters back to their shards (code calls it on a root, which FSDP1 and
    FSDP2 both leave unsharded after its forward).

    FSDP1: exactly that call. FSDP2: ``module.reshard()`` (it always frees the unsharded
    parameters; the values are the same either way). Anything else: AttributeError, as
    reading ``_handle`` gave."""
    from torch.distributed.fsdp import FSDPModule, FullyShardedDataParallel

    if isinstance(module, FSDPModule):
        module.reshard()
    elif isinstance(module, FullyShardedDataParallel):
        torch_internals.reshard_fsdp1_handle(module, free_unsharded_flat_param)
    else:
        raise AttributeError(
            f"{type(module).__name__} has no _handle to reshard: neither an FSDP1 "
            "(FullyShardedDataParallel) nor an FSDP2 (fully_shard) module"
        )


def fsdp_wrapped_module(module: Any) -> Any:
    """What ``module._fsdp_wrapped_module`` read before the migration, on any receiver.

    FSDP1: the module it wraps (exactly that attribute: an activation-checkpoint wrapper too).
    An FSDP2 module is itself. Anything else: the attribute, or its AttributeError, as before.
    """
    from torch.distributed.fsdp import FSDPModule

    if isinstance(module, FSDPModule):
        return module
    return torch_internals.fsdp1_wrapped_module(module)


# -- which implementation a model gets ------------------------------------------------------------


def _is_fsdp1(module: nn.Module) -> bool:
    """Whether ``module`` holds FSDP1 instances; a mix with FSDP2 modules is refused."""
    from torch.distributed.fsdp import FSDPModule, FullyShardedDataParallel

    # what FSDP.fsdp_modules(module) finds, without running FSDP1 code on an FSDP2 model
    if not any(isinstance(m, FullyShardedDataParallel) for m in module.modules()):
        return False
    if any(isinstance(m, FSDPModule) for m in module.modules()):
        raise ValueError(
            f"module: {type(module).__name__} holds both FSDP1 and FSDP2 (fully_shard) modules; "
            "migrate the whole model to one of them"
        )
    return True


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


def _current(module: nn.Module) -> StateDictSettings:
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
    return _full(
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


def _full(
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
    if _is_fsdp1(module):
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
    if _is_fsdp1(module):
        from torch.distributed.fsdp import FullyShardedDataParallel

        return FullyShardedDataParallel.set_state_dict_type(
            module, given.state_dict_type, given.state_dict_config, given.optim_state_dict_config
        )
    settings = _validated(
        given.state_dict_type, given.state_dict_config, given.optim_state_dict_config
    )
    previous = _current(module)
    _set(module, settings)
    return previous


def get_state_dict_type(module: nn.Module) -> StateDictSettings:
    """``FSDP.get_state_dict_type(module)``: the settings the functions here follow."""
    if _is_fsdp1(module):
        from torch.distributed.fsdp import FullyShardedDataParallel

        return FullyShardedDataParallel.get_state_dict_type(module)
    return _current(module)


def module_state_dict(module: nn.Module, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """FSDP1's plain ``module.state_dict(...)``, on any model.

    A model with FSDP2 modules and no state-dict type set gets FSDP1's default, the full state
    dict (FSDP2's own is sharded DTensors). Any other model answers itself: FSDP1 under its
    type, FSDP2 under the type ``set_state_dict_type`` gave it, DDP and plain modules as always
    (DDP's keys keep their ``module.`` prefix).
    """
    if module in _ROUTES or not _has_fsdp2(module):
        return module.state_dict(*args, **kwargs)
    with _fsdp2_state_dict_type(module, _fsdp1_default()):
        return module.state_dict(*args, **kwargs)


def load_module_state_dict(
    module: nn.Module, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False
) -> Any:
    """FSDP1's plain ``module.load_state_dict(...)``, on any model: on FSDP2 with no type set,
    the full state dict FSDP1 loads by default; any other model as in ``module_state_dict``."""
    if module in _ROUTES or not _has_fsdp2(module):
        return module.load_state_dict(state_dict, strict=strict, assign=assign)
    with _fsdp2_state_dict_type(module, _fsdp1_default()):
        return module.load_state_dict(state_dict, strict=strict, assign=assign)


def _has_fsdp2(module: nn.Module) -> bool:
    """Whether ``fully_shard`` was applied to ``module`` or inside it (FSDP1 mixed in: refused)."""
    from torch.distributed.fsdp import FSDPModule

    return not _is_fsdp1(module) and any(isinstance(m, FSDPModule) for m in module.modules())


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
    if _is_fsdp1(model):
        from torch.distributed.fsdp import FullyShardedDataParallel

        return FullyShardedDataParallel.optim_state_dict(model, optim, optim_state_dict, group)
    from torch.distributed.fsdp import StateDictType

    _check_fsdp2_group(model, group)
    settings = _current(model)
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
                result = _full(
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
    if _is_fsdp1(model):
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
    settings = _current(model)
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
    """New dicts and lists around the same tensors: torch re-keys the dicts it is given."""
    if isinstance(obj, dict):
        return {key: _structure_copy(value) for key, value in obj.items()}
    if isinstance(obj, list):
        return [_structure_copy(value) for value in obj]
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
    if _is_fsdp1(model):
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
    if _is_fsdp1(model):
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
    ``broadcast_from_rank0``; ``optim`` is required (FSDP1's deprecated ``optim_input`` is
    refused). Keys may be names (FSDP1's) or the ids of ``optim.state_dict()``.
    """
    if _is_fsdp1(model):
        from torch.distributed.fsdp import FullyShardedDataParallel

        return FullyShardedDataParallel.scatter_full_optim_state_dict(
            full_optim_state_dict, model, optim_input, optim, group
        )
    optim = _required_optim(optim, optim_input)
    _check_fsdp2_group(model, group)
    is_source = not dist.is_initialized() or dist.get_rank() == 0
    given = _by_name(model, optim, full_optim_state_dict or {}) if is_source else {}
    return _load_optim(model, optim, given, full=True, rank0_only=_is_distributed(), keep=False)


def shard_full_optim_state_dict(
    full_optim_state_dict: dict[str, Any],
    model: nn.Module,
    optim_input: Any = None,
    optim: torch.optim.Optimizer | None = None,
) -> dict[str, Any]:
    """``FSDP.shard_full_optim_state_dict(...)``: the full dict every rank holds, as this rank's
    ``optim.load_state_dict`` input; ``optim`` is left as it was. On FSDP2, DDP and plain
    modules as ``scatter_full_optim_state_dict``, without the broadcast."""
    if _is_fsdp1(model):
        from torch.distributed.fsdp import FullyShardedDataParallel

        return FullyShardedDataParallel.shard_full_optim_state_dict(
            full_optim_state_dict, model, optim_input, optim
        )
    optim = _required_optim(optim, optim_input)
    given = _by_name(model, optim, full_optim_state_dict)
    return _load_optim(model, optim, given, full=True, rank0_only=False, keep=False)


def _is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def _refuse_optim_input(optim_input: Any) -> None:
    if optim_input is not None:
        raise ValueError(
            "optim_input: FSDP1 deprecated it and FSDP2 has no equivalent; the optimizer names "
            "its own parameters: pass optim= (and optim_input=None)"
        )


def _required_optim(optim: torch.optim.Optimizer | None, optim_input: Any) -> torch.optim.Optimizer:
    _refuse_optim_input(optim_input)
    if optim is None:
        raise ValueError(
            "optim: a model without FSDP1 instances needs the optimizer that will load the "
            "state (optim=...)"
        )
    return optim


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


# -- clipping, full parameters, FSDP instances -----------------------------------------------------


def module_clip_grad_norm_(module: Any, max_norm: float, norm_type: float = 2.0) -> torch.Tensor:
    """FSDP1's ``module.clip_grad_norm_(max_norm, norm_type)`` on any receiver; returns the
    pre-clip norm over every gradient of the model, a plain tensor equal on every rank.

    - FSDP1 (the root instance): its own method.
    - Parameters that are DTensors (FSDP2, at the root or inside): ``fsdp2_port.clip_grad_norm_``,
      the job-wide norm, each element counted once.
    - A module with its own ``clip_grad_norm_`` method, or any other object that has one: that
      method, as the original call ran it.
    - DDP and plain modules: ``torch.nn.utils.clip_grad_norm_`` (DDP's gradients are already
      all-reduced, so the local norm is the global one).

    The norm has the promoted dtype of the gradients (fp32 when there are none), as FSDP1's.
    """
    from torch.distributed.fsdp import FullyShardedDataParallel
    from torch.distributed.tensor import DTensor

    if isinstance(module, FullyShardedDataParallel):
        return module.clip_grad_norm_(max_norm, norm_type)
    method = getattr(module, "clip_grad_norm_", None)
    if not isinstance(module, nn.Module):
        if not callable(method):
            raise TypeError(
                f"module_clip_grad_norm_: {type(module).__name__} is neither a module nor an "
                "object with a clip_grad_norm_ method"
            )
        return method(max_norm, norm_type)
    if _is_fsdp1(module) and not callable(method):
        raise ValueError(
            f"module: {type(module).__name__} holds FSDP1 instances but is not one; FSDP1's "
            "clip_grad_norm_ is a method of the root FullyShardedDataParallel instance"
        )
    params = list(module.parameters())
    if any(isinstance(p, DTensor) for p in params):
        from fsdp2_port.train.clip import clip_grad_norm_

        norm = clip_grad_norm_(params, max_norm, norm_type)
    elif callable(method):
        return method(max_norm, norm_type)
    else:
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type)
    dtypes = [p.grad.dtype for p in params if p.grad is not None]
    if not dtypes:
        return norm.float()
    return norm.to(_promoted(dtypes))


def _promoted(dtypes: list[torch.dtype]) -> torch.dtype:
    result = dtypes[0]
    for dtype in dtypes[1:]:
        result = torch.promote_types(result, dtype)
    return result


def summon_full_params(
    module: nn.Module,
    recurse: bool = True,
    writeback: bool = True,
    rank0_only: bool = False,
    offload_to_cpu: bool = False,
    with_grads: bool = False,
) -> contextlib.AbstractContextManager[None]:
    """``FSDP.summon_full_params(...)``: inside the block the model's parameters are full.

    FSDP1 models: FSDP1's context. FSDP2 (any DTensor parameter): each DTensor parameter
    (``recurse=False``: only those of ``module``'s own ``fully_shard`` unit, none when
    ``module`` is not one, as FSDP1) is replaced by a Parameter holding its full tensor, in its
    dtype (on the CPU with ``offload_to_cpu``; with its full gradient with ``with_grads``); on
    exit, with ``writeback``, each rank copies its own shard of the full tensor (and gradient)
    back, and the original parameters are registered again, also after an exception.
    ``rank0_only``: only rank 0 sees full tensors, the others their DTensors. DDP and plain
    modules: their parameters are already full, nothing changes. Refused as FSDP1 refuses:
    ``writeback`` with ``rank0_only``, ``with_grads`` with ``offload_to_cpu``.
    """
    if _is_fsdp1(module):
        from torch.distributed.fsdp import FullyShardedDataParallel

        return FullyShardedDataParallel.summon_full_params(
            module, recurse, writeback, rank0_only, offload_to_cpu, with_grads
        )
    if writeback and rank0_only:
        raise ValueError(
            "rank0_only=True with writeback=True: the other ranks would keep shards that "
            "rank 0's changes never reach (FSDP1 refuses it too); pass writeback=False"
        )
    if with_grads and offload_to_cpu:
        raise ValueError(
            "with_grads=True with offload_to_cpu=True is not supported (nor by FSDP1); pass "
            "offload_to_cpu=False"
        )
    return _summon_dtensors(
        list(_owned_parameters(module, recurse)),
        writeback=writeback,
        rank0_only=rank0_only,
        offload=offload_to_cpu,
        with_grads=with_grads,
    )


def _owned_parameters(module: nn.Module, recurse: bool) -> Iterator[tuple[nn.Module, str, Any]]:
    """(owner, name, parameter) for each DTensor parameter to summon; each FSDP2 unit passed
    is resharded first, so that its registered parameters are its DTensors.

    ``recurse=False``: only ``module``'s own FSDP2 unit, stopping at nested units.
    """
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.tensor import DTensor

    if not recurse and not isinstance(module, FSDPModule):
        return
    stack, seen = [module], set()
    while stack:
        owner = stack.pop()
        if id(owner) in seen:
            continue
        seen.add(id(owner))
        if isinstance(owner, FSDPModule):
            owner.reshard()  # left unsharded by a forward: its DTensors are the truth again
        for name, param in owner.named_parameters(recurse=False):
            if isinstance(param, DTensor):
                yield owner, name, param
        stack.extend(
            child
            for child in reversed(list(owner.children()))
            if recurse or not isinstance(child, FSDPModule)
        )


@contextlib.contextmanager
def _summon_dtensors(
    owned: list[tuple[nn.Module, str, Any]],
    *,
    writeback: bool,
    rank0_only: bool,
    offload: bool,
    with_grads: bool,
) -> Iterator[None]:
    visible = not rank0_only or not _is_distributed() or dist.get_rank() == 0
    full: dict[int, nn.Parameter] = {}  # by id of the DTensor: a shared one stays shared
    originals: dict[int, Any] = {}
    with torch.no_grad():
        for _, _, param in owned:
            if id(param) in full:
                continue
            # A collective: every rank joins, also with rank0_only.
            value = _on_mesh(param).full_tensor().to(param.device)
            grad = None
            if with_grads and param.grad is not None:
                grad = _on_mesh(param.grad).full_tensor().to(param.device)
            if offload:
                value = value.cpu()
            new = nn.Parameter(value, requires_grad=param.requires_grad)
            new.grad = grad
            full[id(param)], originals[id(param)] = new, param
    if visible:
        for owner, name, param in owned:
            owner.register_parameter(name, full[id(param)])
    try:
        yield
    finally:
        if visible:
            for owner, name, param in owned:
                owner.register_parameter(name, param)
        if writeback:
            with torch.no_grad():
                for key, param in originals.items():
                    new = full[key]
                    param.to_local().copy_(_local_shard(new.detach(), param).to_local())
                    if with_grads and new.grad is not None:
                        shard = _local_shard(new.grad, param)
                        if param.grad is None:
                            param.grad = shard.to(param.device)
                        else:
                            param.grad.to_local().copy_(shard.to_local())


def _on_mesh(tensor: Any) -> Any:
    """A DTensor on its mesh's device (FSDP2 with CPU offload keeps shards on the CPU)."""
    mesh_device = tensor.device_mesh.device_type
    return tensor if tensor.device.type == mesh_device else tensor.to(mesh_device)


def _local_shard(value: torch.Tensor, like: Any) -> Any:
    """``value`` (a full tensor) as a DTensor placed like ``like``: this rank's own slice of
    its own ``value``, no communication."""
    from torch.distributed.tensor import distribute_tensor

    value = value.to(device=like.device_mesh.device_type, dtype=like.dtype)
    return distribute_tensor(value, like.device_mesh, like.placements, src_data_rank=None)


def fsdp_modules(module: nn.Module, root_only: bool = False) -> list[nn.Module]:
    """``FSDP.fsdp_modules(module, root_only)``: the FSDP instances in ``module``'s tree,
    ``module`` included, in ``modules()`` order.

    FSDP1 models: FSDP1's. Others: the FSDP2 modules (``FSDPModule``); ``root_only``: those
    with no ``FSDPModule`` above them inside ``module``. DDP and plain modules: none.
    """
    if _is_fsdp1(module):
        from torch.distributed.fsdp import FullyShardedDataParallel

        return list(FullyShardedDataParallel.fsdp_modules(module, root_only))
    from torch.distributed.fsdp import FSDPModule

    found: list[nn.Module] = []
    seen: set[int] = set()

    def walk(node: nn.Module, under_fsdp: bool) -> None:
        if id(node) in seen:  # modules() lists a shared module once
            return
        seen.add(id(node))
        is_fsdp = isinstance(node, FSDPModule)
        if is_fsdp and not (root_only and under_fsdp):
            found.append(node)
        for child in node.children():
            walk(child, under_fsdp or is_fsdp)

    walk(module, False)
    return found
