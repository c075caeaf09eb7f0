"""Small readings of the syntax tree that F2P013's finders and its value paths share."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from fsdp2_port.codemods import calls
from fsdp2_port.codemods.names import Binding, Names, Scope


def _top_import(module: ast.Module) -> ast.stmt | None:
    """The last import of a module's first block of imports (after its docstring and
    ``from __future__``), or None."""
    last = None
    for statement in module.body:
        if isinstance(statement, (ast.Import, ast.ImportFrom)):
            last = statement
        elif not (last is None and isinstance(statement, ast.Expr)):
            break
    return last


def _branches(value: ast.expr) -> Iterator[ast.expr]:
    """The values a conditional expression may give (itself for any other expression)."""
    if isinstance(value, ast.IfExp):
        yield from _branches(value.body)
        yield from _branches(value.orelse)
    else:
        yield value


def _within(node: ast.AST, outer: ast.AST) -> bool:
    return any(node is n for n in ast.walk(outer)) and node is not outer


def _import_bindings(names: Names, node: ast.expr) -> list[Binding]:
    """The bindings of the name ``node`` (a name or a dotted one) starts with, when imports
    bound it, not a local alias; else none."""
    while isinstance(node, ast.Attribute):
        node = node.value
    bound = names.bindings_of(node) if isinstance(node, ast.Name) else []
    return bound if all(b.kind == "import" for b in bound) else []


def _at(node: ast.AST) -> tuple[int, int]:
    return getattr(node, "lineno", 0), getattr(node, "col_offset", 0)


def _reads(names: Names, scope: Scope, name: str) -> Iterator[ast.Name]:
    """Every load of ``name`` that resolves to ``scope``'s binding; a string reference
    (``__all__``, an annotation) counts as a read that goes elsewhere."""
    for node in names.loads(name):
        if names.lookup(name, names.scope_of(node))[0] is scope:
            yield node
    for other, where in names.string_references():
        if other == name and names.lookup(name, where)[0] is scope:
            yield ast.Name(id=name, ctx=ast.Load())  # has no parent: reaches no reader


def _passed(call: ast.Call, parameters: tuple[str, ...]) -> dict[str, ast.expr] | None:
    """``call``'s arguments by the parameter each fills (``parameters`` in order), or None when
    one is starred, names another parameter or fills one twice."""
    if any(isinstance(a, ast.Starred) for a in call.args) or len(call.args) > len(parameters):
        return None
    passed = dict(zip(parameters, call.args))
    for keyword in call.keywords:
        if keyword.arg not in parameters or keyword.arg in passed:
            return None
        passed[keyword.arg] = keyword.value
    return passed


def _tested_for_none(node: ast.expr, parent: ast.AST | None) -> bool:
    """``node is None`` / ``node is not None``."""
    if not (
        isinstance(parent, ast.Compare)
        and len(parent.ops) == 1
        and isinstance(parent.ops[0], (ast.Is, ast.IsNot))
    ):
        return False
    sides = (parent.left, parent.comparators[0])
    return any(side is node for side in sides) and any(calls.is_none(side) for side in sides)


def _text_key(node: ast.AST | None) -> str | None:
    """A dict key written as a string constant, or None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _called_on(call: ast.Call, *methods: str) -> ast.Name | None:
    """``n`` of an ``n.<method>(...)`` call, for one of ``methods`` (``l.append(p)``,
    ``d.update(k=v)``)."""
    func = call.func
    if (
        isinstance(func, ast.Attribute)
        and func.attr in methods
        and isinstance(func.value, ast.Name)
    ):
        return func.value
    return None


def _defaulted(arguments: ast.arguments, default: ast.expr) -> ast.arg | None:
    """The parameter whose default ``default`` is."""
    positional = [*arguments.posonlyargs, *arguments.args]
    for argument, value in zip(
        positional[len(positional) - len(arguments.defaults) :], arguments.defaults
    ):
        if value is default:
            return argument
    for argument, keyword_default in zip(arguments.kwonlyargs, arguments.kw_defaults):
        if keyword_default is default:
            return argument
    return None
