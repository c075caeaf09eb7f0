"""FSDP1's module-level APIs, right on FSDP1, FSDP2 and DDP modules alike.

The codemod emits these where an FSDP1 call cannot become pure torch: a state-dict context
returned from a helper or chosen at run time, ``set_state_dict_type`` followed by plain
``model.state_dict()`` calls in other functions, ``no_sync`` or ``.module`` on a receiver that
may be DDP, ``clip_grad_norm_``/``summon_full_params``/``fsdp_modules`` and the legacy
optimizer-state functions on a receiver it cannot tie to one model. Each function takes
``FullyShardedDataParallel``'s arguments in its order; ``state_dict_type`` and
``set_state_dict_type`` also take DCP's ``options=StateDictOptions(...)`` instead, which means
exactly the FSDP1 settings DCP applies to FSDP1 models
(``state_dict_api._settings_of_options``), and ``optim_options=`` for the optimizer's where
they differ (as one would call ``get_model_state_dict`` and ``get_optimizer_state_dict`` with
options of their own).

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

The functions live by topic: ``module_api`` (no_sync, summon_full_params, clip, ...),
``state_dict_api`` (the state-dict types), ``optim_state_api`` (optimizer state); this module
is the one place that names them all.
"""

from fsdp2_port.fsdp1.module_api import (
    fsdp_modules,
    fsdp_wrapped_module,
    module_clip_grad_norm_,
    no_sync,
    reshard,
    summon_full_params,
    unwrapped,
)
from fsdp2_port.fsdp1.optim_state_api import (
    full_optim_state_dict,
    optim_state_dict,
    optim_state_dict_to_load,
    scatter_full_optim_state_dict,
    shard_full_optim_state_dict,
    sharded_optim_state_dict,
)
from fsdp2_port.fsdp1.state_dict_api import (
    get_state_dict_type,
    load_module_state_dict,
    module_state_dict,
    set_state_dict_type,
    state_dict_type,
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
