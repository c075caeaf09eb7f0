"""The rules, in the order they add sites to a file's plan, and what is generated from them.

The constructor rule comes first (every other site is about the models it finds); the
leftovers rule comes last, so that it sees which FSDP1 names no other rule covers. Import
clean-up (F2P001), the removal of FSDP1 values left unread (F2P012) and the rewriting of FSDP1
values only the readers read (F2P013) are not rules of their own: they run once per file, after
every rewrite is applied.
``--list-rules``, the rules table of ``docs/migrate.md`` and the emitted-API test are made
from the rules' own ``CODES`` and ``EMITS``.
"""

from __future__ import annotations

from collections.abc import Iterable

from codemods import dead_values, imports, reader_values
from codemods.rules.base import Code, Rule
from codemods.rules.clip_grad import ClipGradRule
from codemods.rules.constructors import ConstructorRule
from codemods.rules.grad_reduce import GradReduceRule
from codemods.rules.internals import InternalsRule
from codemods.rules.isinstance_check import IsinstanceRule
from codemods.rules.leftovers import LeftoversRule
from codemods.rules.no_sync import NoSyncRule
from codemods.rules.optimizer import OptimizerRule
from codemods.rules.param_shapes import ParamShapesRule
from codemods.rules.state_dict import StateDictRule

RULES: tuple[type[Rule], ...] = (
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
)
#: Every code a finding can carry, in code order, with its documentation.
DOCS: dict[str, Code] = dict(
    sorted(
        {
            imports.CODE: imports.DOC,
            dead_values.CODE: dead_values.DOC,
            reader_values.CODE: reader_values.DOC,
            **{c: d for r in RULES for c, d in r.CODES.items()},
        }.items()
    )
)
#: Every code with its one-line summary (``--list-rules``).
CODES = {code: doc.summary for code, doc in DOCS.items()}
#: APIs the rewrites may call -> ``module:attribute``.
EMITS = {
    **reader_values.EMITS,
    **{name: target for rule in RULES for name, target in rule.EMITS.items()},
}


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
    return [rule() for rule in RULES if wanted & rule.CODES.keys()]


def rules_table() -> str:
    """The rules table of ``docs/migrate.md``, in markdown."""
    rows = ["| code | what | rewritten | marked |", "| --- | --- | --- | --- |"]
    rows += [f"| {c} | {d.topic} | {d.rewritten} | {d.marked} |" for c, d in DOCS.items()]
    return "\n".join(rows) + "\n"
