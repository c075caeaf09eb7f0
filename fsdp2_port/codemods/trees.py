"""Each source text of a run parsed once, and each tree walked once.

Inside ``shared()`` (a run: ``engine.migrate_files``), ``parse`` gives the same tree for the same
text to every stage (the module graph, the programs, the analysis, the fixers) and ``nodes``
gives a tree's nodes of some classes from one walk. The stages read trees and never change them
(parents are kept beside the tree, in ``Names.parent``), so sharing is safe. Outside ``shared()``
nothing is kept.
"""

from __future__ import annotations

import ast
import heapq
from collections import defaultdict, deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

T = TypeVar("T")

_trees: dict[str | bytes, ast.Module] | None = None
#: id(tree) -> (tree, its nodes by class, each with its place in ``ast.walk``'s order).
_walks: dict[int, tuple[ast.AST, dict[type, list[tuple[int, ast.AST]]]]] = {}
#: (id(tree), kind) -> (tree, [(settings, what was made from the tree with them)]).
_derived: dict[tuple[int, str], tuple[ast.AST, list[tuple[object, object]]]] = {}


@contextmanager
def shared() -> Iterator[None]:
    """Keep every tree parsed, and every walk, for the rest of the block."""
    global _trees
    outer = _trees
    if outer is None:
        _trees = {}
    try:
        yield
    finally:
        if outer is None:
            _trees = None
            _walks.clear()
            _derived.clear()


def forget() -> None:
    """Keep nothing from here on: a worker process forked inside ``shared()`` that must not
    hold on to every tree it reads (``engine``'s reading pool)."""
    global _trees
    _trees = None
    _walks.clear()
    _derived.clear()


def parse(text: str | bytes, path: str = "<unknown>") -> ast.Module:
    """``ast.parse(text)``: once per text inside ``shared()`` (errors are raised each time)."""
    if _trees is None:
        return ast.parse(text, filename=path)
    tree = _trees.get(text)
    if tree is None:
        tree = _trees[text] = ast.parse(text, filename=path)
    return tree


def nodes(tree: ast.AST, *classes: type[ast.AST]) -> list[ast.AST]:
    """The nodes under ``tree`` (itself included) that are exactly of one of ``classes``, in
    ``ast.walk``'s order; inside ``shared()``, from one walk per tree."""
    if _trees is None:
        return [n for n in ast.walk(tree) if type(n) in classes]
    kept = _walks.get(id(tree))
    if kept is None or kept[0] is not tree:
        by_class: dict[type, list[tuple[int, ast.AST]]] = defaultdict(list)
        for place, node in enumerate(ast.walk(tree)):
            by_class[type(node)].append((place, node))
        kept = _walks[id(tree)] = (tree, by_class)
    groups = [kept[1].get(c, []) for c in classes]
    if len(groups) == 1:
        return [n for _, n in groups[0]]
    return [n for _, n in heapq.merge(*groups, key=lambda pair: pair[0])]


def derived(tree: ast.AST, kind: str, settings: object, make: Callable[[], T]) -> T:
    """``make()``, what the stages read of ``tree`` given ``settings`` (compared with ``==``):
    once per tree, kind and settings inside ``shared()`` (a memo table the caller fills is
    kept as it grows)."""
    if _trees is None:
        return make()
    kept = _derived.get((id(tree), kind))
    if kept is None or kept[0] is not tree:
        kept = _derived[(id(tree), kind)] = (tree, [])
    for known, value in kept[1]:
        if known == settings:
            return value  # type: ignore[return-value]
    value = make()
    kept[1].append((settings, value))
    return value


def statements(tree: ast.Module) -> list[tuple[ast.stmt, bool]]:
    """Every statement of ``tree``, outer blocks first, with whether it is in a function (once
    per tree)."""

    def walk() -> list[tuple[ast.stmt, bool]]:
        out: list[tuple[ast.stmt, bool]] = []
        todo: deque[tuple[list[ast.stmt], bool]] = deque([(tree.body, False)])
        while todo:  # breadth first, as ``ast.walk``
            block, inside = todo.popleft()
            for statement in block:
                out.append((statement, inside))
                nested = inside or isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef))
                todo += [(b, nested) for b in _blocks_of(statement)]
        return out

    return derived(tree, "statements", None, walk)


def _blocks_of(statement: ast.stmt) -> Iterator[list[ast.stmt]]:
    """The statement lists a statement holds (bodies, branches, handlers, cases)."""
    for name in ("body", "orelse", "finalbody"):
        block = getattr(statement, name, None)
        if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
            yield block
    for handler in getattr(statement, "handlers", ()):
        yield handler.body
    for case in getattr(statement, "cases", ()):
        yield case.body
