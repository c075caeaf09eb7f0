"""The rules, by code, in the order they run.

Order matters: rules that need to see FSDP1 constructors to know a receiver (clip, no_sync,
internals) run before the constructor rewrites; import cleanup runs after every rewrite, and
the leftovers rule runs last so that it sees only what nothing else handled.
"""

from __future__ import annotations

from collections.abc import Iterable

from codemods.rule import Rule
from codemods.rules.auto_wrap import AutoWrapRule
from codemods.rules.clip_grad import ClipGradRule
from codemods.rules.fully_shard import FullyShardRule
from codemods.rules.imports import ImportsRule
from codemods.rules.internals import InternalsRule
from codemods.rules.isinstance_check import IsinstanceRule
from codemods.rules.leftovers import LeftoversRule
from codemods.rules.no_sync import NoSyncRule
from codemods.rules.optimizer import OptimizerRule
from codemods.rules.policies import PoliciesRule
from codemods.rules.state_dict import StateDictRule

RULES: tuple[type[Rule], ...] = (
    OptimizerRule,
    StateDictRule,
    ClipGradRule,
    NoSyncRule,
    InternalsRule,
    IsinstanceRule,
    PoliciesRule,
    AutoWrapRule,
    FullyShardRule,
    ImportsRule,
    LeftoversRule,
)
BY_CODE = {rule.CODE: rule for rule in RULES}


def select(chosen: Iterable[str] = (), ignored: Iterable[str] = ()) -> list[type[Rule]]:
    """Rules in run order: ``chosen`` codes (all when empty) minus ``ignored`` ones.

    Raises ValueError naming any unknown code.
    """
    chosen, ignored = set(chosen), set(ignored)
    unknown = sorted((chosen | ignored) - BY_CODE.keys())
    if unknown:
        raise ValueError(
            f"unknown rule code(s): {', '.join(unknown)} (known: {', '.join(sorted(BY_CODE))})"
        )
    return [
        rule for rule in RULES if (not chosen or rule.CODE in chosen) and rule.CODE not in ignored
    ]
