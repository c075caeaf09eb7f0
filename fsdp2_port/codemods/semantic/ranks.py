"""Code only some ranks run: what a test of the process's rank (``RANK_WORDS``: ``rank``,
``dist.get_rank()``, ``accelerator.is_main_process``) lets through.

A test lets only some ranks through when it names a rank, read with its polarity: through
``not``, an ``and`` that holds, an ``or`` that fails (``if not main and not fsdp: return``
lets every rank of an FSDP run go on). The code it gates: the body (the ``else``) of an
``if`` the test passes (fails) for only some ranks, and the rest of a block after an ``if``
that leaves it (``return``, ``raise``, ``continue``, ``break``) for the other ranks.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from fsdp2_port.codemods import syntax
from fsdp2_port.codemods.assumptions import RANK_WORDS

from ..assumed import either_way


def names_a_rank(node: ast.AST) -> bool:
    """Whether ``node`` reads a name or attribute for the process's rank (a private one too:
    ``self._rank``)."""
    return any(
        either_way(RANK_WORDS, (n.id if isinstance(n, ast.Name) else n.attr).lstrip("_"))
        for n in ast.walk(node)
        if isinstance(n, (ast.Name, ast.Attribute))
    )


def some_ranks(test: ast.AST, holds: bool) -> bool:
    """Whether ``test`` being ``holds`` lets only some ranks through."""
    return syntax.implies(test, holds, lambda part, _: names_a_rank(part))


def gated(body: list[ast.stmt]) -> Iterator[tuple[list[ast.stmt], ast.expr]]:
    """The statement lists of a function's ``body`` only some ranks run, each with the test
    that gates it (not inside functions or classes defined there)."""
    todo = [body]
    while todo:
        block = todo.pop()
        for index, statement in enumerate(block):
            if isinstance(statement, (*syntax.FUNCTIONS, ast.ClassDef)):
                continue
            if isinstance(statement, ast.If):
                if some_ranks(statement.test, True):
                    yield statement.body, statement.test
                if some_ranks(statement.test, False):
                    if statement.orelse:
                        yield statement.orelse, statement.test
                    if isinstance(statement.body[-1], syntax.JUMPS):
                        yield block[index + 1 :], statement.test
            todo += syntax.blocks(statement)
            todo += [handler.body for handler in getattr(statement, "handlers", ())]
