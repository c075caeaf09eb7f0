"""Keyword-argument dicts whose keys are written out, found once for the whole run.

``FSDP(model, **fsdp_kwargs)`` reads another module's ``fsdp_kwargs = {...}`` (``from utils
import fsdp_kwargs``) or a class attribute (``self.fsdp_defaults``, bound in a class body).
The plain form needs the arguments' names, not their values: it reads the values at run
time, through ``fsdp2_port.kwargs_as_migrated``, which also checks that the keys are still
these. ``find`` maps ``module.NAME`` (a module-level dict) and ``.NAME`` (a class attribute:
the only class-level dict of that name in the run) to the keys of their one binding, a dict
display or ``dict(k=...)`` with literal keys, that no code of its file writes a new key to.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable, Iterator

from codemods import sources
from codemods.names import Binding, Names, Scope

#: A class attribute's entry: ``.NAME``.
ATTRIBUTE = "."


def find(
    paths: Iterable[str], module_name: Callable[[str], tuple[str, bool]]
) -> dict[str, tuple[str, ...]]:
    """``{"utils.fsdp_kwargs": ("auto_wrap_policy", ...), ".fsdp_defaults": (...)}``."""
    found: dict[str, tuple[str, ...]] = {}
    attributes: dict[str, tuple[str, ...] | None] = {}
    for path in paths:
        module, package = module_name(path)
        try:
            data = sources.read_bytes(path)
            if b"fsdp" not in data and b"FSDP" not in data:
                continue
            tree = ast.parse(sources.decode(data).text)
        except (sources.UnreadableSource, SyntaxError, ValueError, RecursionError):
            continue
        for key, keys in in_module(Names(tree, module, package)):
            if key.startswith(ATTRIBUTE):  # the same attribute in two classes: neither is known
                attributes[key] = keys if key not in attributes else None
            else:
                found[key] = keys
    found.update({name: keys for name, keys in attributes.items() if keys is not None})
    return found


def in_module(names: Names) -> Iterator[tuple[str, tuple[str, ...]]]:
    """``find``'s entries for one module: its module-level dicts (when it has a name) and
    class attributes."""
    for scope in names.scopes.values():
        if isinstance(scope.node, ast.Module) and names.module_name:
            prefix = f"{names.module_name}."
        elif isinstance(scope.node, ast.ClassDef):
            prefix = ATTRIBUTE
        else:
            continue
        for name, bindings in scope.bindings.items():
            keys = written_keys(names, scope, name, bindings)
            if keys is not None:
                yield prefix + name, keys


def written_keys(
    names: Names, scope: Scope, name: str, bindings: list[Binding]
) -> tuple[str, ...] | None:
    """The literal keys of ``name``'s one binding in ``scope``, a dict display or
    ``dict(k=...)``, when no code of the file stores another key in it (``d[k] = v`` with a
    key not among them, ``d.update``, ``d.setdefault``, ``del d[k]``, ``d.pop``), through
    the name or any attribute of that name."""
    if len(bindings) != 1 or bindings[0].kind != "assign" or bindings[0].value is None:
        return None
    keys = dict_keys(bindings[0].value)
    if keys is None:
        return None
    for node in names.by_type[ast.Subscript]:
        if _named(names, scope, node.value, name) and not isinstance(node.ctx, ast.Load):  # type: ignore[attr-defined]
            stored = node.slice  # type: ignore[attr-defined]
            if isinstance(node.ctx, ast.Del) or not (  # type: ignore[attr-defined]
                isinstance(stored, ast.Constant) and stored.value in keys
            ):
                return None
    for node in names.by_type[ast.Attribute]:
        if _named(names, scope, node.value, name) and node.attr in _GROWING:  # type: ignore[attr-defined]
            return None
    return keys


def dict_keys(value: ast.expr) -> tuple[str, ...] | None:
    """The keys of ``{"a": ..., "b": ...}`` or ``dict(a=..., b=...)``, all written out."""
    if isinstance(value, ast.Dict):
        if all(isinstance(k, ast.Constant) and isinstance(k.value, str) for k in value.keys):
            return tuple(k.value for k in value.keys)  # type: ignore[union-attr]
        return None
    if (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Name)
        and value.func.id == "dict"
        and not value.args
        and all(k.arg is not None for k in value.keywords)
    ):
        return tuple(k.arg for k in value.keywords)  # type: ignore[misc]
    return None


#: Methods that add or remove keys.
_GROWING = frozenset(("update", "setdefault", "pop", "popitem", "clear"))


def _named(names: Names, scope: Scope, node: ast.expr, name: str) -> bool:
    """``name`` bound in ``scope``, or ``<anything>.name``: the dict, read by its name or
    perhaps as an attribute."""
    if isinstance(node, ast.Name):
        return node.id == name and names.lookup(name, names.scope_of(node))[0] is scope
    return isinstance(node, ast.Attribute) and node.attr == name
