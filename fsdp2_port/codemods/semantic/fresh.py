"""Objects a function has just built and not yet handed to anyone ("fresh"): no FSDP wrapper,
nor a module sharded in place, so what FSDP1 and FSDP2 do to models cannot show in them.

Two forms, each read where it is used:

- a name: the one binding that reaches ``x`` is ``x = C(...)`` earlier in the read's block;
- an attribute of the method's instance: ``self.x = C(...)`` earlier in the read's block (or a
  block around it), with no other store of ``self.x``, no call of a method of ``self`` and no
  hand-over of ``self`` in between, since any of those may rebind or shard ``self.x``.

Between the binding and the read, every use of the object must keep it unsharded
(``_keeps_it_unsharded``) and no FSDP1 constructor may run.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from fsdp2_port.codemods import flow
from fsdp2_port.codemods.assumptions import (
    BUILDERS,
    NO_MODEL_BUILTINS,
    RETURNS_SELF,
    UNSHARDING_METHODS,
)
from fsdp2_port.codemods.semantic.summaries import RETURNED

if TYPE_CHECKING:
    from fsdp2_port.codemods.semantic.values import Ties

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def is_fresh(ties: Ties, expr: ast.AST) -> bool:
    """``expr`` (a name, or ``self.x``) holds an object its function has just built. A name
    from elsewhere may still be a factory of the run: the run's ties, when it has any, win."""
    if isinstance(expr, ast.Name):
        return _fresh_name(ties, expr)
    if isinstance(expr, ast.Attribute) and ties.is_self(expr.value):
        return _fresh_attribute(ties, expr)
    return False


def _fresh_name(ties: Ties, read: ast.Name) -> bool:
    reaching = ties.reaching(read)
    if len(reaching) != 1 or reaching[0].kind != "assign":
        return False
    statement = ties.parsed.names.parent.get(reaching[0].node)
    if not (isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Call)):
        return False
    if not _builds_anew(ties, statement.value):
        return False
    path = flow.between(ties.parsed.names, statement, read)
    return path is not None and all(
        _keeps_it_unsharded(ties, n)
        for s in path
        for n in ast.walk(s)
        if isinstance(n, ast.Name) and n.id == read.id and n is not read
    )


def _fresh_attribute(ties: Ties, read: ast.Attribute) -> bool:
    """``self.x`` after the nearest ``self.x = C(...)`` that a run passes on its way to the
    read, with nothing in between that may rebind or shard it (the module's docstring)."""
    names = ties.parsed.names
    assert isinstance(read.value, ast.Name)
    me, attr = read.value.id, read.attr
    function = names.function_of(read)
    stores = [
        names.statement(n)
        for n in names.by_type[ast.Attribute]
        if isinstance(n, ast.Attribute)
        and isinstance(n.ctx, ast.Store)
        and n.attr == attr
        and isinstance(n.value, ast.Name)
        and n.value.id == me
        and names.function_of(n) is function
    ]
    for statement in reversed(stores):
        path = flow.between(names, statement, read)
        if path is None:
            continue
        if not (
            isinstance(statement, ast.Assign)
            and len(statement.targets) == 1
            and isinstance(statement.value, ast.Call)
            and _builds_anew(ties, statement.value)
        ):
            return False
        nodes = (n for s in path for n in ast.walk(s) if n is not read)
        return all(_leaves_it(ties, n, me, attr) for n in nodes)
    return False


def _leaves_it(ties: Ties, node: ast.AST, me: str, attr: str) -> bool:
    """``node``, on the way from ``self.x = C(...)`` to a read of ``self.x``, can neither
    rebind nor shard ``self.x``."""
    names = ties.parsed.names
    if node in ties.constructors:
        return False
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if isinstance(node.func.value, ast.Name) and node.func.value.id == me:
            return False  # a method of the instance may do anything to it
    if isinstance(node, ast.Name) and node.id == me:
        return isinstance(names.parent.get(node), ast.Attribute)  # ``self`` handed over
    if isinstance(node, ast.Attribute) and node.attr == attr:
        if isinstance(node.value, ast.Name) and node.value.id == me:
            return isinstance(node.ctx, ast.Load) and _keeps_it_unsharded(ties, node)
    return True


def _keeps_it_unsharded(ties: Ties, use: ast.expr) -> bool:
    """A use of a fresh object that cannot shard it in place: an attribute read, an argument
    of a builtin that never returns a model (``hasattr``, ``print``), or a call of a method
    torch or Hugging Face define that does not (its own methods might call ``FSDP(self)``,
    which under FSDP2 shards the object itself)."""
    names = ties.parsed.names
    parent = names.parent.get(use)
    if isinstance(parent, ast.Call) and use in parent.args:
        qualified = names.qualified(parent.func)
        return bool(qualified) and qualified <= NO_MODEL_BUILTINS.members
    if not isinstance(parent, ast.Attribute):
        return False
    call = names.parent.get(parent)
    if not (isinstance(call, ast.Call) and call.func is parent):
        return True
    assumed = ties.parsed.assumed
    return assumed.takes(RETURNS_SELF, parent.attr, call) or assumed.takes(
        UNSHARDING_METHODS, parent.attr, call
    )


def _builds_anew(ties: Ties, call: ast.Call) -> bool:
    """A call that returns a new object of a class other than FSDP's: a class of this file
    (or a classmethod's ``cls``) with no FSDP base, ``C.from_pretrained(...)``, a function of
    the run every call of which builds one (``summaries``), or a ``CamelCase`` name from
    elsewhere."""
    parsed = ties.parsed
    func = call.func
    if call in ties.constructors:
        return False
    if "new" in parsed.callee_effects(call).get(RETURNED, ()):
        return True
    if isinstance(func, ast.Attribute) and parsed.assumed.takes(BUILDERS, func.attr, call):
        return True
    if isinstance(func, ast.Name):
        local = ties.local_class(func) or _class_of_cls(ties, func)
        if local is not None:
            return not any(parsed.is_fsdp_class(b) for b in local.bases)
    qualified = parsed.names.qualified(func)
    return bool(qualified) and all(ties.spelled_as_class(q, call) for q in qualified)


def _class_of_cls(ties: Ties, name: ast.Name) -> ast.ClassDef | None:
    """The class a classmethod's first parameter (``cls``) is bound to, read there."""
    names = ties.parsed.names
    bindings = names.bindings_of(name)
    if len(bindings) != 1 or bindings[0].kind != "param":
        return None
    function = names.function_of(name)
    if not (
        isinstance(function, _FUNCTIONS)
        and function.args.args
        and function.args.args[0] is bindings[0].node
        and any(isinstance(d, ast.Name) and d.id == "classmethod" for d in function.decorator_list)
    ):
        return None
    return names.class_of(function)
