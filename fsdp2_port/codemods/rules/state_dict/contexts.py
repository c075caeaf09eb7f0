"""``with FSDP.state_dict_type(m, ...):`` blocks: a literal block whose body takes state dicts
only through the model loses its ``with`` (its calls become DCP's); any other keeps FSDP1's
meaning on ``fsdp2_port``."""

from __future__ import annotations

import ast

from fsdp2_port.codemods import calls
from fsdp2_port.codemods.analysis import FileAnalysis
from fsdp2_port.codemods.assumptions import (
    FSDP1_CHECKPOINT_FUNCTIONS,
    FSDP1_STATE_DICT_TYPE_PARAMETERS,
    SAFE_METHODS,
    SAFE_MODULES,
)
from fsdp2_port.codemods.plan import Requirement, Rewrite
from fsdp2_port.codemods.rules.state_dict.configs import _drop_config_binding, _literal
from fsdp2_port.codemods.rules.state_dict.emit import _runtime_call
from fsdp2_port.codemods.rules.state_dict.module_calls import _call
from fsdp2_port.codemods.rules.state_dict.optimizer import _to_load_inside, static_optim
from fsdp2_port.codemods.rules.state_dict.options import Options
from fsdp2_port.codemods.rules.state_dict.walk import _FSDP, CODE, Walk
from fsdp2_port.codemods.text import Edit


def _block_calls(analysis: FileAnalysis, context: ast.Call) -> list[ast.Call]:
    """The calls in the body of the ``with`` whose item is ``context``."""
    item = analysis.names.parent.get(context)
    statement = analysis.names.parent.get(item) if isinstance(item, ast.withitem) else None
    if not isinstance(statement, ast.With):
        return []
    return [n for s in statement.body for n in ast.walk(s) if isinstance(n, ast.Call)]


def _unwrap(analysis: FileAnalysis, statement: ast.With) -> list[Edit]:
    """Edits that remove a ``with`` header and take its body one level out.

    The header's trailing comment stays, as a comment line above the body. Lines inside a
    multi-line string are not touched (their leading whitespace is data).
    """
    text = analysis.text
    start = analysis.statement_start(statement)
    indent = analysis.lines.indent_at(start)
    first = statement.body[0]
    body_start = analysis.lines.start(first)
    colon = text.rindex(":", analysis.lines.end(statement.items[-1].context_expr), body_start)
    if analysis.lines.line_of(colon) == analysis.lines.line_of(body_start):
        return [Edit(start + len(indent), body_start, "")]
    header_end = analysis.lines.line_end(colon)
    comment = text[colon + 1 : header_end].strip()
    keep = f"{indent}{comment}{analysis.lines.newline()}" if comment.startswith("#") else ""
    edits = [Edit(start, header_end, keep)]
    step = len(analysis.lines.indent_at(body_start)) - len(indent)
    protected = _string_continuations(statement)
    last_line = analysis.lines.line_of(analysis.lines.end(statement.body[-1]) - 1)
    for line in range(analysis.lines.line_of(header_end), last_line + 1):
        if line in protected:
            continue
        line_start = analysis.lines.starts[line - 1]
        remove = min(step, len(analysis.lines.indent_at(line_start)))
        if remove:
            edits.append(Edit(line_start, line_start + remove, ""))
    return edits


def _string_continuations(statement: ast.With) -> set[int]:
    """Lines that start inside a multi-line string literal of ``statement``'s body."""
    lines: set[int] = set()
    for node in ast.walk(statement):
        if (
            isinstance(node, (ast.Constant, ast.JoinedStr))
            and node.end_lineno
            and node.end_lineno > node.lineno
        ):
            if isinstance(node, ast.JoinedStr) or isinstance(node.value, (str, bytes)):
                lines.update(range(node.lineno + 1, node.end_lineno + 1))
    return lines


def _context(walk: Walk, call: ast.Call) -> None:
    analysis = walk.analysis
    walk.handled.add(call)
    bound = calls.bind(call, FSDP1_STATE_DICT_TYPE_PARAMETERS.names)
    if bound is None or "module" not in bound or "state_dict_type" not in bound:
        _runtime_call(
            walk, call, "state_dict_type", "FSDP.state_dict_type(...) with unusual arguments"
        )
        return
    kind = (analysis.fsdp1_name(bound["state_dict_type"].value) or "").removeprefix(
        "StateDictType."
    )
    item = analysis.names.parent.get(call)
    statement = analysis.names.parent.get(item) if isinstance(item, ast.withitem) else None
    if isinstance(statement, ast.With):  # the body's calls follow the block, never a default
        block_calls = [n for s in statement.body for n in ast.walk(s) if isinstance(n, ast.Call)]
    else:
        block_calls = []
    # a ``with`` of this one item, binding nothing: the one the rewrites can remove
    block = (
        statement
        if isinstance(statement, ast.With)
        and len(statement.items) == 1
        and statement.items[0].optional_vars is None
        else None
    )
    if kind == "LOCAL_STATE_DICT":
        if block is not None and _inert(walk, call, block, bound["module"].value):
            return
        walk.handled.update(block_calls)
        analysis.add_tied(
            CODE,
            call,
            bound["module"].value,
            "LOCAL_STATE_DICT has no FSDP2 form: save the sharded state dict with DCP instead",
            None,
            known=False,
        )
        return
    literal = _literal(walk, bound, kind)
    if block is not None and isinstance(literal, Options):
        group = frozenset({f"state_dict:{analysis.site_id(call)}"})
        if _pure_block(walk, call, block, bound["module"].value, literal, group):
            return
    _runtime_call(walk, call, "state_dict_type", "an FSDP1 state-dict block")
    for node in block_calls:
        if node not in walk.handled:
            _call(walk, node, None, frozenset(), runtime_only=True, block=bound["module"].value)
    walk.handled.update(block_calls)


def _pure_block(
    walk: Walk,
    call: ast.Call,
    statement: ast.With,
    model: ast.expr,
    options: Options,
    group: frozenset[str],
) -> bool:
    """The block's state-dict calls rewritten and the ``with`` removed; False (nothing
    added) when the body calls code that may take a state dict itself."""
    analysis = walk.analysis
    text = analysis.source(model)
    body = [n for s in statement.body for n in ast.walk(s) if isinstance(n, ast.Call)]
    ours = [n for n in body if n not in walk.handled and _is_state_call(walk, n, text)]
    if any(not _safe(walk, n) for n in body if n not in ours and n not in walk.handled):
        return False
    if any(_needs(walk, n, text) in options.inexact for n in ours if n not in walk.handled):
        return False  # no StateDictOptions says this config for that call: the runtime form
    if any(_needs(walk, n, text) == "optim" and not static_optim(n) for n in ours):
        return False  # read at run time: under the block's settings, so the block stays
    for node in ours:
        if node not in walk.handled:
            _call(walk, node, options, group, anchor=call.func, model=text)
    bound = calls.bind(call, FSDP1_STATE_DICT_TYPE_PARAMETERS.names)
    for name in ("state_dict_config", "optim_state_dict_config"):
        _drop_config_binding(walk, bound.get(name), group)  # type: ignore[union-attr]
    message = "with FSDP.state_dict_type(...) removed: FSDP2 chooses the state dict per call"
    if options.note:
        message += "; " + options.note
    _without_with(walk, call, statement, model, message, group, exact=not options.note)
    return True


def _inert(walk: Walk, call: ast.Call, statement: ast.With, model: ast.expr) -> bool:
    """A block whose body reads no state-dict type (an optimizer's own ``state_dict()``,
    ``torch.save``): the ``with`` is removed, whatever type it sets (Lumina's
    LOCAL_STATE_DICT around ``torch.save(opt.state_dict(), ...)``)."""
    text = walk.analysis.source(model)
    body = [n for s in statement.body for n in ast.walk(s) if isinstance(n, ast.Call)]
    if any(_is_state_call(walk, n, text) or not _safe(walk, n) for n in body):
        return False
    message = (
        "with FSDP.state_dict_type(...) removed: nothing in its block reads the state-dict "
        "type it sets"
    )
    _without_with(walk, call, statement, model, message, frozenset())
    walk.handled.update(body)
    return True


def _without_with(
    walk: Walk,
    call: ast.Call,
    statement: ast.With,
    model: ast.expr,
    message: str,
    group: frozenset[str],
    exact: bool = True,
) -> None:
    """The site that removes the ``with`` (its body dedented): right on any model when the
    block's calls say exactly what its configs did (``exact``); else (``rank0_only`` without
    offload: every rank then takes the full state) only with the models that migrate, its
    group with it: on a model that stays, the FSDP1 block stays, marked, right as it is."""
    ties, deferred = walk.analysis.ties.of(model)
    requirement: Requirement = "ALWAYS" if exact else "MODELS" if ties or deferred else "ANY"
    walk.analysis.add(
        CODE,
        call,
        "kept: FSDP.state_dict_type(...) block",
        Rewrite(_unwrap(walk.analysis, statement), message),
        requirement,
        ties=ties,
        deferred=deferred,
        groups=group,
    )


def _safe(walk: Walk, call: ast.Call) -> bool:
    """A call that cannot be taking the model's state dict under the block's type."""
    names = walk.analysis.names.qualified(call.func)
    if names & FSDP1_CHECKPOINT_FUNCTIONS.members:
        return False
    assumed = walk.analysis.assumed
    if names and all(
        assumed.takes(SAFE_MODULES, n, call, member=n.startswith(SAFE_MODULES.names)) for n in names
    ):
        return True
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr in ("state_dict", "load_state_dict"):
        return not walk.analysis.ties.of(func.value)[0]  # another module's: not this model's
    return isinstance(func, ast.Attribute) and assumed.takes(SAFE_METHODS, func.attr, call)


def _needs(walk: Walk, call: ast.Call, model: str) -> str | None:
    """The ``Options`` field a block's state-dict call becomes a DCP call with."""
    name = walk.analysis.fsdp1_name(call.func)
    if name == _FSDP + "optim_state_dict":
        return "optim"
    if name == _FSDP + "optim_state_dict_to_load" or _to_load_inside(walk.analysis, call):
        return "optim_load"
    func = call.func
    if isinstance(func, ast.Attribute) and walk.analysis.source(func.value) == model:
        return {"state_dict": "model", "load_state_dict": "load"}.get(func.attr)
    return None


def _is_state_call(walk: Walk, call: ast.Call, model: str) -> bool:
    name = walk.analysis.fsdp1_name(call.func)
    if name in (_FSDP + "optim_state_dict", _FSDP + "optim_state_dict_to_load"):
        return True
    func = call.func
    return (
        isinstance(func, ast.Attribute)
        and func.attr in ("state_dict", "load_state_dict")
        and walk.analysis.source(func.value) == model
    ) or _to_load_inside(walk.analysis, call)
