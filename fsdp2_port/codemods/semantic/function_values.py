"""Functions handed on as values: ``shard_fn = partial(shard_model, ...)`` given to a function
that calls it (``model = shard_fn(model)``).

A function of the run as a value is a ``refs.Function`` (``Ties``). A call of a value is a
``refs.CALLED`` passing whose receiver is what the called value may hold; the run routes it to
the functions the value may be (``Resolver``). A function value that reaches code the analysis
does not follow may be called there with anything: each file tells the run what it hands to
such code (``escaping``), and the run adds what it passes to a library, to a method of an object
of no known class, or to a called value.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from fsdp2_port.codemods.assumptions import CONTAINER_BUILTINS, NO_MODEL_BUILTINS
from fsdp2_port.codemods.refs import CALLED, MAY_BE_FUNCTION, Ref, Unknown
from fsdp2_port.codemods.semantic.values import PARTIAL, Ties

if TYPE_CHECKING:
    from fsdp2_port.codemods.names import Names

_DISPLAYS = (ast.List, ast.Tuple, ast.Set)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp)


def presets(ties: Ties, call: ast.Call) -> bool:
    """``functools.partial(f, ...)`` of a named ``f``: its other arguments are passed to ``f``."""
    return (
        bool(call.args)
        and isinstance(call.args[0], (ast.Name, ast.Attribute))
        and ties.parsed.resolves_to(call.func, PARTIAL)
    )


def called(ties: Ties, func: ast.expr) -> tuple[frozenset[str], frozenset[Ref]]:
    """The callee and receiver of a call of a value (``shard_fn(model)``): what the value may
    be, the unknown included (what such a call is given escapes)."""
    receiver = frozenset(r for r in ties._value(func) if isinstance(r, (*MAY_BE_FUNCTION, Unknown)))
    return (frozenset({CALLED}), receiver) if receiver else (frozenset(), frozenset())


def escaping(ties: Ties) -> frozenset[Ref]:
    """What this file hands, of what may be a function value, to code the analysis does not
    follow: arguments of builtins (but ``_inspects``), elements of displays, values stored into
    attributes, subscripts or names other modules read (a module's or a class's), what
    generators yield and lambdas return, the function of a ``partial`` with ``*args`` preset."""
    out: set[Ref] = set()
    for value in _handed_on(ties):
        if _may_hold_function(ties, value):
            out |= {r for r in ties._value(value) if isinstance(r, MAY_BE_FUNCTION)}
    return frozenset(out)


def _may_hold_function(ties: Ties, expr: ast.expr) -> bool:
    """Whether ``expr`` is of a form whose value ``Ties`` may follow to a function: a name,
    a choice between values, a ``partial``, a call of a function of the run."""
    if isinstance(expr, (ast.Name, ast.NamedExpr)):
        return True
    if isinstance(expr, ast.IfExp):
        return _may_hold_function(ties, expr.body) or _may_hold_function(ties, expr.orelse)
    if isinstance(expr, ast.BoolOp):
        return any(_may_hold_function(ties, v) for v in expr.values)
    if not isinstance(expr, ast.Call):
        return False
    qualified = ties.parsed.names.qualified(expr.func)
    return not qualified or any(q == PARTIAL or ties._modules.library(q) is None for q in qualified)


def _handed_on(ties: Ties) -> list[ast.expr]:
    names = ties.parsed.names
    return [*_elements(names), *_given_back(names), *_stored(ties), *_to_builtins(ties)]


def _elements(names: Names) -> list[ast.expr]:
    """The elements of displays and comprehensions (keys and values of dicts)."""
    found: list[ast.expr] = []
    for kind in _DISPLAYS:
        for node in names.by_type[kind]:
            assert isinstance(node, _DISPLAYS)
            if not isinstance(getattr(node, "ctx", None), ast.Store):
                found += node.elts
    for node in names.by_type[ast.Dict]:
        assert isinstance(node, ast.Dict)
        found += [k for k in node.keys if k is not None] + node.values
    for comprehension in _COMPREHENSIONS:
        for node in names.by_type[comprehension]:
            assert isinstance(node, _COMPREHENSIONS)
            found.append(node.elt)
    for node in names.by_type[ast.DictComp]:
        assert isinstance(node, ast.DictComp)
        found += [node.key, node.value]
    return found


def _given_back(names: Names) -> list[ast.expr]:
    """What generators yield and lambdas return."""
    found: list[ast.expr] = []
    for kind in (ast.Yield, ast.YieldFrom, ast.Lambda):
        for node in names.by_type[kind]:
            value = node.body if isinstance(node, ast.Lambda) else node.value  # type: ignore[attr-defined]
            if value is not None:
                found.append(value)
    return found


def _to_builtins(ties: Ties) -> list[ast.expr]:
    """The arguments of builtins but those that only inspect them, and the function of a
    ``partial`` with ``*args`` preset."""
    names = ties.parsed.names
    found: list[ast.expr] = []
    for node in names.by_type[ast.Call]:
        assert isinstance(node, ast.Call)
        qualified = names.qualified(node.func)
        if any(q.startswith("builtins.") and not _inspects(q) for q in qualified):
            found += [a.value if isinstance(a, ast.Starred) else a for a in node.args]
            found += [k.value for k in node.keywords]
        elif presets(ties, node) and any(isinstance(a, ast.Starred) for a in node.args):
            found.append(node.args[0])
    return found


def _inspects(builtin: str) -> bool:
    """A builtin whose result is no model and holds nothing of its arguments (``len``,
    ``isinstance``, ``print``): it neither keeps nor calls a function it is given."""
    return builtin in NO_MODEL_BUILTINS and builtin.partition(".")[2] not in CONTAINER_BUILTINS


def _stored(ties: Ties) -> list[ast.expr]:
    """Values assigned to attributes, subscripts, or names of a module or class scope."""
    names = ties.parsed.names
    found: list[ast.expr] = []
    for kind in (ast.Assign, ast.AnnAssign, ast.AugAssign):
        for node in names.by_type[kind]:
            assert isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign))
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if node.value is None:
                continue
            if any(_shared(ties, t) for t in targets):
                found.append(node.value)
    return found


def _shared(ties: Ties, target: ast.expr) -> bool:
    """An assignment target other code may read the value from."""
    if isinstance(target, (ast.Attribute, ast.Subscript, ast.Starred)):
        return True
    if isinstance(target, (ast.Tuple, ast.List)):
        return any(_shared(ties, t) for t in target.elts)
    scope = ties.parsed.names.scope_of(target)
    return scope is None or not scope.is_function
