"""What a migrated program saves, read where it is saved: the state it takes may be right on
FSDP1 and FSDP2 and still not resume.

- A state dict FSDP2 gathers (a full model or optimizer state: a collective) taken inside a
  branch only some ranks enter (``if rank == 0:``): the rewrite stays, for review; the
  gather goes before the branch, on every rank.
- ``optimizer.state_dict()`` of an optimizer over a migrated model's parameters: this rank's
  DTensor shards, as FSDP1's was this rank's flat shard. Saved per rank (a path naming the
  rank), it resumes as it did; anywhere else it may be saved from one rank, which cannot
  resume the others: marked, for review, holding nothing.
- ``model.save_pretrained(...)`` of a migrated model: it saves ``state_dict()``, this rank's
  DTensor shards: marked, for review, with the full state to pass instead.
"""

from __future__ import annotations

import ast
import re

from fsdp2_port.codemods.analysis import FileAnalysis
from fsdp2_port.codemods.plan import Rewrite
from fsdp2_port.codemods.rules.state_dict.walk import CODE
from fsdp2_port.codemods.semantic import ranks
from fsdp2_port.codemods.semantic.summaries import GATED, saves_pretrained

#: The FSDP2 calls that gather: every rank must make them.
_GATHERS = re.compile(
    r"\b(get_model_state_dict|get_optimizer_state_dict|get_state_dict|module_state_dict|"
    r"optim_state_dict)\("
)
_ONE_RANK_MESSAGE = (
    "; only some ranks get here ({}), and FSDP2 gathers the full state with a collective "
    "every rank must join: take it before that test, on every rank, and save it here"
)
_OPTIMIZER = (
    "{} of an optimizer over a model FSDP2 shards: this rank's DTensor shards (FSDP1's was this "
    "rank's flat shard). Saved by every rank, each resumes its own; saved from one rank it "
    "cannot resume the others: save get_optimizer_state_dict(model, optimizer, "
    "options=StateDictOptions(full_state_dict=True, cpu_offload=True)), taken on every rank, "
    "or use DCP"
)
_PRETRAINED_THROUGH = (
    "{} calls save_pretrained on {} (in its own code or further down), which saves "
    "state_dict(), this rank's DTensor shards under FSDP2: have it pass "
    "state_dict=get_model_state_dict({}, options=StateDictOptions(full_state_dict=True, "
    "cpu_offload=True)), taken on every rank, and save on rank 0"
)
_PRETRAINED = (
    "{}.save_pretrained saves state_dict(), this rank's DTensor shards under FSDP2: pass "
    "state_dict=get_model_state_dict({}, options=StateDictOptions(full_state_dict=True, "
    "cpu_offload=True)), taken on every rank, and save on rank 0"
)


def one_rank_gathers(analysis: FileAnalysis, first: int) -> None:
    """The rule's sites from ``first`` on whose forms gather, inside a one-rank branch:
    rewritten for review, the message saying where the gather goes."""
    for index in range(first, len(analysis.plan.sites)):
        site = analysis.plan.sites[index]
        forms = {"rewrite": site.forms.rewrite, "either": site.forms.either}
        gathering = {
            name: form
            for name, form in forms.items()
            if form is not None
            and not form.review
            and any(_GATHERS.search(edit.replacement) for edit in form.edits)
        }
        if site.code != CODE or not gathering:
            continue
        calls = analysis.names.by_type[ast.Call]
        node = next((c for c in calls if analysis.span(c)[0] == site.at.start), None)
        test = None if node is None else one_rank_test(analysis, node)
        if test is None:
            continue
        reviewed = {
            name: Rewrite(
                form.edits, form.message + _ONE_RANK_MESSAGE.format(test), form.imports, True
            )
            for name, form in gathering.items()
        }
        analysis.plan.sites[index] = site.but(**reviewed, silent=False)


def saves(analysis: FileAnalysis, claimed: set[int]) -> None:
    """``o.state_dict()`` of an optimizer over a model's parameters, ``m.save_pretrained``
    (not where another rule's site starts: ``claimed``)."""
    for call in analysis.names.by_type[ast.Call]:
        assert isinstance(call, ast.Call)
        func = call.func
        if analysis.is_ignored(call) or analysis.span(call)[0] in claimed:
            continue
        _pretrained_through(analysis, call)
        if not isinstance(func, ast.Attribute):
            continue
        if func.attr == "state_dict" and not call.args and not call.keywords:
            model = _built_over(analysis, func.value)
            if model is not None and not _saved_per_rank(analysis, call):
                text = _OPTIMIZER.format(analysis.source(call))
                _marker(analysis, call, model, text)
        elif saves_pretrained(call):
            text = analysis.source(func.value)
            _marker(analysis, call, func.value, _PRETRAINED.format(text, text))


def _pretrained_through(analysis: FileAnalysis, call: ast.Call) -> None:
    """``ckpt.export(model, out)``: a function of another file of the run that calls
    ``save_pretrained`` on what it is given, however many calls down (``summaries``): marked
    as the direct form is (a function of this file has its own line marked here)."""
    qualified = analysis.names.qualified(call.func)
    if not qualified or any(q.startswith(f"{analysis.module_name}.") for q in qualified):
        return
    effects = analysis.callee_effects(call)
    for position, argument in enumerate(call.args):
        if "pretrained" in effects.get(position, ()):
            text = analysis.source(argument)
            message = _PRETRAINED_THROUGH.format(analysis.source(call.func), text, text)
            _marker(analysis, call, argument, message)
            return


def _saved_per_rank(analysis: FileAnalysis, call: ast.Call) -> bool:
    """``torch.save(o.state_dict(), f"{path}.{rank}")``: handed to a call whose other
    arguments name the rank (a file per rank, each resuming its own)."""
    outer = analysis.names.parent.get(call)
    if not isinstance(outer, ast.Call):
        return False
    others = [a for a in (*outer.args, *(k.value for k in outer.keywords)) if a is not call]
    return any(ranks.names_a_rank(a) for a in others)


def _marker(analysis: FileAnalysis, call: ast.Call, model: ast.expr, message: str) -> None:
    """A review marker where ``model`` migrates; nothing where it stays FSDP1."""
    analysis.add_tied(
        CODE, call, model, "", Rewrite([], message, review=True), quiet=True, holds=False
    )


def _built_over(analysis: FileAnalysis, optimizer: ast.expr) -> ast.expr | None:
    """The model whose ``parameters()`` (or ``named_parameters()``) the optimizer bound to
    ``optimizer`` was built over, when the one binding that reaches this read says so."""
    values: list[ast.expr] = []
    if isinstance(optimizer, ast.Name):
        reaching = analysis.ties.reaching(optimizer)
        values = [b.value for b in reaching if b.kind == "assign" and b.value is not None]
        if len(values) != len(reaching):
            return None
    elif isinstance(optimizer, ast.Attribute):
        values = analysis.ties.assigned(optimizer)
    if len(values) != 1 or not isinstance(values[0], ast.Call):
        return None
    built = values[0]
    first = (
        built.args[0]
        if built.args
        else next((k.value for k in built.keywords if k.arg == "params"), None)
    )
    if (
        isinstance(first, ast.Call)
        and isinstance(first.func, ast.Attribute)
        and first.func.attr in ("parameters", "named_parameters")
    ):
        return first.func.value
    return None


def one_rank_test(analysis: FileAnalysis, node: ast.AST) -> str | None:
    """Where only some ranks pass on the way to ``node``, as a message says it: the test, as
    written, of an ``if`` around it or of an earlier ``if <test>: return`` (any jump) in a
    block that holds it, in its function (``TypeTests.guarded``'s places); else the test
    around a call of its function somewhere in the run, however many calls up
    (``summaries.GATED``)."""
    found: list[str] = []

    def names_a_rank(test: ast.AST, _text: str, holds: bool) -> bool:
        if ranks.some_ranks(test, holds):
            found.append(analysis.source(test))
            return True
        return False

    if analysis.type_tests.guarded(node, names_a_rank):
        return f"`{found[0]}`"
    function = analysis.names.function_of(node)
    name = analysis.ties.exported_name(function) if function is not None else None
    where = sorted(analysis.effects.get(name or "", {}).get(GATED, ()))
    return f"{where[0]}, which calls this function" if where else None
