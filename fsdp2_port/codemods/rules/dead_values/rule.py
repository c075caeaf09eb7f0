"""F2P012: FSDP1 values the migration left unread, once per file, before the import clean-up.

A statement ``NAME = <FSDP1 value>`` (or annotated) goes when the migration made it dead:

- the value is a call of an FSDP1 config or policy class (``FullStateDictConfig(...)``,
  ``MixedPrecision(...)``, ``ModuleWrapPolicy(...)``, ...), ``functools.partial`` of an FSDP1
  wrap policy function, or a member of an FSDP1 enum (``ShardingStrategy.FULL_SHARD``), with
  arguments that cannot have side effects (constants, names, attribute chains, lambdas and
  containers of those): removing it cannot change what the program does;
- ``NAME`` is bound once, in a function (a local) or at module level when private (``_NAME``)
  or in a script (``if __name__ == "__main__":``); nothing reads it (names, string annotations,
  ``__all__``, nested scopes), and nothing in its scope can reach it unseen (``del``,
  ``global``/``nonlocal``, ``locals()``/``vars()``/``globals()``/``eval``/``exec``);
- the input had the same statement, text for text, and read the name: a binding the user never
  read is the user's business;
- the statement has its lines to itself, no marker above it, no ``# fsdp2-port: ignore``, and
  its block keeps another statement (no ``pass`` is ever written).

A public module-level name of an importable module is never removed: another module may import
it. A second run removes nothing more: what is left unread was unread in its input.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import ClassVar

from fsdp2_port.codemods import fsdp1, markers, trees
from fsdp2_port.codemods.assumptions import (
    FSDP1_POLICY_HELPERS,
    FSDP1_VALUE_CLASSES,
    FSDP1_WRAP_POLICY_FUNCTIONS,
)
from fsdp2_port.codemods.local_names import opaque_scopes, visible_only_here
from fsdp2_port.codemods.names import Binding, Names, Scope, names_of
from fsdp2_port.codemods.rules.base import Code, Fixes, Tidying
from fsdp2_port.codemods.text import Edit, LineIndex, back

#: ``functools.partial`` of one of these is a wrap policy: FSDP1's public functions and the
#: private ones users import.
_WRAP_POLICY_FUNCTIONS = FSDP1_WRAP_POLICY_FUNCTIONS.members | FSDP1_POLICY_HELPERS.members

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


class DeadValuesRule:
    """Runs once per file, after every rewrite, before the import clean-up (F2P001)."""

    STAGE: ClassVar[str] = "after_apply"
    CODE: ClassVar[str] = "F2P012"
    CODES: ClassVar[dict[str, Code]] = {
        "F2P012": Code(
            summary="FSDP1 configs, policies and enum members bound to a name the migration "
            "left unread are removed",
            topic="FSDP1 values left unread",
            rewritten=(
                "`NAME = FullStateDictConfig(...)` / `MixedPrecision(...)` / "
                "`ModuleWrapPolicy(...)` / `functools.partial(<FSDP1 wrap policy>, ...)` / "
                "`ShardingStrategy.X` (and the other FSDP1 configs, policies and enums) whose "
                "only reads the migration rewrote: removed when its arguments have no side "
                "effects and the name is a local, or a private or script module-level name; a "
                "binding already unread in the input is left alone"
            ),
            marked="—",
            proven_by=(
                "tests/test_type_tests_and_scaler.py::test_type_tests_configs_and_scaler_run_as_fsdp1_did",
            ),
        ),
    }
    NEEDS: ClassVar[tuple[str, ...]] = ("F2P002", "F2P003", "F2P004", "F2P005", "F2P008")
    EMITS: ClassVar[dict[str, str]] = {}

    def fix(self, tidying: Tidying) -> Fixes:
        lines, applied = tidying.lines, tidying.applied
        dead = find(tidying.names, lines, tidying.original, applied.edits, applied.starts)
        return Fixes(
            edits=[removal(lines, d) for d in dead],
            findings=[(tidying.to_input(lines.start(d.target)), d.message()) for d in dead],
            removed=[lines.span(d.statement) for d in dead],
        )


@dataclass(frozen=True)
class Dead:
    """One statement to remove: it binds ``target`` to the FSDP1 value named ``what``."""

    statement: ast.Assign | ast.AnnAssign
    target: ast.Name
    what: str

    def message(self) -> str:
        return f"FSDP1 value {self.what} bound to {self.target.id}, no longer read, removed"


def find(
    names: Names,
    lines: LineIndex,
    original: str,
    edits: Sequence[Edit],
    starts: Sequence[int],
) -> list[Dead]:
    """The dead FSDP1 value bindings of the new text (``names``/``lines``) that the migration
    made dead; ``edits``/``starts`` lead from ``original`` to the new text (``apply_tracked``)."""
    uses = names.uses()
    ignored = markers.ignored_lines(lines.text)
    opaque = opaque_scopes(names)
    found = [
        dead
        for scope, binding in _single_bindings(names)
        if not uses.get(binding)
        and scope.node not in opaque
        and visible_only_here(names, scope, binding.name)
        and (dead := _bound_value(names, binding)) is not None
        and _removable_text(lines, dead.statement, ignored)
    ]
    found = _keeping_blocks(names, found)
    return _read_in_input(found, lines, original, edits, starts, names.module_name) if found else []


def removal(lines: LineIndex, dead: Dead) -> Edit:
    """The edit that deletes the statement's lines (``find`` checked it has them to itself),
    with the blank lines above it when a blank line (or the end) follows: the blank lines
    around it do not add up."""
    start, end = lines.span(dead.statement)
    first = lines.line_of(start)
    after = lines.line_end(max(end - 1, start))
    if after == len(lines.text) or not lines.text[after : lines.line_end(after)].strip():
        while first > 1 and not lines.lines[first - 2].strip():
            first -= 1
    return Edit(lines.starts[first - 1], after, "")


def _single_bindings(names: Names) -> Iterator[tuple[Scope, Binding]]:
    """Each name bound exactly once in a function or at module level, by an assignment."""
    for scope in names.scopes.values():
        if not isinstance(scope.node, (*_FUNCTIONS, ast.Module)):
            continue
        for bindings in scope.bindings.values():
            if len(bindings) == 1 and bindings[0].kind == "assign":
                yield scope, bindings[0]


def _bound_value(names: Names, binding: Binding) -> Dead | None:
    """The statement to remove when ``binding`` is ``NAME = <FSDP1 value>`` (or annotated)."""
    target, value = binding.node, binding.value
    statement = names.parent.get(target)
    if not (
        isinstance(statement, (ast.Assign, ast.AnnAssign))
        and isinstance(target, ast.Name)
        and value is not None
        and statement.value is value
    ):
        return None
    what = _fsdp1_value(names, value)
    return None if what is None else Dead(statement, target, what)


def _fsdp1_value(names: Names, value: ast.expr) -> str | None:
    """How to name ``value`` when it is an FSDP1 value removing which changes nothing."""
    if isinstance(value, ast.Attribute):
        member = fsdp1.first(names.qualified(value))
        return member if fsdp1.enum_of_member(member) else None
    if not isinstance(value, ast.Call) or not _pure_arguments(value):
        return None
    called = fsdp1.first(names.qualified(value.func))
    if called in FSDP1_VALUE_CLASSES:
        return called
    if "functools.partial" in names.qualified(value.func) and value.args:
        policy = fsdp1.first(names.qualified(value.args[0]))
        if policy in _WRAP_POLICY_FUNCTIONS:
            return f"functools.partial({policy}, ...)"
    return None


def _pure_arguments(call: ast.Call) -> bool:
    """Every argument is evaluated without side effects (no ``*``/``**`` unpacking)."""
    return all(_pure(a) for a in call.args) and all(
        k.arg is not None and _pure(k.value) for k in call.keywords
    )


def _pure(node: ast.expr) -> bool:
    """Constants, names, attribute chains, lambdas, ``-1``, and containers of those."""
    if isinstance(node, (ast.Constant, ast.Name, ast.Lambda)):
        return True
    if isinstance(node, ast.Attribute):
        return _pure(node.value)
    if isinstance(node, ast.UnaryOp):
        return _pure(node.operand)
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return all(_pure(e) for e in node.elts)
    if isinstance(node, ast.Dict):
        return all(k is not None and _pure(k) for k in node.keys) and all(
            _pure(v) for v in node.values
        )
    return False


def _removable_text(lines: LineIndex, statement: ast.stmt, ignored: frozenset[int]) -> bool:
    """The statement has its lines to itself (a trailing comment goes with it), no marker
    above it and no ``# fsdp2-port: ignore`` on any of its lines."""
    start, end = lines.span(statement)
    line_start, line_end = lines.line_start(start), lines.line_end(max(end - 1, start))
    after = lines.text[end:line_end].strip()
    return (
        not lines.text[line_start:start].strip()
        and (not after or after.startswith("#"))
        and not markers.existing_above(lines, line_start)
        and not ignored & set(range(statement.lineno, (statement.end_lineno or 0) + 1))
    )


def _keeping_blocks(names: Names, found: list[Dead]) -> list[Dead]:
    """``found`` less the statements of blocks they would leave empty."""
    blocks: dict[int, int] = {}
    for dead in found:
        block = _block(names, dead.statement)
        blocks[id(block)] = blocks.get(id(block), len(block)) - 1
    return [d for d in found if blocks[id(_block(names, d.statement))] > 0]


def _block(names: Names, statement: ast.stmt) -> list[ast.stmt]:
    """The statement list that holds ``statement`` (a body, ``orelse``, ``finalbody``)."""
    parent = names.parent[statement]
    return next(
        getattr(parent, f)
        for f in ("body", "orelse", "finalbody")
        if statement in getattr(parent, f, [])
    )


def _read_in_input(
    found: list[Dead],
    lines: LineIndex,
    original: str,
    edits: Sequence[Edit],
    starts: Sequence[int],
    module_name: str,
) -> list[Dead]:
    """Those of ``found`` whose statement the input had, text for text, with reads of its name."""
    before = names_of(trees.parse(original), module_name)
    before_lines = LineIndex(original)
    uses = before.uses()
    stores = {
        before_lines.start(n): n
        for n in before.by_type[ast.Name]
        if isinstance(n.ctx, ast.Store)  # type: ignore[attr-defined]
    }
    kept = []
    for dead in found:
        start, end = lines.span(dead.statement)
        if original[back(start, edits, starts) : back(end, edits, starts)] != lines.text[start:end]:
            continue
        node = stores.get(back(lines.start(dead.target), edits, starts))
        if not isinstance(node, ast.Name) or node.id != dead.target.id:
            continue
        bindings = before.lookup(node.id, before.scope_of(node))[1]
        if any(b.node is node and uses.get(b) for b in bindings):
            kept.append(dead)
    return kept
