"""fsdp2-port: move PyTorch training code from FSDP1 to FSDP2 without changing what it computes.

Importing this package imports no torch: the names below load on first use, so that
``fsdp2-port migrate`` (the codemods) runs where torch is absent; a missing or too old torch
is reported then, in one line (``versions.require_torch``).
"""

from importlib import import_module
from typing import Any

__version__ = "0.2.0"

_LAZY = {
    "BF16Optimizer": "fsdp2_port.train.bf16_optimizer",
    "clip_grad_norm_": "fsdp2_port.train.clip",
    "fully_shard_like_fsdp1": "fsdp2_port.fsdp1.like_fsdp1",
    "materialize_like_fsdp1": "fsdp2_port.fsdp1.like_fsdp1",
    # one FSDP1 argument known only at run time -> its FSDP2 value (the codemod's plain form)
    "buffer_dtype_like_fsdp1": "fsdp2_port.fsdp1.readers",
    "full_precision_like_fsdp1": "fsdp2_port.fsdp1.readers",
    "mesh_like_fsdp1": "fsdp2_port.fsdp1.readers",
    "mp_policy_like_fsdp1": "fsdp2_port.fsdp1.readers",
    "offload_policy_like_fsdp1": "fsdp2_port.fsdp1.readers",
    "reshard_after_forward_like_fsdp1": "fsdp2_port.fsdp1.readers",
    "units_like_fsdp1": "fsdp2_port.fsdp1.readers",
    # FSDP1 enum values tested by name (``x == ShardingStrategy.X`` -> ``member_name(x) == "X"``)
    "member_name": "fsdp2_port.fsdp1.readers",
    # FSDP1 keyword arguments spread with ** whose keys the codemod wrote the plain form for
    "kwargs_as_migrated": "fsdp2_port.fsdp1.readers",
    # FSDP1's size-based policy without FSDP1 (the codemod writes it where only these read it)
    "size_based_policy": "fsdp2_port.fsdp1.units",
    # a predicate as a policy in FSDP1's call shape (the codemod writes it for public returns)
    "auto_wrap_policy": "fsdp2_port.fsdp1.units",
    "global_grad_norm": "fsdp2_port.train.clip",
    # FSDP1's ShardedGradScaler, right on FSDP1, FSDP2, DDP and plain models (the codemod's target)
    "GradScaler": "fsdp2_port.train.grad_scaler",
    # FSDP1's module APIs, right on FSDP1, FSDP2 and DDP alike (the codemod's runtime target)
    "fsdp_modules": "fsdp2_port.fsdp1.fsdp1_api",
    "full_optim_state_dict": "fsdp2_port.fsdp1.fsdp1_api",
    "get_state_dict_type": "fsdp2_port.fsdp1.fsdp1_api",
    "load_module_state_dict": "fsdp2_port.fsdp1.fsdp1_api",
    "module_clip_grad_norm_": "fsdp2_port.fsdp1.fsdp1_api",
    "module_state_dict": "fsdp2_port.fsdp1.fsdp1_api",
    "no_sync": "fsdp2_port.fsdp1.fsdp1_api",
    "optim_state_dict": "fsdp2_port.fsdp1.fsdp1_api",
    "optim_state_dict_to_load": "fsdp2_port.fsdp1.fsdp1_api",
    "reshard": "fsdp2_port.fsdp1.fsdp1_api",
    "scatter_full_optim_state_dict": "fsdp2_port.fsdp1.fsdp1_api",
    "set_state_dict_type": "fsdp2_port.fsdp1.fsdp1_api",
    "shard_full_optim_state_dict": "fsdp2_port.fsdp1.fsdp1_api",
    "sharded_optim_state_dict": "fsdp2_port.fsdp1.fsdp1_api",
    "state_dict_type": "fsdp2_port.fsdp1.fsdp1_api",
    "summon_full_params": "fsdp2_port.fsdp1.fsdp1_api",
    "unwrapped": "fsdp2_port.fsdp1.fsdp1_api",
    "fsdp_wrapped_module": "fsdp2_port.fsdp1.fsdp1_api",
}
__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in ("codemods", "compat"):  # the other two parts, as attributes too
        return import_module(f"fsdp2_port.{name}")
    if name in _LAZY:
        from fsdp2_port.versions import require_torch

        require_torch()
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'fsdp2_port' has no attribute {name!r}")
