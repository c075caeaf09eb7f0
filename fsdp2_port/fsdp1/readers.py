"""Readers: one FSDP1 constructor argument, known only at run time, turned into its FSDP2 value.

The codemod rewrites ``FSDP(model, **fsdp1_args)`` into plain FSDP2 code: a mesh, then
``fully_shard`` on each unit and on the root. Where an argument's value is only known when the
program runs (a policy returned by a library function, ``getattr(ShardingStrategy, s)``, a
``MixedPrecision`` built in another file), that plain code calls one of these readers on the
FSDP1 value::

    mesh = mesh_like_fsdp1(strategy, process_group)
    for unit in units_like_fsdp1(model, policy, mixed_precision=mp):
        fully_shard(unit, mesh=mesh, reshard_after_forward=reshard_after_forward_like_fsdp1(
            strategy), mp_policy=mp_policy_like_fsdp1(mp), offload_policy=...)
    fully_shard(model, mesh=mesh, ..., mp_policy=mp_policy_like_fsdp1(mp, root=True))

Each reader is a slice of ``fully_shard_like_fsdp1``: this module is the one home of each
mapping (strategy -> ``reshard_after_forward``, strategy / process group / device mesh -> mesh,
``MixedPrecision`` -> ``MixedPrecisionPolicy``, ``CPUOffload`` -> ``OffloadPolicy``) and
``fsdp1.units`` of the policy -> units one; ``fully_shard_like_fsdp1`` calls the same code. A
value FSDP2 cannot honour raises the ``ValueError`` ``fully_shard_like_fsdp1`` raises for it.

Two more serve the plain form: ``full_precision_like_fsdp1`` (the classes FSDP1 keeps out of
mixed precision, for the units it makes of them) and ``member_name`` (a value tested against an
enum member, by name), and ``kwargs_as_migrated`` checks spread keyword arguments.

Each reader, and the bridge, takes a value in FSDP1's spelling or in one without FSDP1, which
the codemod writes where only ``fsdp2_port`` reads the value (F2P013): an enum member's name
(``"HYBRID_SHARD"``, ``member_of``), a config dataclass's fields as a dict
(``dict(param_dtype=torch.bfloat16)``, ``config_of``), a policy's predicate.

None of them runs FSDP1 code: FSDP1's enums, config dataclasses and policy objects are read,
never called (``tests/test_readers.py`` holds a program written with them to zero FSDP1 calls
with ``fsdp2_port.prove.no_fsdp1``). Loading this module imports FSDP1's modules (its classes
are what the arguments are): ``fsdp2_port`` exports the readers lazily.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import os
import types
from collections.abc import Mapping
from typing import Any, TypeVar, cast

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import (
    BackwardPrefetch,
    CPUOffload,
    CPUOffloadPolicy,
    FullyShardedDataParallel,
    MixedPrecision,
    MixedPrecisionPolicy,
    OffloadPolicy,
    ShardingStrategy,
    StateDictType,
)

from fsdp2_port.fsdp1 import torch_internals, units
from fsdp2_port.fsdp1.units import Ignored

E = TypeVar("E", bound=enum.Enum)

__all__ = [
    "full_precision_like_fsdp1",
    "mesh_like_fsdp1",
    "mp_policy_like_fsdp1",
    "offload_policy_like_fsdp1",
    "reshard_after_forward_like_fsdp1",
    "units_like_fsdp1",
]

#: ``ShardingStrategy._HYBRID_SHARD_ZERO2`` (private: pinned in torch_internals)
HYBRID_SHARD_ZERO2: ShardingStrategy = torch_internals.load("hybrid_shard_zero2")
HYBRID = (ShardingStrategy.HYBRID_SHARD, HYBRID_SHARD_ZERO2)
#: FSDP2's ``reshard_after_forward`` for each FSDP1 strategy. ``None`` is FSDP2's "True, except
#: for the root", which is FSDP1's behaviour: its root keeps the parameters for the backward.
RESHARD_AFTER_FORWARD: dict[ShardingStrategy, bool | None] = {
    ShardingStrategy.FULL_SHARD: None,
    ShardingStrategy.HYBRID_SHARD: None,
    ShardingStrategy.SHARD_GRAD_OP: False,
    HYBRID_SHARD_ZERO2: False,
    ShardingStrategy.NO_SHARD: False,
}
#: Dimension names of the 2-D meshes built here (FSDP2 needs names on an HSDP mesh).
MESH_DIM_NAMES = ("replicate", "shard")


# -- the readers --------------------------------------------------------------------------------


def reshard_after_forward_like_fsdp1(
    sharding_strategy: ShardingStrategy | str | None,
) -> bool | None:
    """FSDP2's ``reshard_after_forward`` for FSDP1's ``sharding_strategy`` (a member or its
    name, ``"SHARD_GRAD_OP"``): equals ``RESHARD_AFTER_FORWARD[sharding_strategy or
    FULL_SHARD]`` (``None`` for FULL_SHARD and HYBRID_SHARD: reshard except the root, as FSDP1;
    ``False`` for the others)."""
    return RESHARD_AFTER_FORWARD[strategy_of(sharding_strategy)]


def mesh_like_fsdp1(
    sharding_strategy: ShardingStrategy | str | None = None,
    process_group: dist.ProcessGroup | tuple[dist.ProcessGroup, dist.ProcessGroup] | None = None,
    device_mesh: DeviceMesh | None = None,
    device_id: int | torch.device | None = None,
) -> DeviceMesh:
    """The mesh ``fully_shard_like_fsdp1`` builds for these FSDP1 arguments (the strategy: a
    member or its name): 1-D over
    ``process_group`` (WORLD by default) or ``device_mesh`` for FULL_SHARD / SHARD_GRAD_OP;
    2-D named ``("replicate", "shard")`` for the hybrid strategies (FSDP1's default groups, an
    ``(intra_node, inter_node)`` pair, or a 2-D ``device_mesh``); NO_SHARD as an (N, 1) mesh of
    replicas. Its device type: ``device_mesh``'s, else ``device_id``'s, else the accelerator's,
    else the CPU (there is no module here, so the step of ``fully_shard_like_fsdp1`` that reads
    the module's parameters' device is skipped: pass ``device_id`` where that matters).

    Every call builds a new mesh, with new process groups for NO_SHARD and FSDP1's default
    hybrid groups (a collective every rank must join): call it once per FSDP1 constructor and
    hand the one mesh to every ``fully_shard`` of that model, as FSDP1 shares its groups."""
    strategy = strategy_of(sharding_strategy)
    check_process_group_and_device_mesh(process_group, device_mesh)
    check_device_id(device_id)
    return build_mesh(
        strategy,
        process_group,
        device_mesh,
        device_type(None, device_id, device_mesh),
    )


def mp_policy_like_fsdp1(
    mixed_precision: MixedPrecision | Mapping[str, Any] | None, *, root: bool = False
) -> MixedPrecisionPolicy:
    """FSDP1's ``MixedPrecision`` (or the dict of its fields) with its defaults spelled out:
    ``param_dtype``, ``reduce_dtype or param_dtype``, inputs cast if ``cast_forward_inputs``
    or, for the ``root``, ``cast_root_forward_inputs``; ``None`` -> ``MixedPrecisionPolicy()``.
    (``buffer_dtype`` casts buffers, which no FSDP2 policy does: ``fully_shard_like_fsdp1``
    casts them; ``_module_classes_to_ignore``: see ``units_like_fsdp1``.)"""
    mp = mixed_precision_of(mixed_precision)
    if mp is None:
        return MixedPrecisionPolicy()
    return MixedPrecisionPolicy(
        param_dtype=mp.param_dtype,
        # FSDP1 reduces in param_dtype unless told otherwise
        reduce_dtype=mp.reduce_dtype if mp.reduce_dtype is not None else mp.param_dtype,
        # FSDP1 casts a unit's inputs if cast_forward_inputs, the root's also if
        # cast_root_forward_inputs (its pre-forward runs both casts)
        cast_forward_inputs=mp.cast_forward_inputs or (root and mp.cast_root_forward_inputs),
    )


def buffer_dtype_like_fsdp1(
    mixed_precision: MixedPrecision | Mapping[str, Any] | None,
) -> torch.dtype | None:
    """The dtype FSDP1's ``MixedPrecision`` (or the dict of its fields) casts floating buffers
    to, or None (no mixed precision, or none for buffers): what the plain form casts them to
    before sharding, as no FSDP2 policy does."""
    mp = mixed_precision_of(mixed_precision)
    return None if mp is None else mp.buffer_dtype


def offload_policy_like_fsdp1(
    cpu_offload: CPUOffload | Mapping[str, Any] | None, mesh: DeviceMesh | None = None
) -> OffloadPolicy:
    """FSDP1's ``CPUOffload`` (or the dict of its fields, ``dict(offload_params=True)``):
    ``CPUOffloadPolicy`` if it offloads parameters, else ``OffloadPolicy()`` (none). Pinned
    memory unless ``mesh``'s device type is the CPU; without a mesh, pinned iff this machine has
    an accelerator."""
    offload = cpu_offload_of(cpu_offload)
    if offload is None or not offload.offload_params:
        return OffloadPolicy()
    where = mesh.device_type if mesh is not None else device_type(None, None, None)
    return CPUOffloadPolicy(pin_memory=where != "cpu")


def units_like_fsdp1(
    module: nn.Module,
    auto_wrap_policy: Any,
    *,
    mixed_precision: MixedPrecision | Mapping[str, Any] | MixedPrecisionPolicy | None = None,
) -> list[nn.Module]:
    """The modules below ``module`` that ``FullyShardedDataParallel(module,
    auto_wrap_policy=auto_wrap_policy, mixed_precision=...)`` wraps as units, in the order FSDP1
    constructs them (children first), ``module`` itself excluded: ``fully_shard_like_fsdp1``'s
    units (``fsdp1.units.wrap_units``), for any policy it accepts (``None`` -> ``[]``), each
    once (FSDP1 reaches a module registered under two names twice). The policy may also be a
    predicate, ``is_unit(module) -> bool`` (how the codemod writes a lambda or transformer
    policy only this reader reads): it means ``lambda_auto_wrap_policy`` with that
    ``lambda_fn``. Nothing is ignored; a
    ModuleList/ModuleDict without a forward (``fully_shard`` refuses it) is left out, and
    raises if it would manage parameters of its own, as in ``fully_shard_like_fsdp1``.

    ``mixed_precision`` (FSDP1's ``MixedPrecision`` or the dict of its fields, an FSDP2
    ``MixedPrecisionPolicy`` or ``None``) only says whether FSDP1 ran under mixed precision:
    then the modules of ``MixedPrecision._module_classes_to_ignore`` (``_BatchNorm`` by
    default, and for an FSDP2 policy) are units of their own too, as FSDP1 makes them. This
    reader does not register FSDP1's fp32 hooks on them: the caller gives those units
    ``MixedPrecisionPolicy(param_dtype=torch.float32, output_dtype=<the param dtype>)``.

    It does not modify ``module`` and runs no FSDP1 code (a ``CustomPolicy``'s ``lambda_fn`` and
    a user's policy function are the user's and are called as FSDP1 calls them). A policy that
    gives units arguments of their own (a ``CustomPolicy`` whose ``lambda_fn`` returns a dict
    that changes one) raises ``ValueError``: use ``fully_shard_like_fsdp1``. Partly frozen units
    are accepted as FSDP1 accepts them with ``use_orig_params=True`` (it warns)."""
    if auto_wrap_policy is None:
        return []
    mp = _units_precision(mixed_precision)
    fp32_classes = () if mp is None else units.fp32_classes(mp)
    # What FSDP1 hands its children: its defaults, this mixed precision, nothing ignored.
    root_kwargs = {**_CHILD_DEFAULTS, "ignored_states": set(), "mixed_precision": mp}
    found: list[nn.Module] = []
    seen: set[nn.Module] = set()
    held: set[torch.Tensor] = set()

    def collect(unit: nn.Module, **kwargs: Any) -> nn.Module:
        if unit in seen:
            return unit  # registered under two names: FSDP1 reaches it twice, one unit here
        seen.add(unit)
        expected = dict(root_kwargs)
        if isinstance(unit, fp32_classes):
            expected["mixed_precision"] = None
        _check_no_unit_arguments(unit, kwargs, expected)
        if is_container(unit):
            check_container_manages_nothing(unit, set(), held)
        else:
            found.append(unit)
            held.update(unit.parameters())
        return unit

    nothing = Ignored(set(), set(), set())
    kwargs = dict(root_kwargs)
    units.wrap_units(module, auto_wrap_policy, nothing, kwargs, collect, fp32_hooks=False)
    return found


def full_precision_like_fsdp1(
    mixed_precision: MixedPrecision | Mapping[str, Any] | MixedPrecisionPolicy | None,
) -> tuple[type, ...]:
    """The module classes FSDP1 keeps in full precision under ``mixed_precision`` when it
    auto-wraps (``MixedPrecision._module_classes_to_ignore``: ``_BatchNorm`` by default and for
    an FSDP2 policy; none without mixed precision): ``units_like_fsdp1`` makes them units of
    their own, and the plain form gives those units ``param_dtype=torch.float32`` and leaves
    their buffers' dtype alone."""
    mp = _units_precision(mixed_precision)
    return () if mp is None else units.fp32_classes(mp)


def _units_precision(mixed_precision: Any) -> Any:
    """The ``MixedPrecision`` (``config_of``) FSDP1's units saw: an FSDP2 policy stands for
    FSDP1's defaults."""
    if isinstance(mixed_precision, MixedPrecisionPolicy):
        return config_of({}, MixedPrecision, "mixed_precision")  # FSDP1's default exceptions
    if mixed_precision is None or isinstance(mixed_precision, (MixedPrecision, Mapping)):
        return config_of(mixed_precision, MixedPrecision, "mixed_precision")
    raise ValueError(
        "mixed_precision must be an FSDP1 MixedPrecision, a dict of its fields, an FSDP2 "
        f"MixedPrecisionPolicy or None, not {mixed_precision!r}"
    )


def kwargs_as_migrated(
    kwargs: Mapping[str, Any], *keys: str, optional: tuple[str, ...] = ()
) -> Mapping[str, Any]:
    """``kwargs``, FSDP1 keyword arguments the program spreads with ``**``, once its keys are
    checked to be ``keys`` and some of ``optional`` (stored under conditions), with each
    absent optional one as None: the codemod wrote the plain form for these arguments and
    reads their values from it (None, where FSDP1 had its default, means that default for
    every argument the plain form reads). Other keys raise ``ValueError``, before any module
    is touched."""
    if not isinstance(kwargs, Mapping):
        raise TypeError(f"FSDP1 keyword arguments must be a mapping, not {type(kwargs).__name__}")
    added = sorted(set(kwargs) - set(keys) - set(optional))
    missing = sorted(set(keys) - set(kwargs))
    if added or missing:
        change = "; ".join(
            f"{what}: {', '.join(names)}"
            for what, names in (("added", added), ("missing", missing))
            if names
        )
        raise ValueError(
            f"the FSDP1 keyword arguments are not those this FSDP2 code was migrated for "
            f"({change}): migrate the call again (fsdp2-port migrate) or port it by hand"
        )
    return {**dict.fromkeys(optional), **kwargs} if optional else kwargs


#: FSDP1's keyword arguments and their defaults, ``module`` and ``auto_wrap_policy`` aside
#: (read from its signature, which ``fully_shard_like_fsdp1``'s repeats exactly).
FSDP1_DEFAULTS: dict[str, Any] = {
    name: p.default
    for name, p in inspect.signature(FullyShardedDataParallel.__init__).parameters.items()
    if name not in ("self", "module", "auto_wrap_policy")
}
#: What FSDP1's constructor hands the units its auto-wrap builds, nothing ignored
#: (``use_orig_params=True``: FSDP2 exposes the original parameters).
_CHILD_DEFAULTS: dict[str, Any] = {
    **{k: v for k, v in FSDP1_DEFAULTS.items() if k != "ignored_modules"},
    "use_orig_params": True,
}


def _check_no_unit_arguments(
    unit: nn.Module, kwargs: dict[str, Any], expected: dict[str, Any]
) -> None:
    """``ValueError`` where the policy gave ``unit`` arguments other than the root's (the
    policy's own slot, which FSDP1 hands its units as ``None``, aside)."""
    given = {
        k: v for k, v in kwargs.items() if not (k in ("policy", "auto_wrap_policy") and v is None)
    }
    changed = sorted(
        key
        for key in set(given) | set(expected)
        if not (key in given and key in expected and _same(given[key], expected[key]))
    )
    if changed:
        raise ValueError(
            f"auto_wrap_policy gives the unit {type(unit).__name__} arguments of its own "
            f"({changed}): one fully_shard per unit with shared arguments cannot say that. "
            "Use fsdp2_port.fully_shard_like_fsdp1(module, **fsdp1_kwargs), which honours "
            "per-unit arguments"
        )


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    try:
        return bool(a == b)
    except Exception:  # tensors and the like: compared by identity only
        return False


# -- checks: what FSDP2 cannot honour (fully_shard_like_fsdp1's too) -------------------------------


def member_name(value: Any) -> Any:
    """An FSDP1 enum member's name (``ShardingStrategy``, ``BackwardPrefetch``,
    ``StateDictType``), any other value as it is. The codemod tests a value by name where FSDP1
    tested it against a member (``x == ShardingStrategy.X`` -> ``member_name(x) == "X"``), which
    holds for the member and for its name alike, the two spellings the readers take (F2P013).
    The one difference from the original test: a string equal to a member's name, which never
    equalled the member, passes this one."""
    if isinstance(value, (ShardingStrategy, BackwardPrefetch, StateDictType)):
        return value.name
    return value


def member_of(value: Any, enum: type[E], what: str) -> E | None:
    """An FSDP1 enum argument (``ShardingStrategy``, ``BackwardPrefetch``, ``StateDictType``):
    a member, its name (``"FULL_SHARD"``: how the codemod writes a value only ``fsdp2_port``
    reads, F2P013) or None, as the member or None; ``ValueError`` for anything else."""
    if isinstance(value, str):
        if value not in enum.__members__:
            raise ValueError(
                f"{what} {value!r} names no {enum.__name__} (one of {', '.join(enum.__members__)})"
            )
        return enum[value]
    if value is not None and not isinstance(value, enum):
        raise ValueError(f"{what} must be a {enum.__name__}, its name or None, not {value!r}")
    return value


def config_of(value: Any, cls: type, what: str) -> Any:
    """An FSDP1 config argument (``MixedPrecision``, ``CPUOffload``): the dataclass, or the dict
    of its fields (``dict(param_dtype=...)``: how the codemod writes a config only
    ``fsdp2_port`` reads, F2P013), or None. A dict comes back as an object with every field of
    ``cls`` (its defaults filled in), built without calling FSDP1; ``ValueError`` for a field
    ``cls`` lacks or any other value."""
    if value is None or isinstance(value, cls) or (isinstance(value, _Fields) and value.of is cls):
        return value
    if not isinstance(value, Mapping):
        raise ValueError(
            f"{what} must be an FSDP1 {cls.__name__}, a dict of its fields or None, not {value!r}"
        )
    fields = {f.name: f.default for f in dataclasses.fields(cls)}
    unknown = sorted(set(value) - set(fields))
    if unknown:
        raise ValueError(
            f"{what}: {', '.join(map(repr, unknown))} not a field of {cls.__name__} (its fields: "
            f"{', '.join(fields)})"
        )
    return _Fields(cls, {**fields, **value})


class _Fields(types.SimpleNamespace):
    """A config's fields read from a dict (``config_of``), and the class they are fields of."""

    def __init__(self, of: type, fields: Mapping[str, Any]) -> None:
        super().__init__(**fields)
        self.of = of


def strategy_of(strategy: ShardingStrategy | str | None) -> ShardingStrategy:
    """The readers' strategy: a member, its name or ``None`` (FULL_SHARD, FSDP1's default)."""
    return member_of(strategy, ShardingStrategy, "sharding_strategy") or ShardingStrategy.FULL_SHARD


def check_process_group_and_device_mesh(process_group: Any, device_mesh: Any) -> None:
    if process_group is not None and device_mesh is not None:
        raise ValueError("process_group and device_mesh: pass one of them (FSDP1 refuses both)")


def mixed_precision_of(mixed_precision: Any) -> Any:
    """``config_of`` a ``MixedPrecision``, refusing what FSDP2 cannot honour."""
    mp = config_of(mixed_precision, MixedPrecision, "mixed_precision")
    if mp is None:
        return None
    if mp.keep_low_precision_grads and (mp.param_dtype is not None or mp.reduce_dtype is not None):
        raise ValueError(
            "mixed_precision.keep_low_precision_grads=True: FSDP2 always hands the optimizer "
            "gradients in the sharded parameter's dtype. Keep the parameters themselves in low "
            "precision (model.to(torch.bfloat16) before sharding; fp32 masters in "
            "fsdp2_port.BF16Optimizer), or drop keep_low_precision_grads"
        )
    if mp.param_dtype is not None and os.environ.get("FSDP_USE_FULL_PREC_IN_EVAL", "") == "1":
        raise ValueError(
            "FSDP_USE_FULL_PREC_IN_EVAL=1 makes FSDP1 evaluate in full precision despite "
            "mixed_precision; FSDP2 has no such switch. Unset it, or evaluate a copy sharded "
            "without mixed_precision"
        )
    return mp


def cpu_offload_of(cpu_offload: Any) -> Any:
    """``config_of`` a ``CPUOffload``."""
    return config_of(cpu_offload, CPUOffload, "cpu_offload")


def check_device_id(device_id: Any) -> None:
    if device_id is not None:
        device = as_device(device_id)
        if device.type != "cpu" and not torch.get_device_module(device.type).is_available():
            raise ValueError(f"device_id={device_id!r}: no {device.type} device here")


# -- devices and meshes ---------------------------------------------------------------------------


def as_device(device_id: int | torch.device) -> torch.device:
    """FSDP1's ``device_id``: a device, or the index of one on this machine's accelerator."""
    if isinstance(device_id, torch.device):
        return device_id
    if isinstance(device_id, int) and not torch.accelerator.is_available():
        raise ValueError(f"device_id={device_id}: an accelerator index, but this machine has none")
    return torch.device(device_id)


def device_type(module: nn.Module | None, device_id: Any, device_mesh: DeviceMesh | None) -> str:
    """The device type FSDP1 would run on: the mesh's, ``device_id``'s, the module's (when
    there is one), else the accelerator's (FSDP1 refuses to run without one; FSDP2 runs on the
    CPU)."""
    if device_mesh is not None:
        return device_mesh.device_type
    if device_id is not None:
        return as_device(device_id).type
    for p in module.parameters() if module is not None else ():
        if p.device.type not in ("cpu", "meta"):
            return p.device.type
    if not torch.accelerator.is_available():
        return "cpu"
    accelerator = torch.accelerator.current_accelerator()
    return "cpu" if accelerator is None else accelerator.type


def mesh_kind(strategy: ShardingStrategy) -> str:
    """The mesh a strategy shards on: "hybrid" (2-D), "replicate" (NO_SHARD) or "shard"."""
    if strategy in HYBRID:
        return "hybrid"
    return "replicate" if strategy == ShardingStrategy.NO_SHARD else "shard"


def build_mesh(
    strategy: ShardingStrategy,
    process_group: Any,
    device_mesh: DeviceMesh | None,
    device_type: str,
) -> DeviceMesh:
    """A new FSDP2 mesh for FSDP1's (strategy, process_group, device_mesh)."""
    kind = mesh_kind(strategy)
    mesh = _build_mesh(kind, process_group, device_mesh, device_type)
    if kind == "hybrid" and mesh.size(1) == 1 < mesh.size(0):
        raise ValueError(
            f"{strategy} with shard groups of one rank ({mesh.size(0)} replicas): FSDP1 "
            "turns a unit whose group has one rank into NO_SHARD over that rank and never "
            "reduces gradients across the replicas, so each rank trains alone. FSDP2 will "
            "not reproduce that silently: for data parallelism across the replicas (what "
            "HYBRID_SHARD means) pass sharding_strategy=ShardingStrategy.NO_SHARD"
        )
    return mesh


def _build_mesh(
    kind: str, process_group: Any, device_mesh: DeviceMesh | None, device_type: str
) -> DeviceMesh:
    if kind == "hybrid":
        if device_mesh is not None:
            if device_mesh.ndim != 2:
                raise ValueError(
                    f"a hybrid sharding_strategy needs a 2-D device_mesh (replicate, shard), "
                    f"not {device_mesh.ndim}-D"
                )
            return device_mesh if device_mesh.mesh_dim_names else _named(device_mesh)
        if process_group is None:
            return _default_hybrid_mesh(device_type)
        if not (
            isinstance(process_group, tuple)
            and len(process_group) == 2
            and all(isinstance(g, dist.ProcessGroup) for g in process_group)
        ):
            raise ValueError(
                "a hybrid sharding_strategy takes process_group=(intra_node, inter_node) "
                f"groups or a 2-D device_mesh, not {process_group!r}"
            )
        return _mesh_from_group_pair(*process_group, device_type=device_type)
    if device_mesh is not None:
        if device_mesh.ndim != 1:
            raise ValueError(
                f"a {device_mesh.ndim}-D device_mesh with a non-hybrid sharding_strategy: FSDP1 "
                "would shard over its dim 0 only; pass that 1-D mesh (device_mesh[name])"
            )
        flat = device_mesh
    elif isinstance(process_group, tuple):
        raise ValueError(
            "process_group is a pair of groups, which only the hybrid sharding strategies take"
        )
    else:
        group = process_group if process_group is not None else dist.group.WORLD
        flat = DeviceMesh.from_group(cast(dist.ProcessGroup, group), device_type)
    return flat if kind == "shard" else _replicate_only(flat)


def _replicate_only(flat: DeviceMesh) -> DeviceMesh:
    """NO_SHARD: the group as replicas of a shard dimension of size 1, so FSDP2 all-reduces."""
    alone = dist.new_group([dist.get_rank()], use_local_synchronization=True)
    return DeviceMesh.from_group(
        [flat.get_group(0), alone],
        flat.device_type,
        mesh=flat.mesh.view(-1, 1),
        mesh_dim_names=MESH_DIM_NAMES,
    )


def _default_hybrid_mesh(device_type: str) -> DeviceMesh:
    """FSDP1's default hybrid groups: shard within a node (its device count), replicate across."""
    per_node = torch.get_device_module(device_type).device_count()
    world = dist.get_world_size()
    if per_node < 1 or world % per_node:
        raise ValueError(
            f"hybrid sharding over {world} ranks with {per_node} {device_type} devices per "
            "node: pass a 2-D device_mesh"
        )
    shape = (world // per_node, per_node)
    return init_device_mesh(device_type, shape, mesh_dim_names=MESH_DIM_NAMES)


def _mesh_from_group_pair(
    intra: dist.ProcessGroup, inter: dist.ProcessGroup, *, device_type: str
) -> DeviceMesh:
    """The 2-D mesh of FSDP1's (intra-node, inter-node) groups; each rank knows one row and one
    column of it, so the rows are gathered across the inter-node group (one collective)."""
    rows: list[Any] = [None] * inter.size()
    dist.all_gather_object(rows, dist.get_process_group_ranks(intra), group=inter)
    column = [row[dist.get_rank(intra)] for row in rows]
    if len({len(r) for r in rows}) != 1 or column != dist.get_process_group_ranks(inter):
        raise ValueError(
            f"process_group=(intra_node, inter_node) does not form a grid (rows {rows}): "
            "pass a 2-D device_mesh"
        )
    return DeviceMesh.from_group(
        [inter, intra], device_type, mesh=torch.tensor(rows), mesh_dim_names=MESH_DIM_NAMES
    )


def _named(mesh: DeviceMesh) -> DeviceMesh:
    """The same 2-D mesh and groups, with the dimension names FSDP2's HSDP requires."""
    return DeviceMesh.from_group(
        [mesh.get_group(0), mesh.get_group(1)],
        mesh.device_type,
        mesh=mesh.mesh,
        mesh_dim_names=MESH_DIM_NAMES,
    )


# -- containers -----------------------------------------------------------------------------------


def is_container(module: nn.Module) -> bool:
    """A ModuleList / ModuleDict without a forward of its own: ``fully_shard`` refuses it."""
    return (
        isinstance(module, (nn.ModuleList, nn.ModuleDict))
        and type(module).forward is nn.Module.forward
    )


def check_container_manages_nothing(
    module: nn.Module, ignored_params: set[nn.Parameter], held: set[torch.Tensor]
) -> None:
    """FSDP1 wraps a container the policy picks; skipping it is only right when it manages
    nothing (every parameter is ignored or ``held`` by a unit built before it)."""
    managed = [
        name for name, p in module.named_parameters() if p not in ignored_params and p not in held
    ]
    if managed:
        raise ValueError(
            f"the policy makes the container {type(module).__name__} (no forward) a unit "
            f"that would manage {managed[:3]}: FSDP1 never gathers those (it warns), "
            "fully_shard refuses containers. Make the policy select the modules inside it"
        )
