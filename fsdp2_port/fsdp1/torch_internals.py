"""Every private torch name fsdp2-port touches, pinned in one place.

``fully_shard_like_fsdp1`` must select, ignore, materialise and broadcast exactly what FSDP1
does without running FSDP1's code, so it reads FSDP1's policy objects and broadcasts with
torch's bucketed helper; the norm and the optimizer use torch's foreach kernels and read its
hook registries; compat reads FSDP1's flat
parameters; the checkpoint converter reads FSDP1's pickles. None of that is public. Each name
is an entry of ``ENTRY_POINTS``: the torch module that defines it, the name there, what kind
of thing it is, the parameters we pass (always by keyword where we can, so that a renamed
parameter fails at the call, never binds to the wrong argument), the release it dates from and
why we need it. Code elsewhere reaches these names only through this module (``load``,
``call``, the pinned constants and the functions below).

Two tests hold this: ``tests/test_torch_internals.py`` checks every entry against the installed
torch and fails naming the one a release moved or changed; ``tests/test_torch_boundary.py``
scans ``fsdp2_port`` and ``compat`` and fails naming the file, line and name of any private
torch use outside this module, and of any name used here but missing from the table.

Importing this module imports nothing from torch: the entry points load on first use (loading
some loads FSDP1), and the pinned attribute names are plain strings.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import chain
from typing import Any, Literal

#: ``function``: a callable we call (``params``: what we pass, in torch's order); methods are
#: ``Class.method`` and torch operators ``torch.<op>`` (checked against their schemas).
#: ``value``: a module or class attribute we read. ``constant``: a string torch defines, pinned
#: here as ``value`` so that reading it needs no import. ``attribute``: ``Class.attr``, set on
#: the instances of a torch class (checked on a real instance).
Kind = Literal["function", "value", "constant", "attribute"]


@dataclass(frozen=True)
class EntryPoint:
    module: str
    #: the attribute of ``module``: ``name`` or ``Class.name``
    name: str
    #: for functions, the parameters we pass, in the order torch declares them
    params: tuple[str, ...]
    #: the release it dates from, ``<=2.6`` where it is older than the oldest torch we support
    since: str
    what: str
    kind: Kind = "function"
    #: a ``constant``'s value
    value: str | None = None
    #: an entry used only where this other one is missing (an older release's spelling)
    only_without: str | None = None


ENTRY_POINTS: dict[str, EntryPoint] = {
    # -- FSDP1's constructor, for fully_shard_like_fsdp1 (read, never called) ----------------
    "policy_base": EntryPoint(
        "torch.distributed.fsdp.wrap",
        "_Policy",
        (),
        "2.1",
        "the base of FSDP1's policy objects: an auto_wrap_policy that is one selects its targets "
        "with _run_policy, any other is a callable asked module by module (fsdp1.units)",
        kind="value",
    ),
    "run_policy": EntryPoint(
        "torch.distributed.fsdp.wrap",
        "_Policy._run_policy",
        (),
        "2.1",
        "(root_module, ignored_modules, root_kwargs) -> {module: kwargs}: a _Policy's "
        "selection. Read to tell ModuleWrapPolicy's and CustomPolicy's (re-done in fsdp1.units) "
        "from a user's own subclass, whose method is user code and is called "
        "(policy_runner, run_policy)",
        kind="attribute",
    ),
    "module_wrap_policy_classes": EntryPoint(
        "torch.distributed.fsdp.wrap",
        "ModuleWrapPolicy._module_classes",
        (),
        "2.1",
        "the set of module classes a ModuleWrapPolicy wraps (module_wrap_policy_classes)",
        kind="attribute",
    ),
    "custom_policy_lambda_fn": EntryPoint(
        "torch.distributed.fsdp.wrap",
        "CustomPolicy._lambda_fn",
        (),
        "2.1",
        "the user's function a CustomPolicy asks about each module (custom_policy_lambda_fn)",
        kind="attribute",
    ),
    "mixed_precision_classes_to_ignore": EntryPoint(
        "torch.distributed.fsdp.api",
        "MixedPrecision._module_classes_to_ignore",
        (),
        "2.0",
        "the module classes (BatchNorm) FSDP1 makes units of their own without mixed precision "
        "when there is an auto_wrap_policy (a dataclass field; "
        "mixed_precision_classes_to_ignore)",
        kind="attribute",
    ),
    "module_wrap_policy": EntryPoint(
        "torch.distributed.fsdp.wrap",
        "_module_wrap_policy",
        (),
        "2.0",
        "FSDP1's class-based policy function: recognised in a functools.partial and evaluated "
        "by fsdp1.units, never called",
        kind="value",
    ),
    "wrap_module_cls_individually": EntryPoint(
        "torch.distributed.fsdp.wrap",
        "_wrap_module_cls_individually",
        (),
        "1.13",
        "FSDP1's policy function for mixed precision's exceptions: recognised and evaluated "
        "by fsdp1.units, never called",
        kind="value",
    ),
    "or_policy": EntryPoint(
        "torch.distributed.fsdp.wrap",
        "_or_policy",
        (),
        "1.13",
        "FSDP1's union of policy functions (functools.partial(_or_policy, policies=[...])): "
        "recognised and evaluated by fsdp1.units, each policy in turn, never called",
        kind="value",
    ),
    "composable_registry": EntryPoint(
        "torch.distributed._composable.contract",
        "_get_registry",
        ("module",),
        "2.1",
        "the composable APIs applied to a module ({name: item} or None): FSDP1 ignores the "
        "modules composable replicate was applied to (fsdp1.units.resolve_ignored)",
    ),
    "apply_to_tensors": EntryPoint(
        "torch.distributed.utils",
        "_apply_to_tensors",
        ("fn", "container"),
        "1.13",
        "fn on every tensor of nested containers, rebuilt: torch's traversal that FSDP1's and "
        "FSDP2's input casts use, for the fp32 hooks around mixed precision's exceptions",
    ),
    "sync_params_and_buffers": EntryPoint(
        "torch.distributed.utils",
        "_sync_params_and_buffers",
        ("process_group", "module_states", "broadcast_bucket_size", "src"),
        "1.13",
        "bucketed broadcast from the group's rank src, as FSDP1's sync_module_states does it",
    ),
    "hybrid_shard_zero2": EntryPoint(
        "torch.distributed.fsdp.api",
        "ShardingStrategy._HYBRID_SHARD_ZERO2",
        (),
        "2.0",
        "FSDP1's private hybrid strategy (SHARD_GRAD_OP within a node, replicas across), which "
        "fully_shard_like_fsdp1 and the compat optimizer accept like the public ones",
        kind="value",
    ),
    # -- FSDP1's layout, for compat (which FSDP1 instance owns a parameter, sharded how) -----
    "fsdp1_flattened": EntryPoint(
        "torch.distributed.fsdp._common_utils",
        "FSDP_FLATTENED",
        (),
        "<=2.6",
        "the attribute FSDP1 sets (to True) on every FlatParameter and, with "
        "use_orig_params=True, on the original-parameter views it registers in their place; "
        "gradients are not marked (is_fsdp1_flattened)",
        kind="constant",
        value="_fsdp_flattened",
    ),
    "fsdp1_handle": EntryPoint(
        "torch.distributed.fsdp.fully_sharded_data_parallel",
        "FullyShardedDataParallel._handle",
        (),
        "2.1",
        "an FSDP1 instance's FlatParamHandle, None when it manages no parameter (fsdp1_shards)",
        kind="attribute",
    ),
    "handle_reshard": EntryPoint(
        "torch.distributed.fsdp._flat_param",
        "FlatParamHandle.reshard",
        (),
        "<=2.6",
        "(free_unsharded_flat_param): points the handle's module back at its shard and, when "
        "told, frees the unsharded flat parameter: what code calls on an FSDP1 root after a "
        "forward (reshard_fsdp1_handle, for fsdp2_port.reshard)",
        kind="attribute",
    ),
    "handle_flat_param": EntryPoint(
        "torch.distributed.fsdp._flat_param",
        "FlatParamHandle.flat_param",
        (),
        "<=2.6",
        "the handle's FlatParameter: what the optimizer sees with use_orig_params=False",
        kind="attribute",
    ),
    "handle_process_group": EntryPoint(
        "torch.distributed.fsdp._flat_param",
        "FlatParamHandle.process_group",
        (),
        "<=2.6",
        "the group the handle shards its flat parameter over (the intra-node group for the "
        "hybrid strategies)",
        kind="attribute",
    ),
    "handle_uses_sharded_strategy": EntryPoint(
        "torch.distributed.fsdp._flat_param",
        "FlatParamHandle.uses_sharded_strategy",
        (),
        "<=2.6",
        "False for NO_SHARD (and a group of one rank): the flat parameter is whole on every rank",
        kind="attribute",
    ),
    "handle_use_orig_params": EntryPoint(
        "torch.distributed.fsdp._flat_param",
        "FlatParamHandle._use_orig_params",
        (),
        "<=2.6",
        "whether the handle registered original-parameter views (what the optimizer sees then)",
        kind="attribute",
    ),
    "flat_param_params": EntryPoint(
        "torch.distributed.fsdp._flat_param",
        "FlatParameter._params",
        (),
        "<=2.6",
        "the original-parameter views of a flat parameter under use_orig_params=True (None "
        "otherwise)",
        kind="attribute",
    ),
    "flat_param_shared_params": EntryPoint(
        "torch.distributed.fsdp._flat_param",
        "FlatParameter._shared_params",
        (),
        "<=2.6",
        "the views of parameters shared within the flat parameter under use_orig_params=True",
        kind="attribute",
    ),
    "fsdp1_wrapped_module": EntryPoint(
        "torch.distributed.fsdp.fully_sharded_data_parallel",
        "FullyShardedDataParallel._fsdp_wrapped_module",
        (),
        "<=2.6",
        "the module an FSDP1 instance wraps (exactly that attribute: an activation-checkpoint "
        "wrapper too); fsdp2_port.fsdp_wrapped_module keeps reading it on FSDP1 models",
        kind="attribute",
    ),
    "fsdp1_wrapped_module_name": EntryPoint(
        "torch.distributed.fsdp._common_utils",
        "FSDP_WRAPPED_MODULE",
        (),
        "<=2.6",
        "the name FSDP1 registers the wrapped module under: a component of FSDP1's raw "
        "parameter names and LOCAL state-dict keys, which convert and compat strip",
        kind="constant",
        value="_fsdp_wrapped_module",
    ),
    # -- FSDP1's checkpoints, for convert-checkpoint (fsdp2_port.fsdp1.convert, checkpoint_*) --
    "flat_param_name": EntryPoint(
        "torch.distributed.fsdp._unshard_param_utils",
        "FLAT_PARAM",
        (),
        "2.1",
        "the name of a unit's flat parameter, the last component of its LOCAL_STATE_DICT key",
        kind="constant",
        value="_flat_param",
    ),
    "rebuild_from_type_v2": EntryPoint(
        "torch._tensor",
        "_rebuild_from_type_v2",
        ("func", "new_type", "args", "state"),
        "1.13",
        "what a pickled tensor subclass (FSDP1's ShardedTensor) is rebuilt by; "
        "fsdp2_port.fsdp1.checkpoint_load reads ShardedTensor state (local shards, metadata, "
        "process-group state) through it without a process group",
    ),
    "rebuild_tensor_v2": EntryPoint(
        "torch._utils",
        "_rebuild_tensor_v2",
        ("storage", "storage_offset", "size", "stride", "requires_grad", "backward_hooks"),
        "1.6",
        "what a pickled tensor is rebuilt by; fsdp2_port.fsdp1.checkpoint_load reads a tensor "
        "whose storage FSDP1 had freed (a FlatParameter's unsharded views, pickled with it) as "
        "an empty one",
    ),
    "weights_only_globals": EntryPoint(
        "torch._weights_only_unpickler",
        "_get_allowed_globals",
        (),
        "<=2.6",
        "what torch's own weights-only loading lets a pickle build (tensors, storages, dtypes, "
        "sizes, devices, rebuild functions), by dotted name: fsdp2_port.fsdp1.checkpoint_load "
        "builds these and nothing else of a checkpoint it is not told to trust",
    ),
    "sharded_tensor": EntryPoint(
        "torch.distributed._shard.sharded_tensor.api",
        "ShardedTensor",
        (),
        "1.13",
        "FSDP1's ShardedTensor, named in its pickles: fsdp2_port.fsdp1.checkpoint_load reads its "
        "state without building one (building one needs the job's process group)",
        kind="value",
    ),
    "sharded_tensor_pg_state": EntryPoint(
        "torch.distributed._shard.sharded_tensor.api",
        "ShardedTensor.ProcessGroupState",
        (),
        "1.13",
        "the process-group state a pickled ShardedTensor carries (its local_world_size): built "
        "by fsdp2_port.fsdp1.checkpoint_load",
        kind="value",
    ),
    "sharded_tensor_shard": EntryPoint(
        "torch.distributed._shard.sharded_tensor.shard",
        "Shard",
        (),
        "1.13",
        "one local shard of a pickled ShardedTensor (its tensor and metadata): built by "
        "fsdp2_port.fsdp1.checkpoint_load",
        kind="value",
    ),
    "shard_metadata": EntryPoint(
        "torch.distributed._shard.metadata",
        "ShardMetadata",
        (),
        "1.13",
        "a shard's offsets and sizes in a pickled ShardedTensor: built by "
        "fsdp2_port.fsdp1.checkpoint_load",
        kind="value",
    ),
    "sharded_tensor_metadata": EntryPoint(
        "torch.distributed._shard.sharded_tensor.metadata",
        "ShardedTensorMetadata",
        (),
        "1.13",
        "a pickled ShardedTensor's global size: built by fsdp2_port.fsdp1.checkpoint_load",
        kind="value",
    ),
    "dcp_storage_info": EntryPoint(
        "torch.distributed.checkpoint.filesystem",
        "_StorageInfo",
        (),
        "2.2",
        "where a DCP checkpoint's metadata says each item lies in its files: built by "
        "fsdp2_port.fsdp1.checkpoint_load when it checks a DCP checkpoint's metadata",
        kind="value",
    ),
    "dcp_memory_format_encoding": EntryPoint(
        "torch.distributed.checkpoint.metadata",
        "_MEM_FORMAT_ENCODING",
        (),
        "2.2",
        "how a DCP checkpoint's metadata pickles a tensor's memory format: built by "
        "fsdp2_port.fsdp1.checkpoint_load when it checks a DCP checkpoint's metadata",
        kind="value",
    ),
    "dcp_empty_load_planner": EntryPoint(
        "torch.distributed.checkpoint.default_planner",
        "_EmptyStateDictLoadPlanner",
        (),
        "2.2",
        "the load planner that rebuilds a whole state dict from a DCP checkpoint's metadata "
        "(what format_utils.dcp_to_torch_save loads with): fsdp2_port.fsdp1.convert loads "
        "with it, each pickled item checked first",
        kind="value",
    ),
    "dcp_load_state_dict": EntryPoint(
        "torch.distributed.checkpoint.state_dict_loader",
        "_load_state_dict",
        ("state_dict", "storage_reader", "process_group", "coordinator_rank", "no_dist", "planner"),
        "2.2",
        "DCP's load without a process group (what format_utils.dcp_to_torch_save calls): "
        "fsdp2_port.fsdp1.convert reads a DCP checkpoint through it with a reader and a "
        "planner that check each pickle before torch unpickles it",
    ),
    "aligned_numel": EntryPoint(
        "torch.distributed.fsdp._flat_param",
        "_get_aligned_numel",
        ("unsharded_dtype",),
        "2.1",
        "the element count FSDP1 aligns each parameter to inside a flat parameter under "
        "use_orig_params=True (16 bytes); fsdp2_port.fsdp1.checkpoint_layout unflattens with it",
    ),
    # -- the norm rule (fsdp2_port.train.grad_norm) -----------------------------------------
    "group_tensors_by_device_and_dtype": EntryPoint(
        "torch.utils._foreach_utils",
        "_group_tensors_by_device_and_dtype",
        ("tensorlistlist",),
        "<=2.6",
        "torch's grouping of tensors by (device, dtype), in the order clip_grad_norm_ uses: "
        "the norm without a group is torch's bit for bit only in that order",
    ),
    "has_foreach_support": EntryPoint(
        "torch.utils._foreach_utils",
        "_has_foreach_support",
        ("tensors", "device"),
        "<=2.6",
        "whether torch's clip_grad_norm_ would run foreach kernels on these tensors (foreach=None)",
    ),
    "device_has_foreach_support": EntryPoint(
        "torch.utils._foreach_utils",
        "_device_has_foreach_support",
        ("device",),
        "<=2.6",
        "whether a device type has foreach kernels (foreach=True)",
    ),
    "foreach_norm": EntryPoint(
        "torch",
        "_foreach_norm",
        ("self", "ord", "dtype"),
        "<=2.6",
        "per-tensor norms in one kernel call, accumulated in dtype: the kernel behind "
        "torch.nn.utils.get_total_norm",
    ),
    "foreach_mul_": EntryPoint(
        "torch",
        "_foreach_mul_",
        ("self", "other"),
        "<=2.6",
        "in-place multiplication of a tensor list by one device tensor: the clip, no host sync",
    ),
    "device_mesh_root": EntryPoint(
        "torch.distributed.device_mesh",
        "DeviceMesh._get_root_mesh",
        ("self",),
        ">2.6 (probed: fsdp2_port.versions.mesh_knows_its_root)",
        "the mesh a DeviceMesh was sliced from (itself if none): how many copies of a "
        "DTensor's piece the ranks outside its mesh hold (root_mesh)",
    ),
    "mesh_resources": EntryPoint(
        "torch.distributed.device_mesh",
        "_mesh_resources",
        (),
        "<=2.6",
        "torch's mesh environment, whose get_root_mesh(mesh) is the root mesh where DeviceMesh "
        "has no _get_root_mesh (newer releases warn that it is deprecated; "
        "root_mesh_from_environment)",
        kind="value",
        only_without="device_mesh_root",
    ),
    # -- the optimizers (fsdp2_port.train.local_adamw, master_weights, lr_schedules) ---------
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
    "foreach_add_": EntryPoint(
        "torch",
        "_foreach_add_",
        ("self", "scalar"),
        "<=2.6",
        "adds 1 to the step tensors of a fused group at once, as AdamW(fused=True) does",
    ),
    "foreach_copy_": EntryPoint(
        "torch",
        "_foreach_copy_",
        ("self", "src"),
        "<=2.6",
        "one batched copy: gradients cast to fp32, masters written back to the parameters",
    ),
    "global_optimizer_pre_hooks": EntryPoint(
        "torch.optim.optimizer",
        "_global_optimizer_pre_hooks",
        (),
        "2.0",
        "the step pre-hooks registered for every optimizer (register_optimizer_step_pre_hook): "
        "local_adamw.update would skip them, so it stands aside (optimizer_has_step_hooks)",
        kind="value",
    ),
    "global_optimizer_post_hooks": EntryPoint(
        "torch.optim.optimizer",
        "_global_optimizer_post_hooks",
        (),
        "2.0",
        "the step post-hooks registered for every optimizer (register_optimizer_step_post_hook)",
        kind="value",
    ),
    "optimizer_step_pre_hooks": EntryPoint(
        "torch.optim.optimizer",
        "Optimizer._optimizer_step_pre_hooks",
        (),
        "2.0",
        "one optimizer's step pre-hooks (Optimizer.register_step_pre_hook)",
        kind="attribute",
    ),
    "optimizer_step_post_hooks": EntryPoint(
        "torch.optim.optimizer",
        "Optimizer._optimizer_step_post_hooks",
        (),
        "2.0",
        "one optimizer's step post-hooks (Optimizer.register_step_post_hook)",
        kind="attribute",
    ),
    "scheduler_step_count": EntryPoint(
        "torch.optim.lr_scheduler",
        "LRScheduler._step_count",
        (),
        "<=2.6",
        "the steps a scheduler took (torch warns when it steps before its optimizer); "
        "WarmupLR counts the steps it hands to its after-scheduler (count_scheduler_step)",
        kind="attribute",
    ),
    # -- the grad scaler (fsdp2_port.train.grad_scaler) --------------------------------------
    "grad_scaler_unscale_grads": EntryPoint(
        "torch.amp.grad_scaler",
        "GradScaler._unscale_grads_",
        ("self", "optimizer", "inv_scale", "found_inf", "allow_fp16"),
        "<=2.6",
        "unscales an optimizer's gradients and returns their inf/NaN flags, one per device; "
        "torch calls it from unscale_ (so from step) and for optimizers that unscale "
        "themselves (fused AdamW). fsdp2_port.GradScaler overrides it (override_unscale_grads) "
        "to make the flags one verdict for the whole process group",
    ),
    "scheduler_last_lr": EntryPoint(
        "torch.optim.lr_scheduler",
        "LRScheduler._last_lr",
        (),
        "<=2.6",
        "what get_last_lr() returns; WarmupLR sets it to its after-scheduler's "
        "(set_scheduler_last_lr)",
        kind="attribute",
    ),
}


def _pinned(key: str) -> str:
    value = ENTRY_POINTS[key].value
    assert value is not None, key
    return value


#: ``FSDP_FLATTENED``: the attribute FSDP1 sets on its flat parameters and their views.
FSDP1_FLATTENED = _pinned("fsdp1_flattened")
#: ``FSDP_WRAPPED_MODULE``: the name FSDP1 registers the wrapped module under.
FSDP1_WRAPPED_MODULE = _pinned("fsdp1_wrapped_module_name")
#: ``FLAT_PARAM``: the name of a unit's flat parameter in FSDP1's module and state dict.
FSDP1_FLAT_PARAM = _pinned("flat_param_name")

#: The module whose ``load`` (``torch.distributed.checkpoint.load``) fills the tensors of the
#: state dict it is given in place (``state_dict_loader``, torch >= 2.2; public):
#: ``fsdp2_port.BF16Optimizer.state_dict`` hands it staging copies when it is the caller.
DCP_LOADER_MODULE = "torch.distributed.checkpoint.state_dict_loader"


def load(key: str) -> Any:
    """The entry point ``key``; ImportError naming it when this torch does not have it.

    ``attribute`` entries live on instances: read them with the functions below.
    """
    entry = ENTRY_POINTS[key]
    if entry.kind == "attribute":
        raise TypeError(f"{key} is an attribute of {entry.name.split('.')[0]} instances")
    try:
        found: Any = importlib.import_module(entry.module)
        for part in entry.name.split("."):
            found = getattr(found, part)
        return found
    except (ImportError, AttributeError) as e:
        raise ImportError(
            f"fsdp2-port needs {entry.module}.{entry.name} ({entry.what}), which torch "
            f"{_installed_torch()} does not have: fsdp2_port/fsdp1/torch_internals.py pins it"
        ) from e


def _installed_torch() -> str:
    import torch

    return str(torch.__version__)  # for the message only; releases are compared in versions


def call(key: str, **kwargs: Any) -> Any:
    """Call the entry point ``key`` with keyword arguments only."""
    function: Callable[..., Any] = load(key)
    return function(**kwargs)


def has(key: str) -> bool:
    """Whether the installed torch has the entry point ``key`` (not for ``attribute`` ones)."""
    try:
        load(key)
    except ImportError:
        return False
    return True


# -- FSDP1 ---------------------------------------------------------------------------------------


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


def policy_runner(policy_class: Any) -> Any:
    """The ``_run_policy`` function a ``_Policy`` class defines or inherits (compared, by
    ``fsdp1.units``, with ModuleWrapPolicy's and CustomPolicy's; not called)."""
    return policy_class._run_policy


def run_policy(policy: Any, **kwargs: Any) -> Any:
    """``policy._run_policy(root_module=, ignored_modules=, root_kwargs=)`` for a ``_Policy``
    whose method is the user's own (FSDP1 calls it so)."""
    return policy._run_policy(**kwargs)


def module_wrap_policy_classes(policy: Any) -> Any:
    """The module classes a ``ModuleWrapPolicy`` wraps."""
    return policy._module_classes


def custom_policy_lambda_fn(policy: Any) -> Any:
    """The user's ``lambda_fn`` of a ``CustomPolicy``."""
    return policy._lambda_fn


def mixed_precision_classes_to_ignore(mixed_precision: Any) -> Any:
    """``MixedPrecision._module_classes_to_ignore``: the classes run without mixed precision."""
    return mixed_precision._module_classes_to_ignore


def fsdp1_shards(state: Any) -> tuple[Any, Any, list[Any]] | None:
    """For an FSDP1 instance: its flat parameter, the group that shards it (None: whole on
    every rank, NO_SHARD) and the original-parameter views it registered in its place
    (``use_orig_params=True``; none otherwise). None when the instance manages no parameter."""
    handle = state._handle
    if handle is None:
        return None
    group = handle.process_group if handle.uses_sharded_strategy else None
    flat = handle.flat_param
    views: list[Any] = []
    if handle._use_orig_params:
        views = list(chain(flat._params or (), flat._shared_params or ()))
    return flat, group, views


def reshard_fsdp1_handle(state: Any, free_unsharded_flat_param: bool) -> None:
    """``state._handle.reshard(free_unsharded_flat_param)`` on an FSDP1 instance, as user code
    wrote it (AttributeError when it manages no parameter, as there)."""
    state._handle.reshard(free_unsharded_flat_param)


def fsdp1_wrapped_module(module: Any) -> Any:
    """``module._fsdp_wrapped_module``: an FSDP1 instance's wrapped module (AttributeError on
    anything that has no such attribute, as reading it always gave)."""
    return module._fsdp_wrapped_module


def without_fsdp1_wrappers(fqn: str) -> str:
    """A parameter or module name as FSDP1 writes FQNs: its wrapper components left out."""
    return fqn.replace(FSDP1_WRAPPED_MODULE + ".", "").replace(FSDP1_WRAPPED_MODULE, "").strip(".")


# -- meshes --------------------------------------------------------------------------------------


def root_mesh(mesh: Any) -> Any:
    """The mesh ``mesh`` was sliced from (itself if none), where the mesh knows it
    (``fsdp2_port.versions.mesh_knows_its_root``)."""
    return mesh._get_root_mesh()


def root_mesh_from_environment(mesh: Any) -> Any:
    """``root_mesh`` on a torch whose meshes do not know their root: torch's mesh environment."""
    return load("mesh_resources").get_root_mesh(mesh)


# -- optimizers and schedulers -------------------------------------------------------------------


def optimizer_has_step_hooks(optimizer: Any) -> bool:
    """Whether a step hook would run around ``optimizer.step()``: its own or every optimizer's."""
    return bool(
        optimizer._optimizer_step_pre_hooks
        or optimizer._optimizer_step_post_hooks
        or load("global_optimizer_pre_hooks")
        or load("global_optimizer_post_hooks")
    )


def count_scheduler_step(scheduler: Any) -> None:
    """One more step on ``scheduler``'s count, as ``LRScheduler.step`` keeps it."""
    scheduler._step_count += 1


def set_scheduler_step_count(state_dict: dict[str, Any], count: int) -> None:
    """The step count a scheduler's state dict restores (``LRScheduler._step_count``)."""
    state_dict["_step_count"] = count


def set_scheduler_last_lr(scheduler: Any, last_lr: list[Any]) -> None:
    """What ``scheduler.get_last_lr()`` returns from now on."""
    scheduler._last_lr = last_lr


# -- the grad scaler -----------------------------------------------------------------------------


def override_unscale_grads(
    scaler_class: type,
    verdict: Callable[[Any, dict[Any, Any], Any], dict[Any, Any]],
) -> None:
    """``GradScaler._unscale_grads_`` on ``scaler_class`` (a ``torch.amp.GradScaler``
    subclass): torch's, with fp16 gradients allowed (``ShardedGradScaler`` allows them; plain
    ``GradScaler.unscale_`` refuses them), then ``verdict(scaler, flags, found_inf)`` on the
    per-device inf/NaN flags it returns; what ``verdict`` returns takes their place.
    ``found_inf`` is the zero flag torch made for the call, on the scale's device."""
    unscale_grads = load("grad_scaler_unscale_grads")

    def _unscale_grads_(
        self: Any, optimizer: Any, inv_scale: Any, found_inf: Any, allow_fp16: bool = True
    ) -> dict[Any, Any]:
        flags = unscale_grads(
            self=self,
            optimizer=optimizer,
            inv_scale=inv_scale,
            found_inf=found_inf,
            allow_fp16=True,
        )
        return verdict(self, flags, found_inf)

    scaler_class._unscale_grads_ = _unscale_grads_  # type: ignore[attr-defined]
