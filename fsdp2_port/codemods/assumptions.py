"""Every list of names the codemod decides by, in one place, as data.

Each entry has a ``name``, a ``kind`` and a one-line ``why``. A kind in ``FACTS`` says what an
API is called (torch's FSDP1 and FSDP2, other torch, Python, ``fsdp2_port``, a library, Python
packaging): a name there is matched where the program's imports resolve to that API. Any other
kind is an assumption: a decision taken on a name (a method name on a receiver of unknown type,
a word in an identifier, a CamelCase spelling: ``GUESSES``) instead of on what the program
does; each use of one goes through ``assumed`` (recorded, refused by ``--strict``).

The audit keeps its own lists (``AUDIT_*``, written out from torch's modules and checked against
them by ``tests/codemods/test_audit_torch.py``), so that a wrong list of the codemod's does not
hide in the audit too; FSDP1's attributes are one list for both. A leaf: it imports no codemod.
"""

from __future__ import annotations

from fsdp2_port.codemods.name_lists import NameGuess, NameList, NameTable, words

__all__ = [
    "ASSUMPTIONS",
    "ENTRIES",
    "FACTS",
    "GUESSES",
    "KINDS",
    "NameGuess",
    "NameList",
    "NameTable",
    "words",
]

#: The kinds of facts: names an API has.
FACTS = {
    "fsdp1-api": "names of torch's FSDP1 API (torch.distributed.fsdp, FullyShardedDataParallel)",
    "fsdp2-api": "names of torch's FSDP2 API (fully_shard, FSDPModule and its policies)",
    "torch-api": "names of torch's other APIs (DDP, DCP, devices, dtypes)",
    "python": "names of Python's builtins",
    "fsdp2_port-api": "names of this project's runtime API",
    "library-api": "names of a library's API (SpecForge, TransformerEngine)",
    "packaging": "names of Python packaging files",
}
#: The kinds of assumptions: decisions on a name rather than on what the program does.
ASSUMPTIONS = {
    "model-name": "an identifier naming a model (a word in it)",
    "optimizer-name": "an identifier naming an optimizer (a word in it)",
    "settings-name": "an identifier naming settings, not a model (a word in it)",
    "returns-self": "a method that returns the object it is called on",
    "unsharding-method": "a module method that never shards the module",
    "builder-name": "a class method that builds a new model",
    "class-name": "a CamelCase name that is a class: calling it builds a new object",
    "safe-module": "calls into a module that never take a state dict from a model",
    "safe-method": "a method that never takes a state dict from a model",
    "logger-method": "a method that only shows its arguments",
    "module-walk": "a module method walks its parts, with no effect",
    "dict-method": "a method that adds or removes a dict's keys",
    "string-method": "a method that edits a string",
    "shape-attribute": "an attribute or method that reads a tensor's shape",
    "parameter-method": "a method that gives a model's parameters",
    "parameter-access": "a name through which a tensor may be a model's parameter",
    "norm-method": "a call that turns tensors into (a piece of) their norm",
    "dtensor-method": "a method only a DTensor has",
    "config-file": "a file whose text may name a function a program calls",
    "skipped-dir": "a folder that holds no code of the user's to migrate",
    "rank-name": "a name for the process's rank: a test of it lets only some ranks through",
}
KINDS = {**FACTS, **ASSUMPTIONS}

# -- torch's FSDP1 --------------------------------------------------------------------------------

FSDP1_MODULES = NameList(
    "fsdp1-modules",
    "fsdp1-api",
    "the public modules of torch.distributed.fsdp whose FSDP1 names the package re-exports",
    ("fully_sharded_data_parallel", "api", "wrap", "sharded_grad_scaler"),
)
FSDP1_ENUMS = NameList(
    "fsdp1-enums",
    "fsdp1-api",
    "FSDP1's enums: their members are values",
    ("ShardingStrategy", "BackwardPrefetch", "StateDictType", "OptimStateKeyType"),
)
FSDP1_VALUE_CLASSES = NameList(
    "fsdp1-value-classes",
    "fsdp1-api",
    "FSDP1's configuration and policy classes: calling one builds a value",
    words(
        "MixedPrecision CPUOffload StateDictConfig FullStateDictConfig ShardedStateDictConfig "
        "LocalStateDictConfig OptimStateDictConfig FullOptimStateDictConfig "
        "ShardedOptimStateDictConfig LocalOptimStateDictConfig ModuleWrapPolicy CustomPolicy"
    ),
)
FSDP1_WRAP_POLICY_FUNCTIONS = NameList(
    "fsdp1-wrap-policy-functions",
    "fsdp1-api",
    "FSDP1's public wrap-policy functions (functools.partial of one is a policy)",
    words(
        "transformer_auto_wrap_policy size_based_auto_wrap_policy lambda_auto_wrap_policy "
        "always_wrap_policy"
    ),
)
FSDP1_SETTINGS_CLASSES = NameList(
    "fsdp1-settings-classes",
    "fsdp1-api",
    "FSDP1's configuration values besides its enums, value classes and policies",
    ("StateDictSettings",),
)
FSDP1_NOT_CONFIGURATION = NameList(
    "fsdp1-not-configuration",
    "fsdp1-api",
    "FSDP1's public names that are no configuration values: the wrapper, its flat parameter, "
    "its grad scaler and the enable_wrap/wrap context API",
    ("FullyShardedDataParallel", "FlatParameter", "ShardedGradScaler", "enable_wrap", "wrap"),
)
FSDP1_CONTEXT_WRAPPING = NameList(
    "fsdp1-context-wrapping",
    "fsdp1-api",
    "FSDP1's enable_wrap/wrap context API (public names, but no configuration values)",
    ("enable_wrap", "wrap"),
)
FSDP1_PRIVATE_CONFIGURATION = NameList(
    "fsdp1-private-configuration",
    "fsdp1-api",
    "FSDP1's private policy combinators that users import and pass as configuration values",
    ("_or_policy", "_module_wrap_policy"),
)
FSDP1_POLICY_HELPERS = NameList(
    "fsdp1-policy-helpers",
    "fsdp1-api",
    "FSDP1's private wrap-policy functions users import (functools.partial of one is a policy)",
    ("_or_policy", "_module_wrap_policy", "_wrap_module_cls_individually"),
)
FSDP1_MIXED_PRECISION_FIELDS = NameList(
    "fsdp1-mixed-precision-fields",
    "fsdp1-api",
    "MixedPrecision's fields, in order (its arguments by position)",
    words(
        """
        param_dtype reduce_dtype buffer_dtype keep_low_precision_grads cast_forward_inputs
        cast_root_forward_inputs _module_classes_to_ignore
        """
    ),
)
FSDP1_CPU_OFFLOAD_FIELDS = NameList(
    "fsdp1-cpu-offload-fields", "fsdp1-api", "CPUOffload's fields, in order", ("offload_params",)
)
FSDP1_REQUIRED_POLICY_ARGUMENT = NameTable(
    "fsdp1-required-policy-argument",
    "fsdp1-api",
    "wrap-policy functions with an argument of their own that has no default (a policy that "
    "lacks it raises TypeError on its first call)",
    {
        "transformer_auto_wrap_policy": "transformer_layer_cls",
        "lambda_auto_wrap_policy": "lambda_fn",
    },
)
FSDP1_POLICY_RESULTS = NameTable(
    "fsdp1-policy-results",
    "fsdp1-api",
    "what FSDP1's policies that take an argument of their own return, on it",
    {
        "transformer_auto_wrap_policy": "isinstance(module, tuple(transformer_layer_cls))",
        "lambda_auto_wrap_policy": "lambda_fn(module)",
    },
)
FSDP1_SIZE_POLICY_ARGUMENTS = NameList(
    "fsdp1-size-policy-arguments",
    "fsdp1-api",
    "size_based_auto_wrap_policy's own arguments (fsdp2_port.size_based_policy's too)",
    ("min_num_params", "force_leaf_modules", "exclude_wrap_modules"),
)
FSDP1_POLICY_CALL_ARGUMENTS = NameList(
    "fsdp1-policy-call-arguments",
    "fsdp1-api",
    "what FSDP1 passes a wrap policy by keyword on every call, in order",
    ("module", "recurse", "nonwrapped_numel"),
)
FSDP1_PARAMETERS = NameList(
    "fsdp1-parameters",
    "fsdp1-api",
    "FullyShardedDataParallel.__init__'s parameters, in positional order",
    words(
        """
        module process_group sharding_strategy cpu_offload auto_wrap_policy backward_prefetch
        mixed_precision ignored_modules param_init_fn device_id sync_module_states
        forward_prefetch limit_all_gathers use_orig_params ignored_states device_mesh
        """
    ),
)
FSDP1_NO_EFFECT_ARGUMENTS = NameList(
    "fsdp1-no-effect-arguments",
    "fsdp1-api",
    "FSDP1 arguments with no effect on the numbers, which FSDP2 does not have",
    ("limit_all_gathers", "use_orig_params", "forward_prefetch", "backward_prefetch"),
)
FSDP1_RESHARD_AFTER_FORWARD = NameTable(
    "fsdp1-reshard-after-forward",
    "fsdp1-api",
    "FSDP2's reshard_after_forward for each FSDP1 sharding strategy",
    {
        "FULL_SHARD": True,
        "SHARD_GRAD_OP": False,
        "HYBRID_SHARD": True,
        "_HYBRID_SHARD_ZERO2": False,
        "NO_SHARD": False,
    },
)
FSDP1_OWN_MESH_STRATEGIES = NameList(
    "fsdp1-own-mesh-strategies",
    "fsdp1-api",
    "FSDP1 sharding strategies whose mesh is not the default one",
    ("HYBRID_SHARD", "_HYBRID_SHARD_ZERO2", "NO_SHARD"),
)
FSDP1_TORCH_MESH_STRATEGIES = NameList(
    "fsdp1-torch-mesh-strategies",
    "fsdp1-api",
    "FSDP1 sharding strategies whose mesh plain torch builds as FSDP1 did (the hybrids' default "
    "groups are one node's devices, read at run time)",
    ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD"),
)
FSDP1_STATE_DICT_TYPE_PARAMETERS = NameList(
    "fsdp1-state-dict-type-parameters",
    "fsdp1-api",
    "FSDP.state_dict_type's parameters, in positional order",
    ("module", "state_dict_type", "state_dict_config", "optim_state_dict_config"),
)
FSDP1_TO_LOAD_PARAMETERS = NameList(
    "fsdp1-to-load-parameters",
    "fsdp1-api",
    "FSDP.optim_state_dict_to_load's parameters, in positional order",
    ("model", "optim", "optim_state_dict"),
)
FSDP1_STATIC_APIS = NameTable(
    "fsdp1-static-apis",
    "fsdp1-api",
    "FSDP1's static APIs no other rule handles, with what to do instead",
    {
        "summon_full_params": "summon_full_params: FSDP2 parameters are DTensors; read "
        "p.full_tensor(), or unshard()/reshard() the FSDPModule (note: in the compute dtype)",
        "fsdp_modules": "FSDP.fsdp_modules(m): use "
        "[x for x in m.modules() if isinstance(x, FSDPModule)]",
        "full_optim_state_dict": "full_optim_state_dict: use get_optimizer_state_dict(model, "
        "optim, options=StateDictOptions(full_state_dict=True, cpu_offload=True))",
        "sharded_optim_state_dict": "sharded_optim_state_dict: use "
        "get_optimizer_state_dict(model, optim)",
        "scatter_full_optim_state_dict": "scatter_full_optim_state_dict: use "
        "set_optimizer_state_dict(model, optim, osd, options=StateDictOptions("
        "full_state_dict=True, broadcast_from_rank0=True))",
        "shard_full_optim_state_dict": "shard_full_optim_state_dict: use set_optimizer_state_dict("
        "model, optim, osd, options=StateDictOptions(full_state_dict=True))",
        "flatten_sharded_optim_state_dict": "flatten_sharded_optim_state_dict: use "
        "set_optimizer_state_dict(model, optim, osd)",
        "rekey_optim_state_dict": "rekey_optim_state_dict: FSDP2 optimizer state is keyed by "
        "parameter name in get_/set_optimizer_state_dict",
    },
)
FSDP1_ONLY_ATTRIBUTES = NameList(
    "fsdp1-only-attributes",
    "fsdp1-api",
    "attributes an FSDP1 instance or its flat-parameter handle has (in torch 2.13, or before "
    "2.1: _handles, _fsdp_handles) and an FSDP2 module has not",
    words(
        "_handle _handles _all_handles _fsdp_handles check_is_root _is_root _use_orig_params "
        "_exec_order_data flat_param summon_full_params _fsdp_wrapped_module _flat_param"
    ),
)
FSDP1_HANDLE_ATTRIBUTES = NameList(
    "fsdp1-handle-attributes",
    "fsdp1-api",
    "those of a flat-parameter handle, which an FSDP1 module has not (its _handle has)",
    ("flat_param",),
)
FSDP1_SHARED_ATTRIBUTES = NameList(
    "fsdp1-shared-attributes",
    "fsdp1-api",
    "FSDP1 attributes whose names other objects have too (a config's mixed_precision, a DDP "
    "model's process_group)",
    words(
        "_sync_gradients sharding_strategy process_group params _reshard _unshard _lazy_init "
        "compute_device mixed_precision cpu_offload register_comm_hook _has_params "
        "training_state rank world_size"
    ),
)
FSDP1_VALUE_ATTRIBUTES = NameTable(
    "fsdp1-value-attributes",
    "fsdp1-api",
    "what FSDP1's value of a shared attribute has (a read of anything else shows another object)",
    {
        "params": frozenset(dir(list)),  # its flat parameters
        "mixed_precision": FSDP1_MIXED_PRECISION_FIELDS.members,
        "sharding_strategy": frozenset({"name", "value"}),
        "training_state": frozenset({"name", "value"}),
        "cpu_offload": FSDP1_CPU_OFFLOAD_FIELDS.members,
        "compute_device": frozenset({"type", "index"}),
    },
)
FSDP1_WRAPPED_ATTRIBUTES = NameTable(
    "fsdp1-wrapped-attributes",
    "fsdp1-api",
    "attributes that read a wrapper's module, with fsdp2_port's form right on any receiver",
    {"module": "unwrapped", "_fsdp_wrapped_module": "fsdp_wrapped_module"},
)
FSDP1_ATTRIBUTES_IN_STRINGS = NameList(
    "fsdp1-attributes-in-strings",
    "fsdp1-api",
    "FSDP1 attributes whose names in a string (a parameter's name) show FSDP1's layout",
    ("_fsdp_wrapped_module", "_flat_param"),
)

# -- torch's FSDP2 and other APIs -----------------------------------------------------------------

FSDP2_MODULES = NameList(
    "fsdp2-modules",
    "fsdp2-api",
    "the modules FSDP2's names live in (torch 2.6+, and the _composable path before it)",
    words(
        """
        torch.distributed.fsdp. torch.distributed._composable.fsdp.
        torch.distributed.fsdp._fully_shard.
        """
    ),
)
FSDP2_NAMES = NameList(
    "fsdp2-names",
    "fsdp2-api",
    "FSDP2's public names",
    ("fully_shard", "FSDPModule", "MixedPrecisionPolicy", "CPUOffloadPolicy", "OffloadPolicy"),
)
MODULE_LOADERS = NameList(
    "module-loaders",
    "python",
    "functions that import a module named by a string (importlib's, the builtin)",
    ("import_module", "__import__"),
)
FILE_RUNNERS = NameList(
    "file-runners",
    "python",
    "functions that run or load a module found by a path or a name computed at run time",
    ("run_path", "run_module", "spec_from_file_location"),
)
COLLECTIVES = NameList(
    "collectives",
    "torch-api",
    "torch.distributed's collectives that combine or copy a tensor across ranks",
    tuple(
        f"torch.distributed.{name}"
        for name in words(
            "all_reduce all_reduce_coalesced reduce reduce_scatter reduce_scatter_tensor "
            "all_gather all_gather_into_tensor broadcast"
        )
    ),
)
COLLECTIVE_TENSOR_KEYWORDS = NameList(
    "collective-tensor-keywords",
    "torch-api",
    "the keywords of torch.distributed's collectives that take tensors (not group, op...)",
    words(
        "tensor tensors tensor_list output input input_list output_tensor input_tensor "
        "output_tensor_list"
    ),
)
STORAGE_METHODS = NameList(
    "storage-methods",
    "torch-api",
    "a tensor's methods that read its storage (FSDP1's flat parameters share one)",
    ("untyped_storage", "storage", "data_ptr"),
)
CONTAINER_BUILTINS = NameList(
    "container-builtins",
    "python",
    "builtins whose result holds the elements of what they are given",
    words("list tuple sorted reversed enumerate zip filter iter next dict set frozenset"),
)
NO_MODEL_BUILTINS = NameList(
    "no-model-builtins",
    "python",
    "builtins whose result is never a model (a number, a string, a type, a new container)",
    tuple(
        f"builtins.{name}"
        for name in words(
            "len int float str bool isinstance issubclass hasattr repr hash id abs round print "
            "range type dict set frozenset format"
        )
    ),
)
NOT_FSDP_WRAPPERS = NameList(
    "not-fsdp-wrappers",
    "torch-api",
    "wrappers whose instances are never FSDP models (DDP, DataParallel), by every path",
    words(
        "torch.nn.parallel.DistributedDataParallel "
        "torch.nn.parallel.distributed.DistributedDataParallel torch.nn.DataParallel "
        "torch.nn.parallel.DataParallel torch.nn.parallel.data_parallel.DataParallel"
    ),
)
OTHER_WRAPPERS = NameList(
    "other-wrappers",
    "torch-api",
    "wrappers whose .module is theirs, not FSDP1's (F2P010 leaves a receiver bound only to them)",
    words(
        "torch.nn.parallel.DistributedDataParallel "
        "torch.nn.parallel.distributed.DistributedDataParallel torch.nn.DataParallel "
        "torch.nn.parallel.DataParallel"
    ),
)
DCP_LOADS = NameList(
    "dcp-loads",
    "torch-api",
    "torch.distributed.checkpoint's load functions",
    words(
        "torch.distributed.checkpoint.load torch.distributed.checkpoint.load_state_dict "
        "torch.distributed.checkpoint.state_dict_loader.load"
    ),
)
FSDP1_CHECKPOINT_FUNCTIONS = NameList(
    "fsdp1-checkpoint-functions",
    "torch-api",
    "DCP functions that read FSDP1's sharded layout (ShardedTensor optimizer state)",
    words(
        """
        torch.distributed.checkpoint.optimizer.load_sharded_optimizer_state_dict
        torch.distributed.checkpoint.load_sharded_optimizer_state_dict
        """
    ),
)
DEVICE_FUNCTIONS = NameList(
    "device-functions",
    "torch-api",
    "torch functions that give a device",
    ("torch.device", "torch.cuda.current_device", "torch.accelerator.current_device_index"),
)
DTYPE_NAMES = NameList(
    "dtype-names",
    "torch-api",
    "torch's floating-point dtypes, as torch.<name>",
    ("float32", "float16", "bfloat16", "float64", "float", "half", "double"),
)
TYPE_TESTS = NameList(
    "type-tests",
    "python",
    "Python's type tests",
    ("builtins.isinstance", "builtins.issubclass"),
)
TYPE_ASSERTIONS = NameList(
    "type-assertions",
    "python",
    "unittest's type assertions, which test their second argument as isinstance does",
    ("assertIsInstance", "assertNotIsInstance"),
)
DYNAMIC_SCOPE_CALLS = NameList(
    "dynamic-scope-calls",
    "python",
    "builtins that read or change a scope's names without naming them",
    ("locals", "vars", "globals", "eval", "exec"),
)
GLOBAL_SCOPE_CALLS = NameList(
    "global-scope-calls",
    "python",
    "those of the dynamic-scope builtins that reach the module's names from anywhere",
    ("globals", "eval", "exec"),
)
REFLECTION_CALLS = NameList(
    "reflection-calls",
    "python",
    "builtins that read or write an object's attributes by a computed name",
    ("getattr", "setattr", "delattr", "hasattr", "vars"),
)
PACKAGING_FILES = NameList(
    "packaging-files",
    "packaging",
    "the files where console scripts name the functions they call",
    ("pyproject.toml", "setup.cfg", "setup.py"),
)

# -- fsdp2_port and libraries ---------------------------------------------------------------------

BRIDGE = NameList(
    "bridge",
    "fsdp2_port-api",
    "fsdp2_port's FSDP2 builder with FSDP1's arguments, by the paths the analysis resolves",
    ("fsdp2_port.fully_shard_like_fsdp1", "fsdp2_port.fsdp1.like_fsdp1.fully_shard_like_fsdp1"),
)
EITHER_STATIC_APIS = NameList(
    "either-static-apis",
    "fsdp2_port-api",
    "FSDP1's static APIs fsdp2_port gives with FSDP1's signature, right on any model",
    words(
        """
        summon_full_params fsdp_modules full_optim_state_dict sharded_optim_state_dict
        scatter_full_optim_state_dict shard_full_optim_state_dict
        """
    ),
)
FSDP1_BF16_OPTIMIZER_MODULES = NameList(
    "fsdp1-bf16-optimizer-modules",
    "library-api",
    "the modules of the FSDP1 BF16 master-weight optimizers (SpecForge's, and compat's)",
    words(
        """
        specforge.optimizer specforge.optimizer.bf16_optimizer fsdp2_port.compat
        fsdp2_port.compat.bf16_optimizer
        """
    ),
)
FSDP2_BF16_OPTIMIZER_MODULES = NameList(
    "fsdp2-bf16-optimizer-modules",
    "fsdp2_port-api",
    "the modules of fsdp2_port's BF16 master-weight optimizer",
    ("fsdp2_port", "fsdp2_port.train.bf16_optimizer"),
)
BF16_OPTIMIZERS = NameList(
    "bf16-optimizers",
    "library-api",
    "the BF16 master-weight optimizer classes whose step() returns the gradient norm",
    tuple(
        f"{module}.BF16Optimizer"
        for module in (*FSDP1_BF16_OPTIMIZER_MODULES, *FSDP2_BF16_OPTIMIZER_MODULES)
    ),
)
FSDP1_ONLY_LIBRARIES = NameTable(
    "fsdp1-only-libraries",
    "library-api",
    "library entry points that accept only FSDP1 models, with what to do instead",
    {
        "transformer_engine.pytorch.distributed.prepare_te_modules_for_fsdp": (
            "TransformerEngine's prepare_te_modules_for_fsdp accepts only FSDP1 models (it reads "
            "FSDP1's flat parameters); with FSDP2, TransformerEngine's own FSDP2 support applies"
        ),
        "transformer_engine.pytorch.prepare_te_modules_for_fsdp": (
            "TransformerEngine's prepare_te_modules_for_fsdp accepts only FSDP1 models (it reads "
            "FSDP1's flat parameters); with FSDP2, TransformerEngine's own FSDP2 support applies"
        ),
    },
)

# -- assumptions ----------------------------------------------------------------------------------

MODEL_WORDS = NameList(
    "model-words",
    "model-name",
    "words that name a model in an identifier (a substring of its last part)",
    ("model", "module", "policy", "actor", "critic", "wrapped", "net"),
)
OPTIMIZER_WORDS = NameList("optimizer-words", "optimizer-name", "optimizer words", ("optim",))
SETTINGS_WORDS = NameList(
    "settings-words",
    "settings-name",
    "words that name settings rather than a model (a train state such as Flax's unet_state, a "
    "checkpoint's model_state)",
    words(
        """
        config cfg conf args opts options settings kwargs plugin strategy state
        """
    ),
)
RANK_WORDS = NameList(
    "rank-words",
    "rank-name",
    "names of the rank (`if rank == 0`, `if accelerator.is_main_process`): only some pass",
    words(
        "get_rank rank local_rank global_rank rank_zero is_rank_zero is_master main_process "
        "is_main_process is_local_main_process"
    ),
)
RETURNS_SELF = NameList(
    "returns-self",
    "returns-self",
    "module methods that return the module they are called on",
    ("to", "cuda", "cpu", "train", "eval", "requires_grad_", "to_empty"),
)
UNSHARDING_METHODS = NameList(
    "unsharding-methods",
    "unsharding-method",
    "module methods, besides those that return the module, that never shard it",
    words(
        """
        half float double bfloat16 state_dict load_state_dict parameters named_parameters
        modules named_modules register_to_config register_buffer register_parameter
        resize_token_embeddings gradient_checkpointing_enable tie_weights zero_grad
        set_attn_processor enable_xformers_memory_efficient_attention
        """
    ),
)
BUILDERS = NameList(
    "builders",
    "builder-name",
    "class methods that build a new model (Hugging Face's, diffusers')",
    ("from_pretrained", "from_config"),
)
SAFE_MODULES = NameList(
    "safe-modules",
    "safe-module",
    "module prefixes whose functions take no state dict from a model",
    words(
        "builtins. torch. os. json. logging. time. math. pathlib. shutil. pickle. io. gc. "
        "warnings. copy. collections. numpy. safetensors."
    ),
)
SAFE_METHODS = NameList(
    "safe-methods",
    "safe-method",
    "methods that take no state dict from a module, whatever object they are called on",
    words(
        """
        info debug warning warn error exception critical print format join items keys values
        update get pop append extend copy cpu to clone detach item numel replace startswith
        endswith split write mkdir exists barrier get_rank get_world_size setdefault tolist
        float half bfloat16 contiguous is_dir joinpath open close flush synchronize
        """
    ),
)
LOG_METHODS = NameList(
    "log-methods",
    "logger-method",
    "methods of a logger: a value they show changes its text only",
    ("debug", "info", "warning", "warn", "error", "critical", "exception"),
)
MODULE_WALKS = NameList(
    "module-walks",
    "module-walk",
    "module methods that walk its parts: each element is one (named: with its name)",
    ("modules", "named_modules", "children", "named_children", "parameters", "named_parameters"),
)
DICT_GROWING_METHODS = NameList(
    "dict-growing-methods",
    "dict-method",
    "methods that add or remove a dict's keys",
    ("update", "setdefault", "pop", "popitem", "clear"),
)
STRING_EDIT_METHODS = NameList(
    "string-edit-methods",
    "string-method",
    "string methods that read a parameter's name as text (an FSDP1 prefix removed from it)",
    ("replace", "removeprefix", "startswith", "split", "lstrip"),
)
SHAPE_ATTRIBUTES = NameList(
    "shape-attributes",
    "shape-attribute",
    "a tensor's attributes and methods that read its shape",
    ("ndim", "shape", "dim", "size", "numel"),
)
PARAMETER_ITERATORS = NameList(
    "parameter-iterators",
    "parameter-method",
    "module methods that give its parameters",
    ("parameters", "named_parameters"),
)
TENSOR_METHODS = NameList(
    "tensor-methods",
    "parameter-method",
    "module methods whose result holds its tensors and no module",
    ("state_dict", "parameters", "named_parameters", "buffers", "named_buffers"),
)
PARAMETER_WORDS = NameList(
    "parameter-words",
    "parameter-access",
    "what a tensor computed from them may be a parameter of a model through",
    ("parameters", "named_parameters", "param_groups", "Parameter", "get_parameter", "getattr"),
)
NORM_SOURCES = NameList(
    "norm-sources",
    "torch-api",
    "torch's functions that return the norm of the gradients they are given: on FSDP1's flat "
    "shards a rank's own piece of it, on FSDP2's DTensors the whole (a caller's all-reduce of "
    "it changes meaning)",
    (
        "torch.nn.utils.clip_grad_norm_",
        "torch.nn.utils.clip_grad.clip_grad_norm_",
        "torch.nn.utils.get_total_norm",
        "torch.nn.utils.clip_grad.get_total_norm",
    ),
)
NORM_CALLS = NameList(
    "norm-calls",
    "norm-method",
    "calls that turn gradients into (a piece of) their norm",
    ("norm", "vector_norm", "get_total_norm", "pow", "square", "sum", "sqrt"),
)
DTENSOR_METHODS = NameList(
    "dtensor-methods",
    "dtensor-method",
    "reads that show the code already handles DTensors",
    ("to_local", "full_tensor", "redistribute"),
)
CONFIG_SUFFIXES = NameList(
    "config-suffixes",
    "config-file",
    "config files whose text may name a function for a program to call",
    (".yaml", ".yml", ".json", ".toml", ".cfg", ".ini"),
)
SKIPPED_DIRS = NameList(
    "skipped-dirs",
    "skipped-dir",
    "folders of version control, environments, builds and caches: no code of the user's",
    words(
        """
        .git .hg .svn .venv venv build site-packages __pycache__ node_modules .tox .nox .eggs
        """
    ),
)

#: Guesses on how a name is spelled, with no list of names.
CAMEL_CASE = NameGuess(
    "camel-case",
    "class-name",
    "a CamelCase or acronym callee (GPT) is a class: its call builds a new object, no model",
)

# -- the audit's own ------------------------------------------------------------------------------

AUDIT_FSDP1_MODULES = NameList(
    "audit-fsdp1-modules",
    "fsdp1-api",
    "the audit's: public modules of torch.distributed.fsdp whose names the package re-exports",
    ("fully_sharded_data_parallel", "api", "wrap", "sharded_grad_scaler"),
)
AUDIT_CONFIGURATION = NameList(
    "audit-configuration",
    "fsdp1-api",
    "the audit's: what FullyShardedDataParallel and its state-dict functions take as arguments, "
    "from fsdp.api, fsdp.fully_sharded_data_parallel and fsdp.wrap (fully_shard_like_fsdp1 "
    "accepts them as they are, so they need no marker)",
    words(
        """
        ShardingStrategy BackwardPrefetch MixedPrecision CPUOffload StateDictType
        StateDictConfig FullStateDictConfig LocalStateDictConfig ShardedStateDictConfig
        OptimStateDictConfig FullOptimStateDictConfig LocalOptimStateDictConfig
        ShardedOptimStateDictConfig StateDictSettings OptimStateKeyType ModuleWrapPolicy
        CustomPolicy always_wrap_policy lambda_auto_wrap_policy size_based_auto_wrap_policy
        transformer_auto_wrap_policy _or_policy _module_wrap_policy
        """
    ),
)
AUDIT_FSDP1_OTHER_PUBLIC = NameList(
    "audit-fsdp1-other-public",
    "fsdp1-api",
    "the audit's: FSDP1's public names besides its configuration values (the wrapper, its flat "
    "parameter, its grad scaler and the enable_wrap/wrap context API)",
    ("FullyShardedDataParallel", "FlatParameter", "ShardedGradScaler", "enable_wrap", "wrap"),
)
AUDIT_FSDP1_METHODS = NameList(
    "audit-fsdp1-methods",
    "fsdp1-api",
    "the audit's: FSDP1-only methods, wrong on a model FSDP2 builds",
    ("no_sync", "clip_grad_norm_", "summon_full_params", "check_is_root"),
)
AUDIT_FSDP2_MODULES = NameList(
    "audit-fsdp2-modules",
    "fsdp2-api",
    "the audit's: where FSDP2's names live (torch 2.6+, and the _composable path before it)",
    ("torch.distributed.fsdp.", "torch.distributed._composable.fsdp."),
)
AUDIT_FSDP2_POLICIES = NameList(
    "audit-fsdp2-policies",
    "fsdp2-api",
    "the audit's: FSDP2's policy classes",
    ("MixedPrecisionPolicy", "CPUOffloadPolicy", "OffloadPolicy"),
)
AUDIT_FSDP2_OTHER_NAMES = NameList(
    "audit-fsdp2-other-names",
    "fsdp2-api",
    "the audit's: FSDP2's public names besides its policies",
    ("fully_shard", "FSDPModule"),
)
AUDIT_BRIDGE = NameList(
    "audit-bridge",
    "fsdp2_port-api",
    "the audit's: fsdp2_port's FSDP2 builder with FSDP1's arguments, by each import path",
    words(
        """
        fsdp2_port.fully_shard_like_fsdp1 fsdp2_port.fsdp1.fully_shard_like_fsdp1
        fsdp2_port.fsdp1.like_fsdp1.fully_shard_like_fsdp1
        """
    ),
)
AUDIT_FSDP2_TOOLS = NameList(
    "audit-fsdp2-tools",
    "fsdp2_port-api",
    "the audit's: fsdp2_port tools that take an FSDP2 model (or its parameters) and refuse FSDP1",
    words(
        """
        fsdp2_port.clip_grad_norm_ fsdp2_port.train.clip_grad_norm_
        fsdp2_port.train.clip.clip_grad_norm_ fsdp2_port.BF16Optimizer
        fsdp2_port.train.BF16Optimizer fsdp2_port.train.bf16_optimizer.BF16Optimizer
        """
    ),
)
AUDIT_RETURNS_SELF = NameList(
    "audit-returns-self",
    "returns-self",
    "the audit's: module methods that return the module they are called on",
    ("to", "cuda", "cpu", "train", "eval", "requires_grad_", "to_empty"),
)

#: Every entry, in the order above.
ENTRIES: tuple[NameList | NameTable, ...] = tuple(
    value for value in list(globals().values()) if isinstance(value, (NameList, NameTable))
)
#: Every guess, in the order above.
GUESSES: tuple[NameGuess, ...] = tuple(
    value for value in list(globals().values()) if isinstance(value, NameGuess)
)
