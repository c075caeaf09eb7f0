"""What counts as FSDP1: qualified names under ``torch.distributed.fsdp`` that FSDP2 replaced.

Names are canonicalised relative to ``torch.distributed.fsdp`` with the public submodules
(``fully_sharded_data_parallel``, ``api``, ``wrap``, ``sharded_grad_scaler``) stripped, so
``torch.distributed.fsdp.wrap.ModuleWrapPolicy`` and ``fsdp.ModuleWrapPolicy`` compare equal.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from fsdp2_port.codemods import markers
from fsdp2_port.codemods.assumptions import (
    FSDP1_ENUMS,
    FSDP1_MODULES,
    FSDP1_NOT_CONFIGURATION,
    FSDP1_SETTINGS_CLASSES,
    FSDP1_VALUE_CLASSES,
    FSDP1_WRAP_POLICY_FUNCTIONS,
    FSDP2_MODULES,
    FSDP2_NAMES,
)

PACKAGE = "torch.distributed.fsdp"
_SUBMODULES = tuple(f"{module}." for module in FSDP1_MODULES)

#: Public FSDP1 names (first component of the canonical name).
PUBLIC = (
    FSDP1_ENUMS.members
    | FSDP1_VALUE_CLASSES.members
    | FSDP1_WRAP_POLICY_FUNCTIONS.members
    | FSDP1_SETTINGS_CLASSES.members
    | FSDP1_NOT_CONFIGURATION.members
)
#: Private modules under the package that belong to FSDP2, not FSDP1.
_FSDP2_PRIVATE = ("_fully_shard",)


def canonical(qualified_name: str) -> str | None:
    """``torch.distributed.fsdp.api.ShardingStrategy.X`` -> ``ShardingStrategy.X``; else None.

    Returns the canonical name only for FSDP1 names (public ones and private internals).
    """
    if not qualified_name.startswith(PACKAGE + "."):
        return None
    rest = qualified_name[len(PACKAGE) + 1 :]
    for sub in _SUBMODULES:
        if rest.startswith(sub):
            rest = rest[len(sub) :]
            break
    head = rest.split(".", 1)[0]
    if head in PUBLIC:
        return rest
    if head.startswith("_") and head not in _FSDP2_PRIVATE:
        return rest
    return None


def first(names: Iterable[str]) -> str | None:
    """The canonical FSDP1 name among several qualified names (sorted, so deterministic)."""
    for name in sorted(names):
        found = canonical(name)
        if found is not None:
            return found
    return None


def enum_of_member(name: str | None) -> str | None:
    """``ShardingStrategy`` for the canonical name of one of its members
    (``ShardingStrategy.FULL_SHARD``; any of ``FSDP1_ENUMS``), else None."""
    enum, _, member = (name or "").partition(".")
    return enum if enum in FSDP1_ENUMS and member and "." not in member else None


def is_private(name: str) -> bool:
    return name.startswith("_")


#: Text of an FSDP1 name: a public one, ``fsdp.wrap``, or a private module other than FSDP2's.
_FSDP1_TEXT = re.compile(
    rb"\b(?:"
    + b"|".join(re.escape(name.encode()) for name in sorted(PUBLIC - {"wrap"}))
    + rb")\b"
    + rb"|fsdp\.wrap\b|fsdp\._(?!fully_shard)|fsdp import _(?!fully_shard)"
)


def might_need_migration(data: bytes) -> bool:
    """The pre-filter: False means no rule can apply, so the file need not be parsed.

    Every rule needs a name imported from a module whose path contains ``fsdp`` and spelled
    with an FSDP1 name (the receivers of ``no_sync``/``clip_grad_norm_`` are known only through
    ``FullyShardedDataParallel``), or the ``BF16Optimizer`` (F2P009).
    """
    if b"BF16Optimizer" in data or b"fully_shard" in data:  # FSDP2 models: a rerun, a mixed run
        return True
    return b"fsdp" in data and _FSDP1_TEXT.search(data) is not None


_ACTS_ON_A_MODEL = re.compile(
    rb"\.(?:no_sync|clip_grad_norm_|summon_full_params|check_is_root|_handle|_flat_param"
    rb"|flat_param|_fsdp_wrapped_module|sharding_strategy|mixed_precision)\b"
    rb"|(?i:model|module|net|policy|actor|critic|wrapped)\w*\.(?:module\b|(?:named_)?parameters\()"
)


def might_act_on_a_model(data: bytes) -> bool:
    """Text that calls FSDP1's module APIs on some receiver, or that holds a marker an earlier
    run left: in a run that builds FSDP1 models, such a file is analysed even without an FSDP1
    name (a base class, a helper library, a file whose FSDP1 names an earlier run rewrote
    around a site that holds the run: the second run must hold it too), since one of the run's
    models may reach it by a path the analysis cannot see."""
    return (
        markers.PREFIX.encode() in data
        or _ACTS_ON_A_MODEL.search(data) is not None
        or (b"all_reduce" in data and b".grad" in data)  # a gradient norm reduced by hand
    )


def fsdp2(qualified_name: str) -> str | None:
    """``torch.distributed._composable.fsdp.fully_shard`` -> ``fully_shard``; else None."""
    for prefix in FSDP2_MODULES:
        if qualified_name.startswith(prefix):
            name = qualified_name.rsplit(".", 1)[-1]
            return name if name in FSDP2_NAMES else None
    return None
