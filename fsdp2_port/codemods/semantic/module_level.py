"""What a module's own top level does: the names it binds once by ``def`` or ``class``, those
``from <it> import *`` hands on, and whether importing it runs more than definitions."""

from __future__ import annotations

import ast
from collections import defaultdict

from fsdp2_port.codemods import trees
from fsdp2_port.codemods.semantic.loaders import dotted


def star_names(tree: ast.Module, definitions: tuple[str, ...]) -> tuple[str, ...]:
    """Of ``definitions``, those ``from <module> import *`` binds: its ``__all__`` when a
    literal list or tuple of strings sets it, else every name not starting with ``_``."""
    listed: set[str] | None = None
    for statement in tree.body:
        if not isinstance(statement, ast.Assign):
            continue
        if not any(isinstance(t, ast.Name) and t.id == "__all__" for t in statement.targets):
            continue
        value = statement.value
        if not isinstance(value, (ast.List, ast.Tuple)):
            return ()  # computed: which names it holds is not known
        strings = [
            e.value for e in value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)
        ]
        if len(strings) != len(value.elts):
            return ()
        listed = set(strings)
    if listed is not None:
        return tuple(n for n in definitions if n in listed)
    return tuple(n for n in definitions if not n.startswith("_"))


def definitions(tree: ast.Module) -> tuple[str, ...]:
    """The names the module binds once, by a ``def`` or ``class`` statement of its own body
    (no other binding of the name at module level: no assignment, import, or second ``def``)."""
    defined: dict[str, int] = defaultdict(int)
    for statement in tree.body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined[statement.name] += 1
    bound: set[str] = set()
    for node, inside in trees.statements(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).partition(".")[0] for a in node.names}
        elif isinstance(node, ast.Global):
            bound |= set(node.names)
        elif not inside:
            bound |= {
                n.id
                for target in _targets(node)
                for n in ast.walk(target)
                if isinstance(n, ast.Name)
            }
    return tuple(name for name, count in defined.items() if count == 1 and name not in bound)


def _targets(statement: ast.stmt) -> list[ast.expr]:
    """What a statement binds or unbinds by assignment, a loop, a ``with``, a ``del``."""
    if isinstance(statement, ast.Assign):
        return statement.targets
    if isinstance(statement, (ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor)):
        return [statement.target]
    if isinstance(statement, (ast.With, ast.AsyncWith)):
        return [i.optional_vars for i in statement.items if i.optional_vars is not None]
    if isinstance(statement, ast.Delete):
        return statement.targets
    return []


def acts_on_import(tree: ast.Module) -> bool:
    """Whether importing the module runs more than definitions: a module-level statement that
    calls a name the file itself defines or imports from anywhere but a library it never
    passes anything of the run's (any call of a name bound in the file, or of an imported
    name other than a logger's or a dataclass's field), a loop, a ``with``, a ``while``; the
    body of ``if __name__ == "__main__":`` does not count (it runs only as a script)."""
    local = {
        n.name
        for n in tree.body
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    }
    todo: list[ast.stmt] = list(tree.body)
    while todo:
        statement = todo.pop()
        if isinstance(statement, (ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith)):
            return True
        if isinstance(statement, ast.If):
            if (
                dotted(statement.test.left) == "__name__"
                if isinstance(statement.test, ast.Compare)
                else False
            ):
                continue
            todo += [*statement.body, *statement.orelse]
            continue
        if isinstance(statement, ast.Try):
            todo += [*statement.body, *statement.orelse, *statement.finalbody]
            todo += [s for h in statement.handlers for s in h.body]
            continue
        if isinstance(statement, (ast.Expr, ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for node in ast.walk(statement):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                    if node.func.id in local:
                        return True
    return False
