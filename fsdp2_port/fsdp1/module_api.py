"""FSDP1's module APIs that are not about state dicts, right on FSDP1, FSDP2 and DDP alike:
``no_sync``, ``.module`` (``unwrapped``), ``_handle.reshard`` (``reshard``),
``_fsdp_wrapped_module``, ``clip_grad_norm_``, ``summon_full_params``, ``fsdp_modules``; and
which implementation a model gets (``is_fsdp1``), which every FSDP1 API form here asks first.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from fsdp2_port.fsdp1 import torch_internals

__all__ = [
    "fsdp_modules",
    "fsdp_wrapped_module",
    "module_clip_grad_norm_",
    "no_sync",
    "reshard",
    "summon_full_params",
    "unwrapped",
]


# -- which implementation a model gets ------------------------------------------------------------


def is_fsdp1(module: nn.Module) -> bool:
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


def is_distributed() -> bool:
    """Whether a default process group is up (FSDP1's functions then act on every rank)."""
    return dist.is_available() and dist.is_initialized()


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
    if is_fsdp1(module) and not callable(method):
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
    ``rank0_only``: only rank 0 sees full tensors, the others their DTensors. A forward inside
    the block (``generate()`` under ``recurse=False``, as RLHF code runs it on FSDP1) computes
    with the full parameters registered there; the model trains on after it, its FSDP2 state
    and parameters in agreement (``_summon_dtensors``). DDP and plain modules: their
    parameters are already full, nothing changes. Refused as FSDP1 refuses:
    ``writeback`` with ``rank0_only``, ``with_grads`` with ``offload_to_cpu``.
    """
    if is_fsdp1(module):
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
    units, owned = _in_scope(module, recurse)
    return _summon_dtensors(
        units,
        owned,
        writeback=writeback,
        rank0_only=rank0_only,
        offload=offload_to_cpu,
        with_grads=with_grads,
    )


def _in_scope(
    module: nn.Module, recurse: bool
) -> tuple[list[nn.Module], list[tuple[nn.Module, str, Any]]]:
    """The FSDP2 units to summon and (owner, name, parameter) for each DTensor parameter.

    Each unit is resharded first (a forward leaves the root unsharded), so that its registered
    parameters are its DTensors. ``recurse=False``: only ``module``'s own unit, stopping at
    nested units (none when ``module`` is not one).
    """
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.tensor import DTensor

    units: list[nn.Module] = []
    owned: list[tuple[nn.Module, str, Any]] = []
    if not recurse and not isinstance(module, FSDPModule):
        return units, owned
    stack, seen = [module], set()
    while stack:
        owner = stack.pop()
        if id(owner) in seen:
            continue
        seen.add(id(owner))
        if isinstance(owner, FSDPModule):
            owner.reshard()
            units.append(owner)
        for name, param in owner.named_parameters(recurse=False):
            if isinstance(param, DTensor):
                owned.append((owner, name, param))
        stack.extend(
            child
            for child in reversed(list(owner.children()))
            if recurse or not isinstance(child, FSDPModule)
        )
    return units, owned


@contextlib.contextmanager
def _summon_dtensors(
    units: list[Any],
    owned: list[tuple[nn.Module, str, Any]],
    *,
    writeback: bool,
    rank0_only: bool,
    offload: bool,
    with_grads: bool,
) -> Iterator[None]:
    """Full copies of the ``owned`` DTensors registered in their place while open.

    The ``units`` are unsharded by FSDP2 itself for the block (``unshard()``: a forward inside,
    ``generate()`` say, then finds them unsharded and computes with the full parameters
    registered here, as FSDP1's forward uses the summoned ones; it also lazily initialises
    them while their DTensors are registered) and resharded on exit, before the DTensors are
    registered again: FSDP2's own state and the module's parameters agree afterwards. The
    cost is one more all-gather of the units' parameters (FSDP2's, in its ``param_dtype``).
    """
    visible = not rank0_only or not is_distributed() or dist.get_rank() == 0
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
    for unit in units:
        unit.unshard()  # a collective too
        if not visible:
            unit.reshard()  # these ranks keep their DTensors (FSDP1 likewise)
    if visible:
        for owner, name, param in owned:
            owner.register_parameter(name, full[id(param)])
    try:
        yield
    finally:
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
        for unit in units:
            unit.reshard()
        if visible:
            for owner, name, param in owned:
                owner.register_parameter(name, param)


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
    if is_fsdp1(module):
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
