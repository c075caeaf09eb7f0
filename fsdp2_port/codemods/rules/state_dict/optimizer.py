"""Optimizer state: ``FSDP.optim_state_dict`` (and a DCP resume through it) and
``FSDP.optim_state_dict_to_load`` into ``o.load_state_dict``, in one statement or two."""

from __future__ import annotations

import ast

from fsdp2_port.codemods import calls
from fsdp2_port.codemods.analysis import FileAnalysis
from fsdp2_port.codemods.assumptions import DCP_LOADS, FSDP1_TO_LOAD_PARAMETERS
from fsdp2_port.codemods.plan import Rewrite
from fsdp2_port.codemods.rules.state_dict.emit import (
    _RUNTIME,
    _imports,
    _new,
    _pure_site,
    _runtime_call,
)
from fsdp2_port.codemods.rules.state_dict.options import DEFAULT, Options
from fsdp2_port.codemods.rules.state_dict.walk import _FSDP, CODE, Walk, _block_of, _expression_call
from fsdp2_port.codemods.text import Edit


def _loads(outer: ast.Call, inner: ast.AST) -> bool:
    """``x.load_state_dict(inner)`` with ``inner`` its only argument."""
    func = outer.func
    return (
        isinstance(func, ast.Attribute)
        and func.attr == "load_state_dict"
        and len(outer.args) == 1
        and not outer.keywords
        and outer.args[0] is inner
    )


def _to_load_inside(analysis: FileAnalysis, call: ast.Call) -> bool:
    """``o.load_state_dict(FSDP.optim_state_dict_to_load(...))``: the outer call of a pair."""
    return bool(
        isinstance(call.func, ast.Attribute)
        and call.func.attr == "load_state_dict"
        and len(call.args) == 1
        and isinstance(call.args[0], ast.Call)
        and analysis.fsdp1_name(call.args[0].func) == _FSDP + "optim_state_dict_to_load"
    )


def _to_load_parts(
    analysis: FileAnalysis, call: ast.Call
) -> tuple[ast.expr, ast.expr, ast.expr] | None:
    """``(model, optim, optim_state_dict)`` in whichever of FSDP1's two orders is used.

    torch >= 2.1: ``(model, optim, optim_state_dict)``; before: ``(optim_state_dict, model,
    optim)``. Positional calls are told apart by which argument is the optimizer that loads
    the result (or, without one, by the model being a known FSDP1 model).
    """
    if any(isinstance(x, ast.Starred) for x in call.args) or any(
        k.arg is None for k in call.keywords
    ):
        return None
    keywords = {k.arg: k.value for k in call.keywords}
    if set(keywords) - {*FSDP1_TO_LOAD_PARAMETERS, "is_named_optimizer", "load_directly", "group"}:
        return None
    if not call.args and all(k in keywords for k in FSDP1_TO_LOAD_PARAMETERS):
        return keywords["model"], keywords["optim"], keywords["optim_state_dict"]
    if len(call.args) != 3:
        return None
    first, second, third = call.args
    parent = analysis.names.parent.get(call)
    optimizer = None
    if isinstance(parent, ast.Call) and _loads(parent, call):
        assert isinstance(parent.func, ast.Attribute)
        optimizer = analysis.source(parent.func.value)
    if optimizer is not None:
        if analysis.source(second) == optimizer and analysis.source(third) != optimizer:
            return first, second, third
        if analysis.source(third) == optimizer and analysis.source(second) != optimizer:
            return second, third, first
        return None
    if analysis.ties.of(first)[0] or analysis.type_tests.known_fsdp1(first):
        return first, second, third
    if analysis.ties.of(second)[0] or analysis.type_tests.known_fsdp1(second):
        return second, third, first
    return None


def _fresh(analysis: FileAnalysis, optim: ast.expr, use: ast.AST) -> bool:
    """``optim`` is built in this function (``optimizer = AdamW(...)``) and not stepped before
    ``use``: it has no state yet."""
    if not isinstance(optim, ast.Name):
        return False
    binding = analysis.sole_binding(optim)
    if binding is None or not isinstance(binding.value, ast.Call):
        return False
    if analysis.names.function_of(binding.node) is not analysis.names.function_of(use):
        return False
    before = analysis.lines.start(use)
    return not any(
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "step"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == optim.id
        and analysis.lines.start(node) < before
        for node in analysis.names.by_type[ast.Call]
    )


def static_optim(call: ast.Call) -> bool:
    """``FSDP.optim_state_dict(model, optim)``: the form ``get_optimizer_state_dict`` writes.
    With any other argument (a given ``optim_state_dict``, a ``group``) the call is read at
    run time, under the settings of its block: a block around it stays."""
    bound = calls.bind(call, ("model", "optim", "optim_state_dict", "group"))
    return bound is not None and set(bound) == {"model", "optim"}


def _optim(
    walk: Walk, call: ast.Call, options: Options | None, groups: frozenset[str], anchor
) -> None:
    analysis = walk.analysis
    bound = calls.bind(call, ("model", "optim", "optim_state_dict", "group"))
    if options is None and not analysis.options.runtime_dependency and not walk.persistent:
        options = DEFAULT
    if (
        options is None
        or "optim" in options.inexact  # FSDP1's default FULL offloads on every rank
        or bound is None
        or not static_optim(call)
    ):
        _runtime_call(walk, call, "optim_state_dict", "FSDP.optim_state_dict(...)", groups)
        return
    new = _new(
        "get_optimizer_state_dict",
        [analysis.source(bound["model"].value), analysis.source(bound["optim"].value)],
        options.optim,
    )
    _pure_site(
        walk,
        call,
        bound["model"].value,
        new,
        "FSDP.optim_state_dict(...) -> get_optimizer_state_dict(...)",
        groups,
        anchor,
    )
    _dcp_resume(walk, call, bound["model"].value, bound["optim"].value)


def _dcp_resume(walk: Walk, call: ast.Call, model: ast.expr, optim: ast.expr) -> None:
    """``FSDP.optim_state_dict(m, o)`` filled by a DCP load in the same function: FSDP1's
    dict of an optimizer that has not stepped holds no state, so the load restored no
    moments; ``get_optimizer_state_dict`` holds it (lr 0 step), so the migration restores
    them. Marked, with the model."""
    analysis = walk.analysis
    function = analysis.names.function_of(call) or analysis.tree
    if not _fresh(analysis, optim, call):
        return
    statement = analysis.names.statement(call)
    names = {t.id for t in getattr(statement, "targets", []) if isinstance(t, ast.Name)}
    for node in ast.walk(function):
        if not (isinstance(node, ast.Call) and analysis.resolves_to(node.func, *DCP_LOADS)):
            continue
        used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
        if names & used or any(n is call for n in ast.walk(node)):
            break
    else:
        return
    ties, deferred = analysis.ties.of(model)
    message = (
        "a DCP resume through FSDP.optim_state_dict: on FSDP1 an optimizer that has not "
        "stepped gives no state, so this load restored no Adam moments; "
        "get_optimizer_state_dict gives its state, so the migrated run restores them and "
        "differs from the FSDP1 one from the first step after the resume (check which you "
        "want)"
    )
    analysis.add(
        CODE,
        call,
        message,
        Rewrite([], message, review=True),
        "MODELS" if ties or deferred else "RUN",
        ties=ties,
        deferred=deferred,
        quiet=True,
        holds=False,
    )


def _to_load(
    walk: Walk, call: ast.Call, options: Options | None, groups: frozenset[str], anchor
) -> None:
    """``o.load_state_dict(FSDP.optim_state_dict_to_load(...))``, or the same in two
    consecutive statements through a name used nowhere else."""
    analysis = walk.analysis
    parts = _to_load_parts(analysis, call)
    parent = analysis.names.parent.get(call)
    outer: ast.Call | None = None
    pair: tuple[ast.Assign, ast.stmt] | None = None
    if isinstance(parent, ast.Call) and _loads(parent, call):
        outer = parent
    elif isinstance(parent, ast.Assign):
        pair = _paired_load(walk, parent)
        outer = None if pair is None else _expression_call(pair[1])
    if parts is None:
        _runtime_call(
            walk, call, "optim_state_dict_to_load", "FSDP.optim_state_dict_to_load(...)", groups
        )
        return
    model, optim, state = (analysis.source(p) for p in parts)
    if options is None and not analysis.options.runtime_dependency and not walk.persistent:
        options = DEFAULT
    if options is None or "optim_load" in options.inexact or outer is None:
        if not analysis.options.runtime_dependency:
            analysis.add_tied(
                CODE,
                call,
                parts[0],
                "FSDP.optim_state_dict_to_load(...): use set_optimizer_state_dict",
                None,
                known=False,
                groups=groups,
            )
            return
        in_order = call.keywords or (call.args and call.args[0] is parts[0])
        if in_order:  # torch >= 2.1's order, or keywords: only the function changes
            edit = analysis.replace(call.func, "fsdp2_port.optim_state_dict_to_load")
        else:
            text = f"fsdp2_port.optim_state_dict_to_load({model}, {optim}, {state})"
            edit = analysis.replace(call, text)
        analysis.add(
            CODE,
            call,
            "kept: FSDP.optim_state_dict_to_load(...)",
            Rewrite(
                [edit],
                "FSDP.optim_state_dict_to_load -> fsdp2_port.optim_state_dict_to_load: " + _RUNTIME,
                [analysis.module_import("fsdp2_port")],
            ),
            "ALWAYS",
            groups=groups,
        )
        return
    walk.handled.add(outer)
    new = _new("set_optimizer_state_dict", [model, optim, state], options.optim_load)
    if pair is None:
        edits = [analysis.replace(outer, new.text)]
    else:
        assign, load = pair
        edits = [
            Edit(analysis.lines.start(assign), analysis.lines.end(assign), new.text),
            Edit(
                analysis.statement_start(load),
                analysis.lines.line_end(analysis.lines.end(load) - 1),
                "",
            ),
        ]
    ties, deferred = analysis.ties.of(parts[0])
    analysis.add(
        CODE,
        call,
        "kept: FSDP.optim_state_dict_to_load(...)",
        Rewrite(
            edits,
            "optim_state_dict_to_load + load_state_dict -> set_optimizer_state_dict(...)",
            _imports(walk, anchor or call.func, new),
        ),
        "ALWAYS",
        ties=ties,
        deferred=deferred,
        groups=groups,
    )


def _paired_load(walk: Walk, assign: ast.Assign) -> tuple[ast.Assign, ast.stmt] | None:
    """``osd = FSDP.optim_state_dict_to_load(...)`` directly followed by the statement
    ``o.load_state_dict(osd)``, with ``osd`` used nowhere else."""
    analysis = walk.analysis
    if len(assign.targets) != 1 or not isinstance(assign.targets[0], ast.Name):
        return None
    bindings = analysis.names.bindings_of(assign.targets[0])
    uses = analysis.uses_of(bindings[0]) if len(bindings) == 1 else []
    body = _block_of(analysis, assign)
    if len(uses) != 1 or body is None or body.index(assign) + 1 >= len(body):
        return None
    following = body[body.index(assign) + 1]
    call = _expression_call(following)
    if call is not None and _loads(call, uses[0]):
        return assign, following
    return None
