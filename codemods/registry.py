"""The rules, in the order they add sites to a file's plan.

The constructor rule comes first (every other site is about the models it finds); the
leftovers rule comes last, so that it sees which FSDP1 names no other rule covers. Import
clean-up (F2P001) is not a rule of its own: it runs once, after every rewrite is applied.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from codemods.analysis import FileAnalysis
from codemods.imports import CODE as IMPORTS_CODE
from codemods.rules.clip_grad import ClipGradRule
from codemods.rules.constructors import ConstructorRule
from codemods.rules.internals import InternalsRule
from codemods.rules.isinstance_check import IsinstanceRule
from codemods.rules.leftovers import LeftoversRule
from codemods.rules.no_sync import NoSyncRule
from codemods.rules.optimizer import OptimizerRule
from codemods.rules.param_shapes import ParamShapesRule
from codemods.rules.state_dict import StateDictRule


class Rule(Protocol):
    CODE: str
    SUMMARY: str

    def analyze(self, analysis: FileAnalysis) -> None: ...


RULES: tuple[type[Rule], ...] = (
    ConstructorRule,
    OptimizerRule,
    StateDictRule,
    ClipGradRule,
    NoSyncRule,
    InternalsRule,
    IsinstanceRule,
    ParamShapesRule,
    LeftoversRule,
)
#: Every code a finding can carry, with what it means (``--list-rules``).
CODES = {
    IMPORTS_CODE: "FSDP1 imports left unused are removed; FSDP2 imports are added where needed",
    "F2P002": ConstructorRule.SUMMARY,
    "F2P003": "FSDP(..., auto_wrap_policy=<literal>) -> fully_shard on each selected submodule, "
    "then the root",
    "F2P004": "MixedPrecision/CPUOffload bound for a pure rewrite -> inlined "
    "MixedPrecisionPolicy/CPUOffloadPolicy",
    "F2P005": IsinstanceRule.SUMMARY,
    "F2P006": ClipGradRule.SUMMARY,
    "F2P007": NoSyncRule.SUMMARY,
    "F2P008": StateDictRule.SUMMARY,
    "F2P009": OptimizerRule.SUMMARY,
    "F2P010": InternalsRule.SUMMARY,
    "F2P011": ParamShapesRule.SUMMARY,
    "F2P099": LeftoversRule.SUMMARY,
}
#: The codes each rule's sites carry (the constructor rule has three).
_RULE_CODES: dict[type[Rule], tuple[str, ...]] = {ConstructorRule: ("F2P002", "F2P003", "F2P004")}


def select(chosen: Iterable[str] = (), ignored: Iterable[str] = ()) -> list[str]:
    """The selected codes, in ``CODES`` order: ``chosen`` (all when empty) minus ``ignored``.

    Raises ValueError naming any unknown code.
    """
    chosen, ignored = set(chosen), set(ignored)
    unknown = sorted((chosen | ignored) - CODES.keys())
    if unknown:
        raise ValueError(f"unknown rule code(s): {', '.join(unknown)} (known: {', '.join(CODES)})")
    return [code for code in CODES if (not chosen or code in chosen) and code not in ignored]


def rules_for(codes: Iterable[str]) -> list[Rule]:
    """Fresh instances of the rules that add sites with any of ``codes``."""
    wanted = set(codes)
    return [rule() for rule in RULES if wanted & set(_RULE_CODES.get(rule, (rule.CODE,)))]
