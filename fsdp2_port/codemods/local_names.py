"""Names whose every read a module's ``Names`` see: a local, or a module-level name no other
module reads, in a scope with no ``del``, ``global``/``nonlocal`` or dynamic access
(``locals()``, ``eval`` ...) that could read or rebind it unseen."""

from __future__ import annotations

import ast
import weakref

from fsdp2_port.codemods.assumptions import DYNAMIC_SCOPE_CALLS, GLOBAL_SCOPE_CALLS
from fsdp2_port.codemods.names import Names, Scope

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def visible_only_here(names: Names, scope: Scope, name: str) -> bool:
    """A local; or a module-level name no other module reads (``visibility``), that no
    ``global``/``del`` anywhere in the module names. A class attribute never is: it is read
    as an attribute (``self.x``), wherever an instance goes."""
    if isinstance(scope.node, ast.ClassDef):
        return False
    if not isinstance(scope.node, ast.Module):
        return True
    if not names.seen.own(name):
        return False
    declared = (n for g in names.by_type[ast.Global] for n in g.names)  # type: ignore[attr-defined]
    deleted = (
        t.id for d in names.by_type[ast.Delete] for t in ast.walk(d) if isinstance(t, ast.Name)
    )
    return name not in {*declared, *deleted}


def seen_only_here(names: Names, scope: Scope, name: str) -> bool:
    """``visible_only_here``, and ``scope`` reads or rebinds ``name`` nowhere ``names`` cannot
    see (``opaque_scopes``): every read of it is one of ``names``'."""
    return visible_only_here(names, scope, name) and scope.node not in opaque_scopes(names, name)


def opaque_scopes(names: Names, naming: str | None = None) -> frozenset[ast.AST]:
    """Functions holding ``del``, ``global``, ``nonlocal`` (only those that name ``naming``,
    when given) or a dynamic call (``locals()`` ...) anywhere inside (nested scopes included),
    and the module when ``globals()``/``eval``/``exec`` is anywhere or ``locals()``/``vars()``
    at its top level: there a name may be read or rebound where ``names`` cannot see it.
    Found once per module and name."""
    known = _OPAQUE.setdefault(names, {})
    if naming not in known:
        known[naming] = _opaque_scopes(names, naming)
    return known[naming]


_OPAQUE: weakref.WeakKeyDictionary[Names, dict[str | None, frozenset[ast.AST]]] = (
    weakref.WeakKeyDictionary()
)


def _opaque_scopes(names: Names, naming: str | None) -> frozenset[ast.AST]:
    opaque: set[ast.AST] = set()
    dynamic = [
        call
        for call in names.by_type[ast.Call]
        if isinstance(call.func, ast.Name)  # type: ignore[attr-defined]
        and call.func.id in DYNAMIC_SCOPE_CALLS  # type: ignore[attr-defined]
        and not (call.func.id == "vars" and call.args)  # type: ignore[attr-defined]  # an object's
    ]
    if any(c.func.id in GLOBAL_SCOPE_CALLS or names.function_of(c) is None for c in dynamic):  # type: ignore[attr-defined]
        opaque.add(names.tree)
    hiding = [
        node
        for kind in (ast.Delete, ast.Global, ast.Nonlocal)
        for node in names.by_type[kind]
        if naming is None or naming in _named_by(node)
    ]
    for node in [*hiding, *dynamic]:
        opaque.update(a for a in names.ancestors(node) if isinstance(a, _FUNCTIONS))
    return frozenset(opaque)


def _named_by(statement: ast.AST) -> set[str]:
    """The names a ``del``/``global``/``nonlocal`` statement names."""
    if isinstance(statement, (ast.Global, ast.Nonlocal)):
        return set(statement.names)
    return {n.id for n in ast.walk(statement) if isinstance(n, ast.Name)}
