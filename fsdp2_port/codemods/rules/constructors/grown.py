"""A keyword-argument dict grown before its constructor reads it, read key by key.

``kw = dict(...)`` (or ``{...}``, literal keys) bound in the constructor's block, then grown by
``kw["key"] = value`` and ``kw.update(key=value, ...)`` statements, each alone or the body of
an ``if <test>:`` without ``else``, and spread by one constructor (``FSDP(m, **kw)``):
SpecForge's dataflow backend. Its entries are those of the binding and of every store, each
key written once; a stored key under an ``if`` is *conditional* on that test.

Invariant: the stores and their ``if``s stand together right before the constructor's
statement (nothing else in between), and their tests and values are evaluated without effect
(no call but FSDP1's own constructors and ``functools.partial``, no ``:=``): so reading them
at the constructor, as the plain form does, reads what FSDP1 would have read. Only keys
whose FSDP2 form can be conditional code are accepted under a test: ``ignored_modules``,
``auto_wrap_policy`` and the arguments with no FSDP2 effect.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from fsdp2_port.codemods import spreads
from fsdp2_port.codemods.analysis import FileAnalysis
from fsdp2_port.codemods.assumptions import FSDP1_NO_EFFECT_ARGUMENTS
from fsdp2_port.codemods.names import Binding

#: What the plain form writes as conditional code (see ``pure``): the rest is read at run time.
CONDITIONAL = ("ignored_modules", "auto_wrap_policy", *FSDP1_NO_EFFECT_ARGUMENTS.names)


@dataclass(frozen=True)
class Grown:
    """A grown dict's entries, the tests of the conditional ones (``when``), the statements
    that grow it (removed with the binding once the plain form reads them), its constructor."""

    entries: dict[str, ast.expr]
    when: dict[str, ast.expr]
    statements: tuple[ast.stmt, ...]
    users: frozenset[ast.Call]


def grown(analysis: FileAnalysis, binding: Binding) -> Grown | None:
    """``binding``'s dict read key by key, or None when it is not grown as above."""
    statement = analysis.names.statement(binding.node)
    entries = spreads.dict_entries(analysis.names, binding.value) if binding.value else None
    block = _block_of(analysis, statement)
    if entries is None or block is None:
        return None
    users: set[ast.Call] = set()
    stores: dict[ast.stmt, list[tuple[str, ast.expr]]] = {}
    for use in analysis.uses_of(binding):
        call = _spread_by(analysis, use)
        if call is not None:
            users.add(call)
            continue
        found = _store(analysis, use)
        if found is None:
            return None
        stores[analysis.names.statement(use)] = found
    if len(users) != 1 or not stores:
        return None
    (call,) = users
    return _read(analysis, block, statement, analysis.names.statement(call), stores, entries, call)


def _read(
    analysis: FileAnalysis,
    block: list[ast.stmt],
    binding: ast.stmt,
    target: ast.stmt,
    stores: dict[ast.stmt, list[tuple[str, ast.expr]]],
    entries: dict[str, ast.expr],
    call: ast.Call,
) -> Grown | None:
    """The entries once the stores are placed: each a statement of ``block`` or the body of
    an ``if`` of it, all of them together right before ``target``, after ``binding``."""
    if binding not in block or target not in block:
        return None
    first = block.index(target)
    while first > 0 and _grows(block[first - 1], stores):
        first -= 1
    placed = block[first : block.index(target)]
    if block.index(binding) >= first or sum(_count(s, stores) for s in placed) != len(stores):
        return None
    out, when = dict(entries), {}
    for statement in placed:
        test = statement.test if isinstance(statement, ast.If) else None
        body = statement.body if isinstance(statement, ast.If) else [statement]
        if test is not None and not _effect_free(analysis, test):
            return None
        for key, value in (entry for s in body for entry in stores[s]):
            if key in out or not _effect_free(analysis, value):
                return None  # written twice: its value depends on the order
            if test is not None and key not in CONDITIONAL:
                return None
            out[key] = value
            if test is not None:
                when[key] = test
    return Grown(out, when, tuple(placed), frozenset({call}))


def _grows(statement: ast.stmt, stores: dict[ast.stmt, list[tuple[str, ast.expr]]]) -> bool:
    """A store, or an ``if`` without ``else`` whose body is stores only."""
    if isinstance(statement, ast.If):
        return not statement.orelse and all(s in stores for s in statement.body)
    return statement in stores


def _count(statement: ast.stmt, stores: dict[ast.stmt, list[tuple[str, ast.expr]]]) -> int:
    return len(statement.body) if isinstance(statement, ast.If) else int(statement in stores)


def _block_of(analysis: FileAnalysis, statement: ast.stmt) -> list[ast.stmt] | None:
    """The statement list that holds ``statement`` (a function's, an ``if``'s branch...)."""
    parent = analysis.names.parent.get(statement)
    for field in ("body", "orelse", "finalbody", "handlers"):
        block = getattr(parent, field, None)
        if isinstance(block, list) and any(s is statement for s in block):
            return block
    return None


def _spread_by(analysis: FileAnalysis, use: ast.Name) -> ast.Call | None:
    """The constructor that spreads ``use`` (``FSDP(m, **use)``), if any."""
    keyword = analysis.names.parent.get(use)
    call = analysis.names.parent.get(keyword) if keyword is not None else None
    if (
        isinstance(keyword, ast.keyword)
        and keyword.arg is None
        and isinstance(call, ast.Call)
        and call in analysis.ties.constructors
        and call not in analysis.ties.factories
    ):
        return call
    return None


def _store(analysis: FileAnalysis, use: ast.Name) -> list[tuple[str, ast.expr]] | None:
    """The entries a statement stores through ``use``: ``use["key"] = value`` or
    ``use.update(key=value, ...)``, each a statement of its own."""
    parent = analysis.names.parent.get(use)
    statement = analysis.names.statement(use)
    if isinstance(parent, ast.Subscript) and isinstance(parent.ctx, ast.Store):
        key = parent.slice
        if (
            isinstance(statement, ast.Assign)
            and statement.targets == [parent]
            and isinstance(key, ast.Constant)
            and isinstance(key.value, str)
        ):
            return [(key.value, statement.value)]
        return None
    call = analysis.names.parent.get(parent) if isinstance(parent, ast.Attribute) else None
    if (
        isinstance(parent, ast.Attribute)
        and parent.attr == "update"
        and isinstance(call, ast.Call)
        and call.func is parent
        and not call.args
        and all(k.arg is not None for k in call.keywords)
        and isinstance(statement, ast.Expr)
        and statement.value is call
    ):
        return [(k.arg, k.value) for k in call.keywords]  # type: ignore[misc]
    return None


def _effect_free(analysis: FileAnalysis, value: ast.expr) -> bool:
    """Evaluating ``value`` changes nothing (and nothing it reads changes it in between):
    no ``:=``, no call but FSDP1's own constructors (``MixedPrecision(...)``, a policy) and
    ``functools.partial``."""
    for node in ast.walk(value):
        if isinstance(node, ast.NamedExpr):
            return False
        if isinstance(node, ast.Call) and not (
            analysis.fsdp1_name(node.func) is not None
            or analysis.resolves_to(node.func, "functools.partial")
        ):
            return False
    return True
