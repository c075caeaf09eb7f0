"""Objects a function has just built and not yet handed to anyone ("fresh"): no FSDP wrapper,
nor a module sharded in place, so what FSDP1 and FSDP2 do to models cannot show in them.

Three forms, each read where it is used:

- a name: the one binding that reaches ``x`` is ``x = C(...)`` earlier in the read's block
  (or ``x = x.to(...)`` of such an ``x``);
- an attribute of the method's instance: ``self.x = C(...)`` earlier in the read's block (or a
  block around it), with no other store of ``self.x``, no call of a method of ``self`` and no
  hand-over of ``self`` in between, since any of those may rebind or shard ``self.x``;
- a part of either (``x.model``, ``self.x.model``), when no use of the object before the read
  hands a part of it on (``_keeps_its_parts``).

Between the binding and the read, every use of the object must keep it unsharded
(``_keeps_it_unsharded``) and no FSDP1 constructor may run.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import TYPE_CHECKING

from fsdp2_port.codemods import flow, syntax
from fsdp2_port.codemods.assumptions import (
    BUILDERS,
    NO_MODEL_BUILTINS,
    RETURNS_SELF,
    TENSOR_METHODS,
    UNSHARDING_METHODS,
)
from fsdp2_port.codemods.semantic.summaries import RETURNED

if TYPE_CHECKING:
    from fsdp2_port.codemods.semantic.values import Ties

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def is_fresh(ties: Ties, expr: ast.AST) -> bool:
    """``expr`` (a name, ``self.x``, or a part of either: ``model.backbone``) holds an object
    its function has just built. A name from elsewhere may still be a factory of the run: the
    run's ties, when it has any, win."""
    if isinstance(expr, ast.Name):
        return _fresh_name(ties, expr) is not None
    if isinstance(expr, ast.Attribute) and ties.is_self(expr.value):
        return _fresh_attribute(ties, expr) is not None
    if isinstance(expr, ast.Attribute):
        return _fresh_part(ties, expr)
    return False


def _fresh_name(
    ties: Ties, read: ast.Name, seen: frozenset[ast.AST] = frozenset()
) -> list[ast.stmt] | None:
    """The statements from each ``x = C(...)`` that reaches the read to it (one per branch
    of an ``if``: ``if big: x = A() else: x = B()``; through ``x = x.to(device)``), when
    ``x`` is fresh there."""
    reaching = ties.reaching(read)
    if not reaching:
        return None
    paths: list[ast.stmt] = []
    for binding in reaching:
        if binding.kind != "assign" or binding.node in seen:
            return None
        path = _from_binding(ties, binding.node, read, seen | {binding.node})
        if path is None:
            return None
        paths += path
    return paths


def _from_binding(
    ties: Ties, target: ast.AST, read: ast.Name, seen: frozenset[ast.AST]
) -> list[ast.stmt] | None:
    """The statements from ``x = C(...)`` (the binding ``target``) to the read, when the
    object it builds is still fresh there; from the binding before ``x = x.to(...)``, when
    ``x`` is fresh at that move."""
    statement = ties.parsed.names.parent.get(target)
    if not (isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Call)):
        return None
    earlier: list[ast.stmt] = []
    moved = _moves_itself(ties, statement.value, read.id)
    if moved is not None:
        found = _fresh_name(ties, moved, seen)
        if found is None:
            return None
        earlier = found
    elif not _builds_anew(ties, statement.value):
        return None
    path = flow.between(ties.parsed.names, statement, read, branches=True)
    if path is None:
        return None
    path = earlier + path
    nodes = list(_before(ties, path, read))
    if any(n in ties.constructors for n in nodes):
        return None
    uses = (  # the binding of ``x = x.to(...)`` itself is no use
        n for n in nodes if isinstance(n, ast.Name) and n.id == read.id and n not in seen
    )
    return path if all(_keeps_it_unsharded(ties, n) for n in uses) else None


def _fresh_attribute(ties: Ties, read: ast.Attribute) -> list[ast.stmt] | None:
    """The statements from the nearest ``self.x = C(...)`` that a run passes on its way to
    the read, when nothing in between may rebind or shard it (the module's docstring)."""
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
            return None
        nodes = _before(ties, path, read)
        return path if all(_leaves_it(ties, n, me, attr) for n in nodes) else None
    return None


def _fresh_part(ties: Ties, read: ast.Attribute) -> bool:
    """``x.a.b`` (or ``self.x.a``) where ``x`` is fresh and, on the way from its binding to
    the read, nothing takes a part of it anywhere (``_keeps_its_parts``): then no part is
    wrapped or sharded either."""
    head: ast.expr = read.value
    while isinstance(head, ast.Attribute) and not ties.is_self(head.value):
        head = head.value
    if isinstance(head, ast.Name):
        path = _fresh_name(ties, head)
    elif isinstance(head, ast.Attribute):
        path = _fresh_attribute(ties, head)
    else:
        return False
    if path is None:
        return False
    spelled = syntax.loaded(head)
    uses = (
        n
        for n in _before(ties, path, head)
        if isinstance(n, type(head)) and syntax.loaded(n) == spelled
    )
    return all(_keeps_its_parts(ties, n) for n in uses)


def _before(ties: Ties, path: list[ast.stmt], read: ast.expr) -> Iterator[ast.AST]:
    """The nodes of ``path`` (``flow.between``) that may run before ``read``, ``read`` aside:
    all of them under a loop of the read's function (or in a ``while`` test), otherwise those
    but of the statements after the read's own (what follows it in its block, in a branch
    around it, in the body of the statement it is in)."""
    names = ties.parsed.names
    function = names.function_of(read)
    looped = False
    for owner in names.ancestors(read):
        if owner is function:
            break
        looped = looped or isinstance(owner, (ast.For, ast.AsyncFor, ast.While))
    own = names.statement(read)
    looped = looped or isinstance(own, ast.While)  # its test runs again after its body
    todo: list[ast.AST] = list(path)
    while todo:
        node = todo.pop()
        if not looped and isinstance(node, ast.stmt) and _after(node, own):
            continue
        if node is not read:
            yield node
        todo.extend(ast.iter_child_nodes(node))


def _after(statement: ast.stmt, own: ast.stmt) -> bool:
    return (statement.lineno, statement.col_offset) > (own.lineno, own.col_offset)


def _keeps_its_parts(ties: Ties, use: ast.expr) -> bool:
    """A use of a fresh object that hands no part of it on: a builtin's argument
    (``hasattr``), a method whose result holds tensors only (``x.vlm.parameters()``,
    ``x.model.state_dict()``), a statement calling a method that returns the part it is
    called on (``x.vlm.eval()``), a part moved in place (``x.a = x.a.to(device)``), or a store
    of a value that is no model."""
    names = ties.parsed.names
    top: ast.expr = use
    while isinstance(names.parent.get(top), ast.Attribute):
        top = names.parent[top]  # type: ignore[assignment]
    parent = names.parent.get(top)
    assumed = ties.parsed.assumed
    if isinstance(parent, ast.Call) and parent.func is not top:
        return _no_model_builtin(ties, parent)
    if isinstance(parent, ast.Call) and isinstance(top, ast.Attribute):
        if assumed.takes(TENSOR_METHODS, top.attr, parent):
            return True
        outer = names.parent.get(parent)
        if isinstance(outer, ast.Expr) or _moved_in_place(outer, parent):
            return assumed.takes(RETURNS_SELF, top.attr, parent)
        return False
    if isinstance(parent, ast.Assign) and top in parent.targets:
        return _moved_in_place(parent, parent.value) or ties.none_of(parent.value)
    return False


def _moves_itself(ties: Ties, value: ast.Call, name: str) -> ast.Name | None:
    """In ``x = x.to(device)`` (a method that returns its module, on the name bound), the read
    of ``x`` the method is called on."""
    method = syntax.method_on(value, name)
    if method is None or not ties.parsed.assumed.takes(RETURNS_SELF, method, value):
        return None
    assert isinstance(value.func, ast.Attribute) and isinstance(value.func.value, ast.Name)
    return value.func.value


def _moved_in_place(statement: ast.AST | None, value: ast.expr) -> bool:
    """``x.a = x.a.to(...)``: the one target is the chain the value's method is called on."""
    return (
        isinstance(statement, ast.Assign)
        and len(statement.targets) == 1
        and isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and syntax.loaded(statement.targets[0]) == syntax.loaded(value.func.value)
    )


def _no_model_builtin(ties: Ties, call: ast.Call) -> bool:
    """A call of a builtin that never returns a model, nor shards what it is given."""
    qualified = ties.parsed.names.qualified(call.func)
    return bool(qualified) and qualified <= NO_MODEL_BUILTINS.members


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
        return _no_model_builtin(ties, parent)
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
    elsewhere; or such a call moved by a method that returns its module
    (``C(...).cuda(rank)``)."""
    parsed = ties.parsed
    func = call.func
    if call in ties.constructors:
        return False
    if (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Call)
        and parsed.assumed.takes(RETURNS_SELF, func.attr, call)
    ):
        return _builds_anew(ties, func.value)
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
