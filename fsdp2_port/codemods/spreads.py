"""Keyword-argument dicts whose keys are written out, found once for the whole run.

``FSDP(model, **fsdp_kwargs)`` reads another module's ``fsdp_kwargs = {...}`` (``from utils
import fsdp_kwargs``) or a class attribute (``self.fsdp_defaults``, bound in a class body).
The plain form needs the arguments' names, not their values: it reads the values at run
time, through ``fsdp2_port.kwargs_as_migrated``, which also checks that the keys are still
these. ``find`` maps ``module.NAME`` (a module-level dict) and ``.NAME`` (a class attribute:
the only class-level dict of that name in the run) to the keys of their one binding, a dict
display or ``dict(k=...)`` with literal keys, and those its file stores by literal key (a
dict "conditionally extended": they may be absent).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from fsdp2_port.codemods import sources
from fsdp2_port.codemods.assumptions import DICT_GROWING_METHODS
from fsdp2_port.codemods.names import Binding, Names, Scope

from .assumed import either_way

#: A class attribute's entry: ``.NAME``.
ATTRIBUTE = "."


def find(files: Iterable[sources.FsdpFile]) -> dict[str, Keys]:
    """``{"utils.fsdp_kwargs": Keys(...), ".fsdp_defaults": Keys(...)}`` over the files given
    (``sources.fsdp_files``): only names some file spreads (``**name``, ``**x.name``) are
    looked for."""
    files = list(files)
    spread = [m.groups() for f in files for m in _SPREAD.finditer(f.data)]
    if not spread:
        return {}
    # a name spread bare is another module's (at the margin); one spread as an attribute may
    # be a class's, bound one indentation in
    bare = {name for through, name in spread if not through}
    attributes = {name for through, name in spread if through}
    assigned = re.compile(
        b"|".join(
            rb"^" + indent + rb"(?:" + b"|".join(sorted(names)) + rb")[ \t]*(?::[^=\n]*)?=[^=]"
            for indent, names in ((b"", bare), (b"[ \t]+", attributes))
            if names
        ),
        re.M,
    )
    wanted = {name.decode() for _, name in spread}
    found: dict[str, Keys] = {}
    classes: dict[str, Keys | None] = {}
    for file in files:
        tree = file.tree if assigned.search(file.data) else None
        if tree is None or not _binds_any(tree, wanted):
            continue
        for key, keys in in_module(Names(tree, file.module, file.package)):
            if key.startswith(ATTRIBUTE):  # the same attribute in two classes: neither is known
                classes[key] = keys if key not in classes else None
            else:
                found[key] = keys
    found.update({name: keys for name, keys in classes.items() if keys is not None})
    return found


#: ``**name`` / ``**x.y.name`` in a call: (what it is read through, if anything; the name).
_SPREAD = re.compile(rb"\*\*[ \t]*((?:[A-Za-z_]\w*\.)*)([A-Za-z_]\w*)[ \t]*[,)\n]")


def _binds_any(tree: ast.Module, wanted: set[str]) -> bool:
    """A module-level or class-level assignment to one of ``wanted`` (cheap: before names;
    a class defined in a function is not looked into, and its dicts are not found)."""
    bodies, todo = [], [tree.body]
    while todo:  # the module's and its classes' (nested ones too), not functions'
        body = todo.pop()
        bodies.append(body)
        todo += [s.body for s in body if isinstance(s, ast.ClassDef)]
    return any(
        isinstance(t, ast.Name) and t.id in wanted
        for body in bodies
        for statement in body
        if isinstance(statement, (ast.Assign, ast.AnnAssign))
        for t in getattr(statement, "targets", [getattr(statement, "target", None)])
    )


def in_module(names: Names, only: str | None = None) -> Iterator[tuple[str, Keys]]:
    """``find``'s entries for one module: its module-level dicts (when it has a name) and
    class attributes (``only``: the dicts of that name alone)."""
    for scope in names.scopes.values():
        if isinstance(scope.node, ast.Module) and names.module_name:
            prefix = f"{names.module_name}."
        elif isinstance(scope.node, ast.ClassDef):
            prefix = ATTRIBUTE
        else:
            continue
        for name, bindings in scope.bindings.items():
            keys = None if only not in (None, name) else written_keys(names, scope, name, bindings)
            if keys is not None:
                yield prefix + name, keys


@dataclass(frozen=True)
class Keys:
    """A dict's keys: ``required``, bound with it; ``optional``, stored in it by literal key
    somewhere (``d["cpu_offload"] = ...`` under a condition)."""

    required: tuple[str, ...]
    optional: tuple[str, ...] = ()


def written_keys(names: Names, scope: Scope, name: str, bindings: list[Binding]) -> Keys | None:
    """The keys of ``name``'s one binding in ``scope``, a dict display or ``dict(k=...)`` of
    literal keys, and those the file stores in it by literal key (through the name, or any
    attribute of that name); None when the file changes its keys otherwise (``del d[k]``,
    ``d[key]`` with a key computed, ``d.update``, ``d.pop``, ...)."""
    if len(bindings) != 1 or bindings[0].kind != "assign" or bindings[0].value is None:
        return None
    value = bindings[0].value
    displayed = dict_entries(names, value)
    built = Keys(tuple(displayed)) if displayed is not None else _returned_keys(names, value)
    if built is None:
        return None
    required, optional = built.required, list(built.optional)
    for node in names.by_type[ast.Subscript]:
        if _named(names, scope, node.value, name) and not isinstance(node.ctx, ast.Load):  # type: ignore[attr-defined]
            stored = node.slice  # type: ignore[attr-defined]
            if isinstance(node.ctx, ast.Del) or not (  # type: ignore[attr-defined]
                isinstance(stored, ast.Constant) and isinstance(stored.value, str)
            ):
                return None
            if stored.value not in (*required, *optional):
                optional.append(stored.value)
    for node in names.by_type[ast.Attribute]:
        if _named(names, scope, node.value, name) and either_way(DICT_GROWING_METHODS, node.attr):  # type: ignore[attr-defined]
            return None
    return Keys(required, tuple(optional))


def _returned_keys(names: Names, value: ast.expr) -> Keys | None:
    """The keys of the dict ``value``, a call of a function this module defines, returns:
    every ``return`` of it returns one name, bound in it to a dict (``written_keys``)."""
    if not isinstance(value, ast.Call) or not isinstance(value.func, ast.Name):
        return None
    bindings = names.lookup(value.func.id, names.scope_of(value))[1]
    function = bindings[0].node if len(bindings) == 1 else None
    if not isinstance(function, ast.FunctionDef) or function.decorator_list:
        return None
    own = [n for n in _own_nodes(function) if isinstance(n, (ast.Return, ast.Yield, ast.YieldFrom))]
    returned = {
        n.value.id if isinstance(n, ast.Return) and isinstance(n.value, ast.Name) else ""
        for n in own
    }
    if len(returned) != 1 or "" in returned:
        return None
    (name,) = returned
    scope = names.scopes[function]
    return written_keys(names, scope, name, scope.bindings.get(name, []))


def _own_nodes(function: ast.FunctionDef) -> Iterator[ast.AST]:
    """The nodes of ``function``'s body, not those of functions, lambdas or classes in it."""
    todo: list[ast.AST] = list(function.body)
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(node))


def dict_entries(names: Names, value: ast.expr) -> dict[str, ast.expr] | None:
    """The entries of ``{"a": ..., "b": ...}`` or ``dict(a=..., b=...)``, every key written
    out, in order."""
    if isinstance(value, ast.Dict):
        if not all(isinstance(k, ast.Constant) and isinstance(k.value, str) for k in value.keys):
            return None
        return {k.value: v for k, v in zip(value.keys, value.values)}  # type: ignore[union-attr]
    if (
        isinstance(value, ast.Call)
        and "builtins.dict" in names.qualified(value.func)
        and not value.args
        and all(k.arg is not None for k in value.keywords)
    ):
        return {k.arg: k.value for k in value.keywords}  # type: ignore[misc]
    return None


def _named(names: Names, scope: Scope, node: ast.expr, name: str) -> bool:
    """``name`` bound in ``scope``, or ``<anything>.name``: the dict, read by its name or
    perhaps as an attribute."""
    if isinstance(node, ast.Name):
        return node.id == name and names.lookup(name, names.scope_of(node))[0] is scope
    return isinstance(node, ast.Attribute) and node.attr == name
