"""Small readings of Python syntax that the model-following analysis (``ties``) uses: nothing
here knows about FSDP."""

from __future__ import annotations

import ast
from collections.abc import Callable

FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
#: Statements after which nothing in their block runs.
JUMPS = (ast.Return, ast.Raise, ast.Continue, ast.Break)


def isinstance_arguments(test: ast.AST) -> tuple[ast.expr, ast.expr] | None:
    """``(x, kinds)`` of a test ``isinstance(x, kinds)``."""
    if (
        isinstance(test, ast.Call)
        and isinstance(test.func, ast.Name)
        and test.func.id == "isinstance"
        and len(test.args) == 2
        and not test.keywords
    ):
        return test.args[0], test.args[1]
    return None


def implies(test: ast.AST, holds: bool, leaf: Callable[[ast.AST, bool], bool]) -> bool:
    """Whether ``test`` being ``holds`` implies what ``leaf(part, holds)`` says a part of it
    being ``holds`` implies: through ``not``, an ``and`` that holds, an ``or`` that fails."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return implies(test.operand, not holds, leaf)
    if isinstance(test, ast.BoolOp):
        wanted = ast.And if holds else ast.Or
        return isinstance(test.op, wanted) and any(implies(v, holds, leaf) for v in test.values)
    return leaf(test, holds)


def rules_out_then_jumps(
    statement: ast.stmt, text: str, tests: Callable[[ast.AST, str, bool], bool]
) -> bool:
    """``if <test>: ...; return`` (any jump, no ``else``) whose test being false implies the
    property: what follows in the block is reached only then."""
    return (
        isinstance(statement, ast.If)
        and not statement.orelse
        and isinstance(statement.body[-1], JUMPS)
        and tests(statement.test, text, False)
    )


def camel(name: str) -> bool:
    """A class's name by convention (``WanModel``; not ``FSDP``, ``MAX_LEN`` or ``build``)."""
    return name[:1].isupper() and not name.isupper()


def acronym(name: str) -> bool:
    """A class's name spelled as an acronym (``GPT``, ``MLP``, ``VAE2``): two or more capitals
    and digits, no underscore (``MAX_LEN`` is a constant)."""
    return len(name) > 1 and name[:1].isupper() and name.isupper() and name.isalnum()


def unsubscripted(func: ast.expr) -> ast.expr:
    """``Trainer`` of a generic class's call ``Trainer[Batch](...)``."""
    while isinstance(func, ast.Subscript):
        func = func.value
    return func


def blocks(node: ast.AST) -> list[list[ast.stmt]]:
    """The statement lists directly under ``node``."""
    return [
        part
        for name in ("body", "orelse", "finalbody")
        if isinstance(part := getattr(node, name, None), list)
        and part
        and isinstance(part[0], ast.stmt)
    ]


def method_on(call: ast.AST, name: str) -> str | None:
    """The method ``call`` calls on the name ``name`` (``to`` for ``name.to(device)``)."""
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Attribute):
        return None
    receiver = call.func.value
    return call.func.attr if isinstance(receiver, ast.Name) and receiver.id == name else None


def loaded(node: ast.AST) -> str:
    """``ast.dump`` of ``node`` read, whether it is stored or read there: two chains that spell
    the same name (``x.a`` in ``x.a = ...`` and in ``x.a.to(d)``) give the same text."""
    return ast.dump(node).replace("Store()", "Load()")


def positional(function: ast.AST) -> list[str]:
    assert isinstance(function, FUNCTIONS)
    return [parsed.arg for parsed in (*function.args.posonlyargs, *function.args.args)]
