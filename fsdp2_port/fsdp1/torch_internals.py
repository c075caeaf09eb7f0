"""The private torch entry points fsdp2-port calls, pinned in one place.

``fully_shard_like_fsdp1`` must select, ignore, materialise and broadcast exactly what FSDP1
does, so it calls FSDP1's own machinery instead of re-implementing it. None of that machinery
is public: each entry point is listed in ``ENTRY_POINTS`` with its module, the parameters we
pass (always by keyword, so that a renamed parameter fails at the call, never binds to the
wrong argument) and the release it dates from. ``tests/test_torch_internals.py`` fails, naming
the entry point, when a torch release moves or changes one.

Importing this module imports nothing from torch: the entry points load on first call
(loading them loads FSDP1), and ``is_fsdp1_flattened`` only reads an attribute.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

#: The attribute FSDP1 sets (to True) on every ``FlatParameter`` and, with
#: ``use_orig_params=True``, on the original-parameter views it registers in their place:
#: ``torch.distributed.fsdp._common_utils.FSDP_FLATTENED`` (torch >= 1.12). Gradients are
#: not marked.
FSDP1_FLATTENED = "_fsdp_flattened"


#: The module whose ``load`` (``torch.distributed.checkpoint.load``) fills the tensors of the
#: state dict it is given in place (``state_dict_loader``, torch >= 2.2):
#: ``fsdp2_port.BF16Optimizer.state_dict`` hands it staging copies when it is the caller.
DCP_LOADER_MODULE = "torch.distributed.checkpoint.state_dict_loader"


def is_fsdp1_flattened(tensor: object) -> bool:
    """Whether ``tensor`` is an FSDP1 flat parameter or a view FSDP1 registered into one."""
    return bool(getattr(tensor, FSDP1_FLATTENED, False))


def refuse_fsdp1_tensors(tensors: Iterable[object], tool: str, instead: str) -> None:
    """TypeError if any of ``tensors`` belongs to an FSDP1-wrapped model.

    The FSDP2-side tools count a plain tensor as replicated on every rank; an FSDP1 flat
    parameter is a shard, so its norm would come out about sqrt(world) too small and differ
    from rank to rank.
    """
    if any(is_fsdp1_flattened(t) for t in tensors):
        raise TypeError(
            f"{tool} was given parameters of an FSDP1 (FullyShardedDataParallel) model: they "
            "are flat-parameter shards, not tensors it can count. Use "
            f"{instead} while the model is on FSDP1, or move the model to FSDP2 first "
            "(fsdp2_port.fully_shard_like_fsdp1)"
        )


@dataclass(frozen=True)
class EntryPoint:
    module: str
    name: str
    #: the parameters we pass, in the order torch declares them
    params: tuple[str, ...]
    since: str
    what: str


ENTRY_POINTS: dict[str, EntryPoint] = {
    "auto_wrap": EntryPoint(
        "torch.distributed.fsdp._wrap_utils",
        "_auto_wrap",
        ("root_module", "policy", "ignored_modules", "ignored_params", "root_kwargs", "fsdp_fn"),
        "2.1",
        "FSDP1's auto-wrap: runs the policy (_Policy._run_policy, or _recursive_wrap for "
        "callables) and calls fsdp_fn(module, **kwargs) children first, with each module's "
        "own kwargs (CustomPolicy overrides, mixed_precision=None for _module_classes_to_ignore)",
    ),
    "init_ignored_module_states": EntryPoint(
        "torch.distributed.fsdp._init_utils",
        "_init_ignored_module_states",
        ("state", "module", "ignored_modules", "ignored_states"),
        "2.1",
        "sets state._ignored_modules (subtrees included), state._ignored_params and "
        "state._ignored_buffer_names from FSDP1's ignored_modules / ignored_states",
    ),
    "need_to_materialize_module": EntryPoint(
        "torch.distributed.fsdp._init_utils",
        "_need_to_materialize_module",
        ("module", "ignored_params", "ignored_modules"),
        "2.1",
        "(has meta parameters or buffers, uses torchdistX deferred init) for one FSDP1 unit",
    ),
    "materialize_with_param_init_fn": EntryPoint(
        "torch.distributed.fsdp._init_utils",
        "_materialize_with_param_init_fn",
        ("root_module", "param_init_fn", "ignored_modules"),
        "2.1",
        "calls param_init_fn on the unit's modules, breadth first, stopping at ignored modules",
    ),
    "materialize_meta_module": EntryPoint(
        "torch.distributed.fsdp._init_utils",
        "_materialize_meta_module",
        ("root_module", "device_from_device_id", "ignored_modules", "device_handle"),
        "2.1",
        "to_empty + reset_parameters on the unit's modules that hold states, breadth first",
    ),
    "fused_adamw_": EntryPoint(
        "torch",
        "_fused_adamw_",
        (
            "self",
            "grads",
            "exp_avgs",
            "exp_avg_sqs",
            "max_exp_avg_sqs",
            "state_steps",
            "lr",
            "beta1",
            "beta2",
            "weight_decay",
            "eps",
            "amsgrad",
            "maximize",
        ),
        "2.0",
        "the kernel behind AdamW(fused=True), called on parts of tensors: its functional wrapper "
        "counts a step per call (a tensor cut in two would count two) and costs ~40 us a call "
        "to this op's ~5 (fsdp2_port.train.local_adamw)",
    ),
    "fused_kernel_devices": EntryPoint(
        "torch.utils._foreach_utils",
        "_get_fused_kernels_supported_devices",
        (),
        "2.2",
        "the device types torch has fused optimizer kernels for (where AdamW(fused=True) runs)",
    ),
    "sync_params_and_buffers": EntryPoint(
        "torch.distributed.utils",
        "_sync_params_and_buffers",
        ("process_group", "module_states", "broadcast_bucket_size", "src"),
        "1.13",
        "bucketed broadcast from the group's rank src, as FSDP1's sync_module_states does it",
    ),
    "rebuild_from_type_v2": EntryPoint(
        "torch._tensor",
        "_rebuild_from_type_v2",
        ("func", "new_type", "args", "state"),
        "1.13",
        "what a pickled tensor subclass (FSDP1's ShardedTensor) is rebuilt by; "
        "fsdp2_port.fsdp1.convert reads ShardedTensor state (local shards, metadata, process-group "
        "state) through it without a process group",
    ),
    "rebuild_tensor_v2": EntryPoint(
        "torch._utils",
        "_rebuild_tensor_v2",
        ("storage", "storage_offset", "size", "stride", "requires_grad", "backward_hooks"),
        "1.6",
        "what a pickled tensor is rebuilt by; fsdp2_port.fsdp1.convert reads a tensor whose "
        "storage FSDP1 had freed (a FlatParameter's unsharded views, pickled with it) as an "
        "empty one",
    ),
    "aligned_numel": EntryPoint(
        "torch.distributed.fsdp._flat_param",
        "_get_aligned_numel",
        ("unsharded_dtype",),
        "2.1",
        "the element count FSDP1 aligns each parameter to inside a flat parameter under "
        "use_orig_params=True (16 bytes); fsdp2_port.fsdp1.convert unflattens with it",
    ),
}


def load(key: str) -> Callable[..., Any]:
    """The entry point ``key``; ImportError naming it when this torch does not have it."""
    entry = ENTRY_POINTS[key]
    try:
        return getattr(importlib.import_module(entry.module), entry.name)
    except (ImportError, AttributeError) as e:
        import torch

        raise ImportError(
            f"fsdp2-port needs {entry.module}.{entry.name} ({entry.what}), which torch "
            f"{torch.__version__} does not have: fsdp2_port/torch_internals.py pins it"
        ) from e


def call(key: str, **kwargs: Any) -> Any:
    """Call the entry point ``key`` with keyword arguments only."""
    return load(key)(**kwargs)
