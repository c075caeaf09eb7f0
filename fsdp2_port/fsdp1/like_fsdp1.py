"""FSDP1's constructor done with FSDP2: ``fully_shard_like_fsdp1``.

``model = FSDP(net, **kwargs)`` becomes ``model = fully_shard_like_fsdp1(net, **kwargs)``: the
same arguments, as FSDP1's own objects and with values known only at run time, and a run that
computes what FSDP1's computed. Invariants:

- The units are the modules FSDP1 wraps, chosen by our own code with FSDP1's semantics
  (``fsdp1.units``; tested against FSDP1's choice while torch ships it), ``_Builder.shard_unit``
  called where FSDP1 constructs each child: children first, each with its own FSDP1 kwargs
  (``CustomPolicy`` overrides, ``mixed_precision=None`` for
  ``MixedPrecision._module_classes_to_ignore``), then the root with the caller's.
- Each unit goes through FSDP1's constructor steps in FSDP1's order: resolve what it ignores,
  materialise meta modules, move to ``device_id``, broadcast module states, shard. RNG draws,
  broadcast sources and the modules each step touches are FSDP1's.
- No FSDP1 implementation code runs, at set-up or in training: FSDP1's policy functions and
  objects are read, never called (``tests/test_like_fsdp1.py`` holds every case to zero calls
  with ``fsdp2_port.prove.no_fsdp1``). Only torch's FSDP2, DTensor and distributed code run.
- Every argument maps to its FSDP2 equivalent, or has no numerical effect (the README says
  which), or raises ``ValueError`` naming the argument and the FSDP2 way. Nothing is dropped.
  The mappings of single arguments (strategy, mesh, mixed precision, offload, the checks) live
  in ``fsdp1.readers``, whose public readers the codemod's plain form calls: one home each.

Loading this module imports FSDP1's modules (its enums are the signature's defaults, its
policy and config classes are what the arguments are): ``fsdp2_port`` exports it lazily.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import (
    BackwardPrefetch,
    CPUOffload,
    FSDPModule,
    FullyShardedDataParallel,
    MixedPrecision,
    ShardingStrategy,
    fully_shard,
)
from torch.distributed.fsdp.wrap import CustomPolicy, ModuleWrapPolicy

from fsdp2_port.fsdp1 import readers, torch_internals, units
from fsdp2_port.fsdp1.readers import (
    HYBRID,
    HYBRID_SHARD_ZERO2,
    MESH_DIM_NAMES,
    RESHARD_AFTER_FORWARD,
)
from fsdp2_port.fsdp1.units import Ignored

__all__ = [
    "BROADCAST_BUCKET_BYTES",
    # the strategy and mesh constants live in fsdp1.readers, re-exported here
    "HYBRID_SHARD_ZERO2",
    "MESH_DIM_NAMES",
    "RESHARD_AFTER_FORWARD",
    "fully_shard_like_fsdp1",
    "materialize_like_fsdp1",
]

#: FSDP1 broadcasts module states in buckets of this size (``PARAM_BROADCAST_BUCKET_SIZE``).
BROADCAST_BUCKET_BYTES = 250 * 1024 * 1024


def fully_shard_like_fsdp1(
    module: nn.Module,
    process_group: dist.ProcessGroup | tuple[dist.ProcessGroup, dist.ProcessGroup] | None = None,
    sharding_strategy: ShardingStrategy | str | None = None,
    cpu_offload: CPUOffload | Mapping[str, Any] | None = None,
    auto_wrap_policy: Callable | ModuleWrapPolicy | CustomPolicy | None = None,
    backward_prefetch: BackwardPrefetch | str | None = BackwardPrefetch.BACKWARD_PRE,
    mixed_precision: MixedPrecision | Mapping[str, Any] | None = None,
    ignored_modules: Iterable[nn.Module] | None = None,
    param_init_fn: Callable[[nn.Module], None] | None = None,
    device_id: int | torch.device | None = None,
    sync_module_states: bool = False,
    forward_prefetch: bool = False,
    limit_all_gathers: bool = True,
    use_orig_params: bool = False,
    ignored_states: Iterable[nn.Parameter] | Iterable[nn.Module] | None = None,
    device_mesh: DeviceMesh | None = None,
) -> nn.Module:
    """``FullyShardedDataParallel(module, ...)`` done with ``fully_shard``; returns ``module``.

    FSDP1's arguments exactly (names, order, defaults). The modules FSDP1 would wrap are
    sharded children first, then ``module`` itself, which is returned as an ``FSDPModule``
    (the same object: no wrapper, no ``.module``, no flat parameters). What each argument
    becomes: README, "FSDP1 arguments on FSDP2". ``ValueError`` for what FSDP2 cannot honour.
    As the readers do, it also takes FSDP1's values spelled without FSDP1 (the codemod writes
    them where only it reads the value, F2P013): an enum member's name (``"SHARD_GRAD_OP"``,
    ``"BACKWARD_PRE"``), a config's fields as a dict (``mixed_precision=dict(param_dtype=...)``,
    ``cpu_offload=dict(offload_params=True)``) and a predicate ``is_unit(module) -> bool`` for
    a policy (``lambda_auto_wrap_policy``'s meaning).
    """
    kwargs: dict[str, Any] = {
        "process_group": process_group,
        "sharding_strategy": sharding_strategy,
        "cpu_offload": cpu_offload,
        "backward_prefetch": backward_prefetch,
        "mixed_precision": mixed_precision,
        "ignored_modules": None if ignored_modules is None else list(ignored_modules),
        "param_init_fn": param_init_fn,
        "device_id": device_id,
        "sync_module_states": sync_module_states,
        "forward_prefetch": forward_prefetch,
        "limit_all_gathers": limit_all_gathers,
        "use_orig_params": use_orig_params,
        "ignored_states": None if ignored_states is None else list(ignored_states),
        "device_mesh": device_mesh,
    }
    kwargs = _checked(kwargs)
    sharding_strategy = kwargs["sharding_strategy"]
    wrapped = [m for m in module.modules() if isinstance(m, (FullyShardedDataParallel, FSDPModule))]
    if wrapped:
        raise ValueError(
            f"module: {type(module).__name__} already holds {type(wrapped[0]).__name__} "
            "modules (FSDP1 or fully_shard): shard a module once, with one of them"
        )
    if not dist.is_initialized():
        raise ValueError(
            "fully_shard_like_fsdp1 needs an initialised process group, as FSDP1 does: call "
            "torch.distributed.init_process_group() first"
        )
    # FSDP1's first step: what the root ignores (its children ignore its ignored parameters)
    root = units.resolve_ignored(module, kwargs["ignored_modules"], kwargs["ignored_states"])
    builder = _Builder(module, readers.device_type(module, device_id, device_mesh))
    if sharding_strategy in HYBRID and device_mesh is None:
        # FSDP1 makes its (intra-node, inter-node) groups once, at the root, and hands them to
        # every unit it wraps.
        kwargs["process_group"] = builder.shared_hybrid_groups(sharding_strategy, process_group)
    if auto_wrap_policy is not None:
        root_kwargs = {k: v for k, v in kwargs.items() if k != "ignored_modules"}
        root_kwargs["ignored_states"] = root.params  # what FSDP1 passes its children
        units.wrap_units(module, auto_wrap_policy, root, root_kwargs, builder.shard_unit)
    builder.shard(module, _unit_kwargs(kwargs), root)
    builder.finish()
    return module


def materialize_like_fsdp1(
    module: nn.Module,
    param_init_fn: Callable[[nn.Module], None] | None = None,
    is_unit: Callable[[nn.Module], bool] | None = None,
    device: int | torch.device | None = None,
) -> nn.Module:
    """FSDP1's meta-device initialisation, for code that calls ``fully_shard`` itself: the
    submodules ``is_unit`` selects (FSDP1's units, children first), then ``module``. A unit
    whose own parameters or buffers (not those of a unit before it) are on the meta device gets
    ``param_init_fn`` on each of its modules breadth first, or, without one, ``to_empty`` on
    ``device`` and ``reset_parameters``: FSDP1's calls in FSDP1's order, so an initialiser that
    draws from the RNG draws what it drew under FSDP1. Runs no FSDP1 code; returns ``module``."""
    nothing = Ignored(set(), set(), set())
    target = (
        readers.as_device(device)
        if device is not None
        else _current(readers.device_type(module, None, None))
    )
    done: set[nn.Module] = set()
    chosen = [m for m in _post_order(module) if m is not module and is_unit and is_unit(m)]
    for unit in [*dict.fromkeys(chosen), module]:
        is_meta, is_deferred = units.needs_materialization(unit, nothing)
        if is_meta or (is_deferred and param_init_fn is not None):
            units.materialize(unit, set(done), param_init_fn, target)
        elif is_deferred:
            raise ValueError(
                "a torchdistX deferred-init module without param_init_fn: pass param_init_fn, "
                "or materialise the module first"
            )
        done.add(unit)
    return module


def _post_order(module: nn.Module) -> Iterator[nn.Module]:
    """``module``'s tree children first, in FSDP1's wrapping order."""
    for child in module.children():
        yield from _post_order(child)
    yield module


@dataclass
class _Builder:
    """What the units of one ``fully_shard_like_fsdp1`` call share while they are built."""

    root: nn.Module
    device_type: str
    meshes: dict[tuple[Any, ...], DeviceMesh] = field(default_factory=dict)
    #: units built so far, children first, and the parameters they hold
    units: list[nn.Module] = field(default_factory=list)
    sharded: set[Tensor] = field(default_factory=set)
    forward_prefetching: list[nn.Module] = field(default_factory=list)
    #: buffers already broadcast (FSDP1 marks them ``_fsdp_synced``)
    synced: set[Tensor] = field(default_factory=set)
    #: buffers whose dtype a unit decided (FSDP1: the innermost unit's ``buffer_dtype``)
    typed: set[Tensor] = field(default_factory=set)

    def shard_unit(self, module: nn.Module, **kwargs: Any) -> nn.Module:
        """One FSDP1 constructor on ``module``, its auto-wrap aside, done with ``fully_shard``."""
        kw = _unit_kwargs(kwargs)
        return self.shard(
            module, kw, units.resolve_ignored(module, kw["ignored_modules"], kw["ignored_states"])
        )

    def shard(self, module: nn.Module, kw: dict[str, Any], ignored: Ignored) -> nn.Module:
        """``shard_unit`` with the kwargs checked and what the unit ignores resolved."""
        if readers.is_container(module):
            # fully_shard refuses containers; FSDP1 wraps them, and is only right when the
            # container manages nothing (its modules are units of their own).
            readers.check_container_manages_nothing(module, ignored.params, self.sharded)
            return module
        strategy = kw["sharding_strategy"] or ShardingStrategy.FULL_SHARD
        mesh = self.mesh(strategy, kw["process_group"], kw["device_mesh"])
        device = _unit_device(kw["device_id"], mesh)
        self._materialize(module, ignored, kw["param_init_fn"], device)
        if kw["device_id"] is not None:
            self._move(module, ignored, device)
        if kw["sync_module_states"]:
            self._sync(module, ignored, mesh)
        fully_shard(
            module,
            mesh=mesh,
            reshard_after_forward=readers.reshard_after_forward_like_fsdp1(strategy),
            mp_policy=readers.mp_policy_like_fsdp1(kw["mixed_precision"], root=module is self.root),
            offload_policy=readers.offload_policy_like_fsdp1(kw["cpu_offload"], mesh),
            ignored_params=ignored.params,
        )
        self._cast_buffers(module, ignored, kw["mixed_precision"])
        self.units.append(module)
        self.sharded.update(module.parameters())
        if kw["forward_prefetch"]:
            self.forward_prefetching.append(module)
        return module

    def finish(self) -> None:
        if self.forward_prefetching:
            _prefetch_in_first_forward_order(self.root, self.units, self.forward_prefetching)

    # -- meshes ---------------------------------------------------------------------------

    def mesh(
        self, strategy: ShardingStrategy, process_group: Any, device_mesh: DeviceMesh | None
    ) -> DeviceMesh:
        """The FSDP2 mesh for FSDP1's (strategy, process_group, device_mesh), built once."""
        key = (readers.mesh_kind(strategy), process_group, device_mesh)
        if key not in self.meshes:
            self.meshes[key] = readers.build_mesh(
                strategy, process_group, device_mesh, self.device_type
            )
        return self.meshes[key]

    def shared_hybrid_groups(
        self, strategy: ShardingStrategy, process_group: Any
    ) -> tuple[dist.ProcessGroup, dist.ProcessGroup]:
        mesh = self.mesh(strategy, process_group, None)
        groups = (mesh.get_group(1), mesh.get_group(0))  # FSDP1's (intra-node, inter-node)
        self.meshes[("hybrid", groups, None)] = mesh
        return groups

    # -- FSDP1's constructor steps, for one unit --------------------------------------------

    def _materialize(
        self,
        module: nn.Module,
        ignored: Ignored,
        param_init_fn: Callable[[nn.Module], None] | None,
        device: torch.device,
    ) -> None:
        """FSDP1's meta-device init: ``param_init_fn`` or ``reset_parameters``, breadth first
        over the unit's modules; the units built before it are done, like ignored modules."""
        is_meta, is_deferred = units.needs_materialization(module, ignored)
        stop = ignored.modules | set(self.units)
        if (is_meta or is_deferred) and param_init_fn is not None:
            units.materialize(module, stop, param_init_fn, device)
        elif is_meta:
            units.materialize(module, stop, None, device)
        elif is_deferred:
            raise ValueError(
                "a torchdistX deferred-init module without param_init_fn: pass param_init_fn "
                "(as FSDP1 allows), or materialise the module before sharding it"
            )

    def _move(self, module: nn.Module, ignored: Ignored, device: torch.device) -> None:
        """FSDP1's ``device_id``: the unit's CPU parameters and buffers go to ``device``,
        those of ignored modules stay where they are."""
        if device.type == "cpu":
            return
        with torch.no_grad():
            for m in _unit_modules(module, set(self.units)):
                for p in m.parameters(recurse=False):
                    if p.device.type == "cpu" and p not in ignored.params:
                        p.data = p.to(device)
                        if p.grad is not None:
                            p.grad.data = p.grad.to(device)
                for b in m.buffers(recurse=False):
                    if b.device.type == "cpu" and b not in ignored.buffers:
                        b.data = b.to(device)

    def _sync(self, module: nn.Module, ignored: Ignored, mesh: DeviceMesh) -> None:
        """FSDP1's ``sync_module_states``: the unit's parameters and every buffer not broadcast
        yet, from the first rank of each mesh dimension's group, across replicas first (FSDP1's
        inter-node group, then intra-node), so that every rank ends with its root's states."""
        params = [
            p for p in module.parameters() if p not in ignored.params and p not in self.sharded
        ]
        buffers = [b for b in module.buffers() if b not in self.synced]
        self.synced.update(buffers)
        states = [t.detach() for t in (*buffers, *params)]
        if mesh.device_type != "cpu" and any(t.device.type == "cpu" for t in states):
            raise ValueError(
                f"sync_module_states=True with parameters or buffers on the CPU: broadcast on "
                f"{mesh.device_type} needs them there; pass device_id (as FSDP1 requires) or "
                "move the module first"
            )
        for dim in range(mesh.ndim):
            group = mesh.get_group(dim)
            if group.size() > 1:
                torch_internals.call(
                    "sync_params_and_buffers",
                    process_group=group,
                    module_states=states,
                    broadcast_bucket_size=BROADCAST_BUCKET_BYTES,
                    src=0,
                )

    def _cast_buffers(self, module: nn.Module, ignored: Ignored, mixed_precision: Any) -> None:
        """FSDP1's ``buffer_dtype``: each buffer takes its innermost unit's (FSDP1 casts at the
        first forward; units are built innermost first, so the first to see a buffer decides),
        except the buffers of the unit's ignored modules."""
        dtype = None if mixed_precision is None else mixed_precision.buffer_dtype
        for buffer in module.buffers():
            if buffer in self.typed:
                continue
            self.typed.add(buffer)
            if dtype is not None and torch.is_floating_point(buffer):
                if buffer not in ignored.buffers:
                    buffer.data = buffer.to(dtype)


def _unit_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """A unit's kwargs as FSDP1's constructor sees them: defaults filled, checked."""
    unknown = set(kwargs) - set(readers.FSDP1_DEFAULTS) - {"policy", "auto_wrap_policy"}
    if unknown:
        raise TypeError(f"FullyShardedDataParallel got unexpected arguments {sorted(unknown)}")
    kw = {**readers.FSDP1_DEFAULTS, **kwargs}
    kw.pop("policy", None)  # auto_wrap's name for the policy when fsdp_fn is a function
    if kw.pop("auto_wrap_policy", None) is not None:
        raise ValueError(
            "auto_wrap_policy in a unit's own arguments (a CustomPolicy override) asks for "
            "nested auto-wrapping: select those modules in the outer policy instead"
        )
    return _checked(kw)


def _checked(kw: dict[str, Any]) -> dict[str, Any]:
    """The arguments with names and dicts read as FSDP1's members and configs (``readers``);
    ValueError for what FSDP2 cannot honour, naming what to do instead."""
    readers.check_process_group_and_device_mesh(kw["process_group"], kw["device_mesh"])
    readers.check_device_id(kw["device_id"])
    return {
        **kw,
        "sharding_strategy": readers.member_of(
            kw["sharding_strategy"], ShardingStrategy, "sharding_strategy"
        ),
        "backward_prefetch": readers.member_of(
            kw["backward_prefetch"], BackwardPrefetch, "backward_prefetch"
        ),
        "mixed_precision": readers.mixed_precision_of(kw["mixed_precision"]),
        "cpu_offload": readers.cpu_offload_of(kw["cpu_offload"]),
    }


# -- devices and meshes -------------------------------------------------------------------------


def _current(device_type: str) -> torch.device:
    """The device FSDP2 uses for ``device_type``: the CPU, or the current device of that type."""
    if device_type == "cpu":
        return torch.device("cpu")
    return torch.device(device_type, torch.get_device_module(device_type).current_device())


def _unit_device(device_id: Any, mesh: DeviceMesh) -> torch.device:
    """Where FSDP2 puts the unit (the mesh's device type, the current device), checked against
    ``device_id``: FSDP2 has no per-module device, so it must be the current one."""
    device = _current(mesh.device_type)
    if device_id is not None:
        wanted = readers.as_device(device_id)
        if wanted.type != device.type or wanted.index not in (None, device.index):
            raise ValueError(
                f"device_id={device_id!r}, but FSDP2 runs this unit on {device} (its mesh's "
                f"device type, the current device): call torch.{wanted.type}.set_device"
                f"({wanted.index}) before sharding, as torchrun scripts do"
            )
    return device


def _unit_modules(module: nn.Module, built: set[nn.Module]) -> Iterator[nn.Module]:
    """``module`` and its submodules breadth first, not entering units already built."""
    queue, seen = deque([module]), {module}
    while queue:
        m = queue.popleft()
        yield m
        for child in m.children():
            if child not in seen and child not in built:
                seen.add(child)
                queue.append(child)


def _prefetch_in_first_forward_order(
    root: nn.Module, units: list[nn.Module], prefetching: list[nn.Module]
) -> None:
    """FSDP1's ``forward_prefetch``: a unit prefetches the unit that ran after it in the first
    forward (FSDP1 records that order in its first iteration and assumes it stays)."""
    order: list[nn.Module] = []

    def record(module: nn.Module, args: Any) -> None:
        if module not in order:
            order.append(module)

    def settle(module: nn.Module, args: Any, output: Any) -> None:
        for handle in handles:
            handle.remove()
        wanting = set(prefetching)
        for before, after in itertools.pairwise(order):
            if before in wanting and isinstance(before, FSDPModule):
                before.set_modules_to_forward_prefetch([after])  # type: ignore[list-item]

    handles = [unit.register_forward_pre_hook(record) for unit in units]
    handles.append(root.register_forward_hook(settle))
