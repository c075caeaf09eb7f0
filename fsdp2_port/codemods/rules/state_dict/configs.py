"""FSDP1 state-dict configs read where a block or a call gets them: a literal config, or one
bound to a name read only there (its binding goes with the call that reads it)."""

from __future__ import annotations

import ast

from fsdp2_port.codemods import calls
from fsdp2_port.codemods.names import Binding
from fsdp2_port.codemods.plan import Rewrite
from fsdp2_port.codemods.rules.state_dict.options import FSDP1_DEFAULTS, Options, _block_options
from fsdp2_port.codemods.rules.state_dict.walk import CODE, Walk, _block_of
from fsdp2_port.codemods.text import Edit


def _literal(walk: Walk, bound: dict[str, calls.Argument], kind: str) -> Options | None:
    """The options of a literal FULL/SHARDED block, each call's its own (``Options``), or
    None (run-time values)."""
    if kind not in ("FULL_STATE_DICT", "SHARDED_STATE_DICT"):
        return None
    full = kind == "FULL_STATE_DICT"
    model = _config(walk, bound.get("state_dict_config"), full, "StateDictConfig")
    optim = _config(walk, bound.get("optim_state_dict_config"), full, "OptimStateDictConfig")
    if model is None or optim is None:
        return None
    return _block_options(kind, model, optim)


def _config(
    walk: Walk, arg: calls.Argument | None, full: bool, family: str
) -> tuple[bool, bool] | None:
    """``(offload_to_cpu, rank0_only)`` of a literal config (FSDP1's defaults when absent)."""
    analysis = walk.analysis
    if arg is None or calls.is_none(arg.value):
        return FSDP1_DEFAULTS[family]
    value: ast.AST = arg.value
    if isinstance(value, ast.Name):
        binding = _reaching(walk, value)
        if binding is None or binding.value is None:
            return None
        if analysis.sole_binding(value) is None and _reads(walk, binding) != [value]:
            return None
        value = binding.value
    return _flags(walk, value, ("Full" if full else "Sharded") + family, family)


def _flags(walk: Walk, value: ast.AST, expected: str, family: str) -> tuple[bool, bool] | None:
    """``(offload_to_cpu, rank0_only)`` of ``expected(...)`` with literal booleans, the
    class's defaults (``FSDP1_DEFAULTS[family]``) filled in; None for another call, a
    run-time value or ``_use_dtensor=True`` (DCP's options never set it)."""
    if not (isinstance(value, ast.Call) and walk.analysis.fsdp1_name(value.func) == expected):
        return None
    names = ["offload_to_cpu"] + (["rank0_only"] if expected.startswith("Full") else [])
    bound = calls.bind(value, [*names, "_use_dtensor"])
    if bound is None:
        return None
    flags = {name: calls.literal_bool(arg.value) for name, arg in bound.items()}
    if any(v is None for v in flags.values()) or flags.get("_use_dtensor"):
        return None
    offload, rank0_only = FSDP1_DEFAULTS[family]
    return (
        bool(flags.get("offload_to_cpu", offload)),
        bool(flags.get("rank0_only", rank0_only)),
    )


def _drop_config_binding(walk: Walk, arg: calls.Argument | None, group: frozenset[str]) -> None:
    """A config bound to a name just for this site (same scope, read only there) goes."""
    analysis = walk.analysis
    if arg is None or not isinstance(arg.value, ast.Name):
        return
    binding = _reaching(walk, arg.value)
    if binding is None or _reads(walk, binding) != [arg.value]:
        return
    statement = analysis.names.statement(binding.node)
    if not isinstance(statement, ast.Assign) or analysis.names.scope_of(
        statement
    ) is not analysis.names.scope_of(arg.value):
        return
    start = analysis.statement_start(statement)
    analysis.add(
        CODE,
        statement,
        "kept: a state-dict config binding",
        Rewrite(
            [Edit(start, analysis.lines.line_end(analysis.lines.end(statement) - 1), "")],
            "state-dict config binding removed (its only use was rewritten)",
        ),
        "ALWAYS",
        groups=group,
        quiet=True,  # a value only: its call's marker says why it stays
    )


def _settings(walk: Walk, arg: calls.Argument | None, expected: str) -> tuple[bool, bool] | None:
    """``(offload_to_cpu, rank0_only)`` of an exactly known config, FSDP1's defaults filled
    in; None when not literal, of another class, with ``_use_dtensor=True``, or a name read
    anywhere else."""
    analysis = walk.analysis
    family = expected.removeprefix("Full").removeprefix("Sharded")
    if arg is None or calls.is_none(arg.value):
        return FSDP1_DEFAULTS[family]
    value: ast.AST = arg.value
    if isinstance(value, ast.Name):
        binding = _reaching(walk, value)
        if (
            binding is None
            or binding.value is None
            or _reads(walk, binding) != [value]
            or analysis.names.scope_of(binding.node) is not analysis.names.scope_of(value)
        ):
            return None
        value = binding.value
    return _flags(walk, value, expected, family)


def _reaching(walk: Walk, name: ast.Name) -> Binding | None:
    """The one ``name = value`` assignment a read sees: the name's sole binding in its
    scope; where a function binds the name more than once (``save_policy`` for the model,
    then for the optimizer), the last assignment before the read in the read's own
    statement list, with none of the name's other bindings in between, all of them plain
    assignments, and no ``global``/``nonlocal`` of it."""
    analysis = walk.analysis
    sole = analysis.sole_binding(name)
    if sole is not None:
        return sole
    bindings = analysis.names.bindings_of(name)
    scope = analysis.names.scope_of(name)
    if (
        len(bindings) < 2
        or any(b.kind != "assign" or b.value is None for b in bindings)
        or any(analysis.names.scope_of(b.node) is not scope for b in bindings)
        or name.id in scope.globals | scope.nonlocals
        or not scope.is_function
    ):
        return None
    statement = analysis.names.statement(name)
    block = _block_of(analysis, statement)
    if block is None:
        return None
    earlier = block[: block.index(statement)]
    before = [b for b in bindings if analysis.names.statement(b.node) in earlier]
    if not before:
        return None
    last = max(before, key=lambda b: analysis.lines.start(b.node))
    start, end = analysis.lines.start(last.node), analysis.lines.start(name)
    if any(b is not last and start < analysis.lines.start(b.node) < end for b in bindings):
        return None
    return last


def _reads(walk: Walk, binding: Binding) -> list[ast.Name] | None:
    """The reads that may see ``binding``: every read of the name when it is its scope's
    only binding; else those after it up to the name's next binding, the binding outside
    any loop and no nested scope reading the name (None otherwise: unknown)."""
    analysis = walk.analysis
    uses = analysis.uses_of(binding)
    scope = analysis.names.scope_of(binding.node)
    bindings = scope.bindings.get(binding.name, [])
    if len(bindings) == 1:
        return uses
    function = analysis.names.function_of(binding.node)
    for ancestor in analysis.names.ancestors(binding.node):
        if ancestor is function:
            break
        if isinstance(ancestor, (ast.For, ast.AsyncFor, ast.While)):
            return None
    if any(analysis.names.scope_of(u) is not scope for u in uses):
        return None  # a nested function reads it, at any time
    start = analysis.lines.start(binding.node)
    later = [analysis.lines.start(b.node) for b in bindings]
    end = min((at for at in later if at > start), default=len(analysis.text))
    return [u for u in uses if start < analysis.lines.start(u) < end]
