"""The rules, in the order they run, and what is generated from them.

Within a stage (``rules.base.STAGES``), rules run in the order of ``RULES``. Of the analysis
rules, the constructor rule comes first (every other site is about the models it finds); the
leftovers rule comes last, so that it sees which FSDP1 names no other rule covers. After every
rewrite is applied, the removal of FSDP1 values left unread (F2P012) comes before the rewriting
of FSDP1 values only the readers read (F2P013), which leaves what that removes alone; the
import clean-up (F2P001) reads the text both leave.
``--list-rules``, the rules table of ``docs/migrate.md`` and the emitted-API test are made
from the rules' own ``CODES`` and ``EMITS``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

from fsdp2_port.codemods.rules.base import Code, Fixer, Rule
from fsdp2_port.codemods.rules.clip_grad import ClipGradRule
from fsdp2_port.codemods.rules.constructors import ConstructorRule
from fsdp2_port.codemods.rules.dead_values import DeadValuesRule
from fsdp2_port.codemods.rules.grad_reduce import GradReduceRule
from fsdp2_port.codemods.rules.imports import ImportsRule
from fsdp2_port.codemods.rules.internals import InternalsRule
from fsdp2_port.codemods.rules.isinstance_check import IsinstanceRule
from fsdp2_port.codemods.rules.leftovers import LeftoversRule
from fsdp2_port.codemods.rules.no_sync import NoSyncRule
from fsdp2_port.codemods.rules.optimizer import OptimizerRule
from fsdp2_port.codemods.rules.param_shapes import ParamShapesRule
from fsdp2_port.codemods.rules.reader_values import ReaderValuesRule
from fsdp2_port.codemods.rules.state_dict import StateDictRule

RULES: tuple[type[Rule] | type[Fixer], ...] = (
    ConstructorRule,
    OptimizerRule,
    StateDictRule,
    ClipGradRule,
    GradReduceRule,
    NoSyncRule,
    InternalsRule,
    IsinstanceRule,
    ParamShapesRule,
    LeftoversRule,
    DeadValuesRule,
    ReaderValuesRule,
    ImportsRule,
)
#: Every code a finding can carry, in code order, with its documentation.
DOCS: dict[str, Code] = dict(sorted((c, d) for r in RULES for c, d in r.CODES.items()))
#: Every code with its one-line summary (``--list-rules``).
CODES = {code: doc.summary for code, doc in DOCS.items()}
#: APIs the rewrites may call -> ``module:attribute``.
EMITS = {name: target for rule in RULES for name, target in rule.EMITS.items()}


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
    """Fresh instances of the analysis rules that add sites with any of ``codes``."""
    wanted = set(codes)
    chosen = [r for r in RULES if r.STAGE == "analysis" and wanted & r.CODES.keys()]
    return [cast("type[Rule]", rule)() for rule in chosen]


def fixers_for(codes: Iterable[str], stage: str) -> list[Fixer]:
    """Fresh instances of the ``stage`` fixers with any of ``codes``, in their order."""
    wanted = set(codes)
    chosen = [r for r in RULES if stage == r.STAGE and wanted & r.CODES.keys()]
    return [cast("type[Fixer]", rule)() for rule in chosen]


def rules_table() -> str:
    """The rules table of ``docs/migrate.md``, in markdown."""
    rows = ["| code | what | rewritten | marked |", "| --- | --- | --- | --- |"]
    rows += [f"| {c} | {d.topic} | {d.rewritten} | {d.marked} |" for c, d in DOCS.items()]
    return "\n".join(rows) + "\n"
