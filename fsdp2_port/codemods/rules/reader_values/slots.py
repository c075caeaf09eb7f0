"""The kinds of FSDP1 value F2P013 writes, and the slots that take each: which argument of
which ``fsdp2_port`` reader (``_READERS``) or of FSDP2 (``_FSDP2_SLOTS``)."""

from __future__ import annotations

import ast

from fsdp2_port.codemods import fsdp1
from fsdp2_port.codemods.assumptions import (
    FSDP1_CPU_OFFLOAD_FIELDS,
    FSDP1_MIXED_PRECISION_FIELDS,
    FSDP1_POLICY_CALL_ARGUMENTS,
)
from fsdp2_port.codemods.names import Names
from fsdp2_port.codemods.rules.reader_values.tree import _passed

STRATEGY, POLICY = "sharding strategy", "wrap policy"
PREFETCH, STATE_DICT_TYPE = "backward prefetch", "state-dict type"
MIXED, OFFLOAD = "mixed precision", "cpu offload"
MODEL_CONFIG, OPTIM_CONFIG = "state-dict config", "optimizer state-dict config"
#: FSDP1's enums the readers take by member name.
_ENUMS = {
    "ShardingStrategy": STRATEGY,
    "BackwardPrefetch": PREFETCH,
    "StateDictType": STATE_DICT_TYPE,
}
#: FSDP1's config dataclasses the readers take as a dict of their fields: (kind, the fields in
#: order, for arguments by position).
_CONFIGS: dict[str, tuple[str, tuple[str, ...]]] = {
    "MixedPrecision": (MIXED, FSDP1_MIXED_PRECISION_FIELDS.names),
    "CPUOffload": (OFFLOAD, FSDP1_CPU_OFFLOAD_FIELDS.names),
    "FullStateDictConfig": (MODEL_CONFIG, ("offload_to_cpu", "rank0_only")),
    "ShardedStateDictConfig": (MODEL_CONFIG, ("offload_to_cpu", "_use_dtensor")),
    "FullOptimStateDictConfig": (OPTIM_CONFIG, ("offload_to_cpu", "rank0_only")),
    "ShardedOptimStateDictConfig": (OPTIM_CONFIG, ("offload_to_cpu", "_use_dtensor")),
}
#: No position: a keyword-only slot.
_KEYWORD_ONLY = -1
_STATE_DICT_SLOTS = (
    (STATE_DICT_TYPE, 1, "state_dict_type"),
    (MODEL_CONFIG, 2, "state_dict_config"),
    (OPTIM_CONFIG, 3, "optim_state_dict_config"),
)
#: reader -> its slots: (the kind of value a slot takes, its position, its keyword). The
#: bridge (``fully_shard_like_fsdp1``, FSDP1's signature) and the state-dict type functions
#: take both spellings too.
_READERS: dict[str, tuple[tuple[str, int, str], ...]] = {
    "mesh_like_fsdp1": ((STRATEGY, 0, "sharding_strategy"),),
    "reshard_after_forward_like_fsdp1": ((STRATEGY, 0, "sharding_strategy"),),
    "units_like_fsdp1": (
        (POLICY, 1, "auto_wrap_policy"),
        (MIXED, _KEYWORD_ONLY, "mixed_precision"),
    ),
    "mp_policy_like_fsdp1": ((MIXED, 0, "mixed_precision"),),
    "buffer_dtype_like_fsdp1": ((MIXED, 0, "mixed_precision"),),
    "full_precision_like_fsdp1": ((MIXED, 0, "mixed_precision"),),
    "offload_policy_like_fsdp1": ((OFFLOAD, 0, "cpu_offload"),),
    "fully_shard_like_fsdp1": (
        (STRATEGY, 2, "sharding_strategy"),
        (OFFLOAD, 3, "cpu_offload"),
        (POLICY, 4, "auto_wrap_policy"),
        (PREFETCH, 5, "backward_prefetch"),
        (MIXED, 6, "mixed_precision"),
    ),
    "state_dict_type": _STATE_DICT_SLOTS,
    "set_state_dict_type": _STATE_DICT_SLOTS,
}
#: FSDP2's slots where FSDP1's value and its spelling without FSDP1 come to the same: neither
#: is a ``CPUOffloadPolicy`` (no offload: verl hands its ``CPUOffload`` to both versions), and
#: ``fully_shard`` refuses either as ``reshard_after_forward`` and as ``mp_policy`` (no
#: ``output_dtype``: the first forward fails), so a run that took that path never trained
#: (dolomite's helper returns FSDP1's or FSDP2's config, each for its own version).
_FSDP2_SLOTS: dict[str, tuple[tuple[str, int, str], ...]] = {
    "fully_shard": (
        (STRATEGY, _KEYWORD_ONLY, "reshard_after_forward"),
        (MIXED, _KEYWORD_ONLY, "mp_policy"),
        (OFFLOAD, _KEYWORD_ONLY, "offload_policy"),
    ),
}
#: What a parameter of a function may take without FSDP1 (``accepting``): each kind, itself
#: or in a dict under a keyword of a slot for it (spread into the call, ``**kwargs``).
_CANDIDATES = tuple(
    dict.fromkeys(
        [
            *((kind, None) for kind in _ENUMS.values()),
            *((kind, None) for kind, _ in _CONFIGS.values()),
            (POLICY, None),
            *(
                (kind, keyword)
                for slots in [*_READERS.values(), *_FSDP2_SLOTS.values()]
                for kind, _, keyword in slots
            ),
        ]
    )
)


def _reader_kind(
    names: Names, call: ast.AST | None, alike: bool = True
) -> tuple[tuple[str, int, str], ...] | None:
    """The slots of a reader call (with ``alike``, also of an FSDP2 call that takes either
    spelling alike), or None for any other call."""
    if not isinstance(call, ast.Call):
        return None
    for qualified in names.qualified(call.func):
        head, _, last = qualified.rpartition(".")
        if head.split(".")[0] == "fsdp2_port" and last in _READERS:
            return _READERS[last]
        if alike and fsdp1.fsdp2(qualified) in _FSDP2_SLOTS:
            return _FSDP2_SLOTS[last]
    return None


def _in_fsdp1_call_shape(call: ast.Call) -> bool:
    """``policy(module, recurse, nonwrapped_numel)``, by position or FSDP1's keywords."""
    passed = _passed(call, FSDP1_POLICY_CALL_ARGUMENTS.names)
    return passed is not None and len(passed) == len(FSDP1_POLICY_CALL_ARGUMENTS.names)
