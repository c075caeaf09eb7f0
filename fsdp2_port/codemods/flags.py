"""Tests of one unchanging flag, and which side of them code sits on.

A flag is a name or a chain of attributes on one (``use_fsdp``, ``args.fsdp``), or one
compared with a constant (``strategy == "fsdp"``, ``!=``). Two pieces of code on opposite sides
of tests of the same unchanging flag never both run on one path: ``if use_fsdp: m = FSDP(m)``
... ``else: m.module``.

- Within a function (``opposite_sides``): the flag's name is bound at most once, outside any
  loop, and no attribute chain on it is stored into there.
- Across the methods of a class (``exclusive``): the flag is an attribute of the instance
  (``self.strategy``) that only ``__init__`` stores, once, that no other file reads and that
  nothing sets by a computed name; a method only its class calls (``self._setup_fsdp()``),
  whose name no other file reads, is on the sides every call of it is on.
"""

from __future__ import annotations

import ast
import weakref

from fsdp2_port.codemods import syntax
from fsdp2_port.codemods.assumptions import REFLECTION_CALLS
from fsdp2_port.codemods.names import Names

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
#: How many method calls up ``exclusive`` looks for the tests a method runs behind.
_CALL_DEPTH = 3

#: (the test's spelling, which side, the flag it reads)
Side = tuple[str, bool, ast.expr]


def opposite_sides(names: Names, target: ast.AST, use: ast.AST) -> bool:
    """Whether ``target`` and ``use``, in one function, each sit in a branch (of an ``if`` or a
    conditional expression) of a test of the same flag, on opposite sides, and the flag
    cannot change in the function."""
    theirs = {key: side for key, side, _ in _sides(names, use)}
    return any(
        theirs.get(key, side) != side and _unchanging(names, flag)
        for key, side, flag in _sides(names, target)
    )


def exclusive(names: Names, target: ast.AST, use: ast.AST) -> bool:
    """Whether ``target`` (a value a method stores into ``self.x``) and ``use`` (a read of it
    in a method of the same class) sit on opposite sides of tests of one flag of the
    instance, in their own methods or around every call that leads to them (the module's
    docstring)."""
    theirs = {key: side for key, side, _ in _method_sides(names, use, _CALL_DEPTH)}
    return any(
        theirs.get(key, side) != side and _instance_constant(names, flag)
        for key, side, flag in _method_sides(names, target, _CALL_DEPTH)
    )


def _sides(names: Names, node: ast.AST) -> list[Side]:
    """The tests of flags around ``node`` in its function, with the side it is on."""
    found = []
    child = node
    function = names.function_of(node)
    for owner in names.ancestors(node):
        if owner is function:
            break
        if isinstance(owner, (ast.If, ast.IfExp)) and child is not owner.test:
            body = owner.body
            side = child is body or (isinstance(body, list) and any(s is child for s in body))
            test = owner.test
            while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
                test, side = test.operand, not side
            read = _read(test)
            if read is not None:
                flag, key, same = read
                found.append((key, side == same, flag))
        child = owner
    return found


def _read(test: ast.expr) -> tuple[ast.expr, str, bool] | None:
    """(the flag, the test's spelling, whether its body runs when the spelled test holds) of a
    test of a flag: the flag itself, or ``flag == constant`` / ``flag != constant``."""
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        (op,), (constant,) = test.ops, test.comparators
        if isinstance(op, (ast.Eq, ast.NotEq)) and isinstance(constant, ast.Constant):
            if _flag(test.left):
                key = f"{ast.dump(test.left)} == {constant.value!r}"
                return test.left, key, isinstance(op, ast.Eq)
        return None
    return (test, ast.dump(test), True) if _flag(test) else None


def _flag(test: ast.expr) -> bool:
    while isinstance(test, ast.Attribute):
        test = test.value
    return isinstance(test, ast.Name)


def _unchanging(names: Names, flag: ast.expr) -> bool:
    """The flag's name is bound at most once (a parameter, one assignment), outside any loop,
    and no attribute chain on it is stored into in the function that reads it."""
    base = flag
    while isinstance(base, ast.Attribute):
        base = base.value
    assert isinstance(base, ast.Name)
    bindings = names.bindings_of(base)
    function = names.function_of(flag)
    if len(bindings) > 1 or any(_in_loop(names, b.node) for b in bindings):
        return False
    if not isinstance(flag, ast.Attribute):
        return True
    spelled = ast.dump(flag)
    return not any(
        isinstance(n, ast.Attribute)
        and isinstance(n.ctx, ast.Store)
        and syntax.loaded(n) == spelled
        for n in ast.walk(function if function is not None else names.tree)
    )


def _in_loop(names: Names, node: ast.AST) -> bool:
    """Whether a loop of ``node``'s own function (or module) holds it."""
    function = names.function_of(node)
    for owner in names.ancestors(node):
        if owner is function:
            return False
        if isinstance(owner, (ast.For, ast.AsyncFor, ast.While)):
            return True
    return False


# -- across the methods of a class -----------------------------------------------------------


def _method_sides(names: Names, node: ast.AST, depth: int) -> list[Side]:
    """``_sides`` of ``node`` that test a flag of the instance, and those every call of its
    method is on (up to ``depth`` calls up)."""
    found = [s for s in _sides(names, node) if _of_instance(names, s[2])]
    function = names.function_of(node)
    calls = _callers(names, function) if depth and isinstance(function, _FUNCTIONS) else []
    common: dict[tuple[str, bool], ast.expr] | None = None
    for call in calls:
        sides = {(key, side): flag for key, side, flag in _method_sides(names, call, depth - 1)}
        common = sides if common is None else {k: v for k, v in common.items() if k in sides}
    return found + [(key, side, flag) for (key, side), flag in (common or {}).items()]


def _of_instance(names: Names, flag: ast.expr) -> bool:
    """``self.x``: an attribute of the instance of the method that reads it."""
    if not (isinstance(flag, ast.Attribute) and isinstance(flag.value, ast.Name)):
        return False
    function = names.function_of(flag)
    return (
        isinstance(function, _FUNCTIONS)
        and isinstance(names.parent.get(function), ast.ClassDef)
        and bool(function.args.args)
        and function.args.args[0].arg == flag.value.id
    )


_CALLERS: weakref.WeakKeyDictionary[Names, dict[ast.AST, list[ast.Call]]] = (
    weakref.WeakKeyDictionary()
)


def _callers(names: Names, method: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.Call]:
    """Every call of ``method`` when only its class calls it: each ``.name`` of the module is
    ``self.name(...)`` in a method of the same class, no other file reads ``.name``, and the
    method has no decorator; empty otherwise (also when nothing calls it)."""
    known = _CALLERS.setdefault(names, {})
    if method not in known:
        known[method] = _find_callers(names, method)
    return known[method]


def _find_callers(names: Names, method: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.Call]:
    owner = names.parent.get(method)
    name = method.name
    if (
        not isinstance(owner, ast.ClassDef)
        or method.decorator_list
        or name.startswith("__")
        or not names.seen.own_attribute(name)
    ):
        return []
    calls = []
    for node in names.by_type[ast.Attribute]:
        assert isinstance(node, ast.Attribute)
        if node.attr != name:
            continue
        call = names.parent.get(node)
        if not (
            isinstance(call, ast.Call)
            and call.func is node
            and _of_instance(names, node)
            and names.class_of(node) is owner
        ):
            return []
        calls.append(call)
    return calls


def _instance_constant(names: Names, flag: ast.expr) -> bool:
    """``self.x`` that only its class's ``__init__`` stores, once and outside any loop, in a
    module that reads or sets no attribute by a computed name, and that no other file reads."""
    assert isinstance(flag, ast.Attribute)
    owner = names.class_of(flag)
    if owner is None or not names.seen.own_attribute(flag.attr):
        return False
    if any(getattr(n, "id", None) in REFLECTION_CALLS for n in names.by_type[ast.Name]):
        return False
    stores = [
        n
        for n in names.by_type[ast.Attribute]
        if isinstance(n, ast.Attribute) and n.attr == flag.attr and not isinstance(n.ctx, ast.Load)
    ]
    if len(stores) > 1:
        return False
    for store in stores:
        function = names.function_of(store)
        if not (
            isinstance(function, _FUNCTIONS)
            and function.name == "__init__"
            and names.parent.get(function) is owner
            and _of_instance(names, store)
            and not _in_loop(names, store)
        ):
            return False
    return not any(getattr(n, "attr", None) == "__dict__" for n in names.by_type[ast.Attribute])
