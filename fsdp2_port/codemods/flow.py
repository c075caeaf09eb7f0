"""Which binding of a name a read can see, from the code's shape alone (no values).

``may_reach`` over-approximates: a ``False`` is a proof (the binding is in the other branch
of an ``if`` around both, or later with no loop to bring it back, or every path from it to
the read passes a statement that binds the name again, or the binding and the read sit on
opposite sides of two tests of one unchanging flag: ``if use_fsdp: m = FSDP(m)`` ... ``else:
m.module``); a ``True`` may be wrong. Names bound
in another function (a closure, a global) always may reach.
"""

from __future__ import annotations

import ast
import bisect
import itertools
import weakref

from fsdp2_port.codemods import flags
from fsdp2_port.codemods.names import Names
from fsdp2_port.codemods.text import LineIndex

#: Statements after which the rest of their block does not run.
_LEAVING = (ast.Return, ast.Raise, ast.Break, ast.Continue)
#: ``try ... except*`` (Python 3.11).
_TRY_STAR: tuple[type, ...] = (ast.TryStar,) if hasattr(ast, "TryStar") else ()
#: The statement lists of compound statements; each is entered at its first statement.
_BLOCKS = ("body", "orelse", "finalbody")


def may_reach(names: Names, lines: LineIndex, target: ast.AST, use: ast.AST) -> bool:
    """Whether the binding at ``target`` (a name stored, a parameter) can be what ``use``
    reads."""
    if isinstance(target, ast.arg):  # bound on entry to its function, before all it runs
        function = names.parent.get(names.parent.get(target))  # type: ignore[arg-type]
        return function is not names.function_of(use) or not _bound_again(names, target, use)
    if names.function_of(target) is not names.function_of(use):
        return True
    return (
        _in_reach(names, lines, target, use)
        and not _bound_again(names, target, use)
        and not flags.opposite_sides(names, target, use)
    )


def between(
    names: Names, statement: ast.stmt, use: ast.AST, branches: bool = False
) -> list[ast.stmt] | None:
    """The statements a run passes from ``statement`` to ``use``, the one that holds ``use``
    last, when both are in one block and ``statement`` comes first, or ``statement`` is in a
    ``with`` body (``with init_empty_weights(): m = C()``), or, with ``branches``, a branch of
    an ``if`` (``if big: m = A() else: m = B()``), that does: the rest of that body comes
    first; None otherwise. (A run that skips the branch passes nothing of it: ``branches``
    suits a caller that reads every binding reaching ``use``.)"""
    passed: list[ast.stmt] = []
    while True:
        child: ast.AST = use
        for owner in names.ancestors(use):
            block = _block_of(owner, child)
            if block is not None and any(s is statement for s in block):
                first = next(i for i, s in enumerate(block) if s is statement)
                last = next(i for i, s in enumerate(block) if s is child)
                return passed + block[first + 1 : last + 1] if first < last else None
            child = owner
        around = names.parent.get(statement)
        if not isinstance(around, (ast.With, ast.AsyncWith, ast.If)) or (
            isinstance(around, ast.If) and not branches
        ):
            return None
        body = _block_of(around, statement)
        assert body is not None
        passed += body[body.index(statement) + 1 :]
        statement = around


def _in_reach(names: Names, lines: LineIndex, target: ast.AST, use: ast.AST) -> bool:
    """By position: not in the other branch of an ``if`` that holds both, and not after the
    use (nor in the statement that reads it: ``x = f(x)``) unless a loop around both can bring
    it back."""
    blocks = _blocks(names)
    target_path = blocks.path(target)
    use_list = blocks.path(use)
    use_path = blocks.depths(use)
    for depth, ancestor in enumerate(target_path):
        if id(ancestor) not in use_path:
            continue
        if isinstance(ancestor, (ast.If, ast.IfExp, ast.Try)) and depth > 0:
            mine = _branch(ancestor, target_path[depth - 1])
            theirs = _branch(ancestor, use_list[use_path[id(ancestor)] - 1])
            if mine and theirs and mine != theirs and not isinstance(ancestor, ast.Try):
                return False
        break
    assigned_by = next(
        (n for n in target_path if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))),
        None,
    )
    inside = assigned_by is not None and id(assigned_by) in use_path  # x = f(x)
    if not inside and lines.start(target) <= lines.start(use):
        return True
    return any(
        isinstance(n, (ast.For, ast.AsyncFor, ast.While)) and id(n) in use_path for n in target_path
    )


def _bound_again(names: Names, target: ast.AST, use: ast.AST) -> bool:
    """Every path from ``target`` to ``use`` binds the name again first: in a block around the
    use, a statement before the use's that binds it on every way it completes, and
    ``target`` is not between that statement and the use (a block is entered at its top)."""
    name = target.id if isinstance(target, ast.Name) else getattr(target, "arg", None)
    if not isinstance(use, ast.Name) or name != use.id:
        return False
    blocks = _blocks(names)
    scope = names.function_of(use)
    target_at = blocks.places(target)
    child: ast.AST = use
    for owner in names.ancestors(use):
        place = blocks.place(owner, child)
        if place is not None:
            block, at = place
            mine = target_at.get(id(block))
            if mine == at:
                return False  # both in one statement: the paths between them stay inside it
            last = blocks.last_binding(block, name, at)
            # the target's statement, or one after it, holds its value after ``mine``
            if last is not None and (mine is None or not last <= mine < at):
                return True
            if last is not None and last == mine and _killed_inside(blocks, target, block[last]):
                return True  # ``if ...: m = f(m)`` then ``m = DDP(m)``, in that statement
        if owner is scope:
            return False
        child = owner
    return False


def _killed_inside(blocks: _Blocks, target: ast.AST, statement: ast.stmt) -> bool:
    """``target`` (a name stored) lies inside ``statement``, and every way from it to the end
    of ``statement`` binds the name again: in a block between them, a later statement binds
    it on every way, and no statement before that one may jump out of the block (``break``,
    ``continue``, ``return``, ``raise``), nor a ``try`` or ``with`` between them skip it."""
    name = target.id if isinstance(target, ast.Name) else None
    if name is None:
        return False
    path = blocks.path(target)
    for child, owner in itertools.pairwise(path):
        if isinstance(owner, (ast.Try, ast.With, ast.AsyncWith, *_TRY_STAR)):
            return False  # an exception may leave it before the binding
        place = blocks.place(owner, child)
        if place is not None:
            block, at = place
            for later in block[at + 1 :]:
                if _binds_on_every_way(later, name):
                    return True
                if _may_leave(later):
                    return False
        if owner is statement:
            return False
    return False


def _may_leave(statement: ast.stmt) -> bool:
    """``statement`` may leave its block other than at its end (a jump, in it or nested in
    it, but in a function or class defined there)."""
    todo: list[ast.AST] = [statement]
    while todo:
        node = todo.pop()
        if isinstance(node, _LEAVING):
            return True
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            todo.extend(ast.iter_child_nodes(node))
    return False


class _Blocks:
    """Where each statement of a module sits in its block, and which statements of a block
    bind a name on every way, each worked out once (``_blocks``)."""

    def __init__(self, names: Names) -> None:
        self.parent = names.parent  # not ``names``: the table is kept as long as it lives
        self._paths: dict[int, tuple[ast.AST, ...]] = {}
        self._depths: dict[int, dict[int, int]] = {}
        self._targets: dict[int, dict[int, int]] = {}
        self._places: dict[int, dict[int, tuple[list[ast.stmt], int]]] = {}
        self._binding: dict[tuple[int, str], list[int]] = {}

    def place(self, owner: ast.AST, child: ast.AST) -> tuple[list[ast.stmt], int] | None:
        """The block of ``owner`` that holds ``child`` directly, and its index there."""
        found = self._places.get(id(owner))
        if found is None:
            found = self._places[id(owner)] = {}
            for field in _BLOCKS:
                part = getattr(owner, field, None)
                if isinstance(part, list):
                    for index, statement in enumerate(part):
                        found.setdefault(id(statement), (part, index))
        return found.get(id(child))

    def path(self, node: ast.AST) -> tuple[ast.AST, ...]:
        """``node`` and its ancestors, innermost first."""
        found = self._paths.get(id(node))
        if found is None:
            path = [node]
            while path[-1] in self.parent:
                path.append(self.parent[path[-1]])
            found = self._paths[id(node)] = tuple(path)
        return found

    def depths(self, node: ast.AST) -> dict[int, int]:
        """id(n) -> its place on ``path(node)``."""
        found = self._depths.get(id(node))
        if found is None:
            found = self._depths[id(node)] = {id(n): i for i, n in enumerate(self.path(node))}
        return found

    def places(self, node: ast.AST) -> dict[int, int]:
        """id(block) -> the index there of the statement on ``path(node)`` that the block
        holds."""
        found = self._targets.get(id(node))
        if found is None:
            found = self._targets[id(node)] = {}
            for child, owner in itertools.pairwise(self.path(node)):
                place = self.place(owner, child)
                if place is not None:
                    found.setdefault(id(place[0]), place[1])
        return found

    def last_binding(self, block: list[ast.stmt], name: str, before: int) -> int | None:
        """The last index before ``before`` of a statement of ``block`` that binds ``name`` on
        every way it completes."""
        key = (id(block), name)
        found = self._binding.get(key)
        if found is None:
            found = self._binding[key] = [
                i for i, s in enumerate(block) if _binds_on_every_way(s, name)
            ]
        at = bisect.bisect_left(found, before) - 1
        return found[at] if at >= 0 else None


_BLOCKS_OF: weakref.WeakKeyDictionary[Names, _Blocks] = weakref.WeakKeyDictionary()


def _blocks(names: Names) -> _Blocks:
    found = _BLOCKS_OF.get(names)
    if found is None:
        found = _BLOCKS_OF[names] = _Blocks(names)
    return found


def _binds_on_every_way(statement: ast.stmt, name: str) -> bool:
    """``statement`` binds ``name`` whenever it completes normally."""
    if isinstance(statement, ast.Assign):
        return any(_names_it(t, name) for t in statement.targets)
    if isinstance(statement, ast.AnnAssign):
        return statement.value is not None and _names_it(statement.target, name)
    if isinstance(statement, ast.If):
        return _block_binds(statement.body, name) and _block_binds(statement.orelse, name)
    if isinstance(statement, (ast.With, ast.AsyncWith)):
        return _block_binds(statement.body, name)
    return False


def _block_binds(block: list[ast.stmt], name: str) -> bool:
    """A block that binds ``name`` before it completes, or never completes normally."""
    for statement in block:
        if _binds_on_every_way(statement, name) or isinstance(statement, _LEAVING):
            return True
    return False


def _names_it(target: ast.expr, name: str) -> bool:
    if isinstance(target, ast.Name):
        return target.id == name
    if isinstance(target, (ast.Tuple, ast.List)):
        return any(_names_it(e, name) for e in target.elts)
    return False


def _block_of(owner: ast.AST, child: ast.AST) -> list[ast.stmt] | None:
    """The statement list of ``owner`` (a compound statement, or an ``except`` handler) that
    holds ``child`` directly."""
    for field in _BLOCKS:
        part = getattr(owner, field, None)
        if isinstance(part, list) and any(child is s for s in part):
            return part
    return None


def _branch(statement: ast.AST, child: ast.AST) -> str | None:
    """Which branch of an ``if``/``try`` the direct child ``child`` belongs to."""
    for name in ("body", "orelse", "handlers", "finalbody"):
        part = getattr(statement, name, None)
        if part is child or (isinstance(part, list) and child in part):
            return name
    return None
