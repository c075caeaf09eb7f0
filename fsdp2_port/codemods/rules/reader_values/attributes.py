"""Attributes whose every read the module's ``Names`` see: an attribute only its own class
reads (``own_attribute_reads``, ``class_body_binding``), and every read of an attribute name
in a module that reads no attribute by a computed name (``attribute_loads``)."""

from __future__ import annotations

import ast
import weakref
from collections import defaultdict
from typing import NamedTuple

from fsdp2_port.codemods.assumptions import REFLECTION_CALLS
from fsdp2_port.codemods.names import Names


def own_attribute_reads(
    names: Names, target: ast.Attribute | ast.Name
) -> list[ast.Attribute] | None:
    """The reads of the instance attribute ``self.x = ...`` stores (or of the class attribute
    ``x = ...`` in a class body, cold-stone's ``SHARD_STRATEGY``, bound once there and not read
    by the body itself), when only its own class reads it: ``x`` is an attribute of the
    module's own (``visibility``: private and no other file of the run reads ``.x`` or spells
    ``"x"``; with ``--whole-program`` any such name), the class has no decorator (a
    dataclass's fields are read by name) and bases of its own package, and every ``.x`` (but a
    module's, ``fsdp2_port.x``) and string ``"x"`` of the module is ``self.x`` in a method of
    the class, with no ``getattr``/``setattr``/``vars``/``__dict__`` in it; None otherwise."""
    if isinstance(target, ast.Attribute):
        owner, attr = _method_class(names, target), target.attr
    else:
        owner, attr = class_body_binding(names, target), target.id
    if owner is None or not names.seen.own_attribute(attr):
        return None
    if owner.decorator_list or not all(_own_base(names, base) for base in owner.bases):
        return None
    index = _index(names)
    if attr in index.strings or owner in index.reflecting:
        return None
    reads = []
    for node in index.attributes.get(attr, ()):
        if _of_module(names, node):
            continue
        if _method_class(names, node) is not owner:
            return None
        if isinstance(node.ctx, ast.Load):
            reads.append(node)
        elif not _stored_plainly(names, node):
            return None
    return reads


class _Index(NamedTuple):
    """What ``own_attribute_reads`` asks of every call on one module, found in one pass."""

    #: Every ``.x`` of the module, by ``x``, in source order.
    attributes: dict[str, list[ast.Attribute]]
    #: Every string constant of the module.
    strings: frozenset[object]
    #: The classes that read ``getattr``/``setattr``/``vars`` or ``__dict__`` anywhere inside.
    reflecting: frozenset[ast.AST]


_INDEXES: weakref.WeakKeyDictionary[Names, _Index] = weakref.WeakKeyDictionary()


def _index(names: Names) -> _Index:
    found = _INDEXES.get(names)
    if found is None:
        attributes: dict[str, list[ast.Attribute]] = defaultdict(list)
        for node in names.by_type[ast.Attribute]:
            assert isinstance(node, ast.Attribute)
            attributes[node.attr].append(node)
        reflections = [
            n for n in names.by_type[ast.Name] if getattr(n, "id", None) in REFLECTION_CALLS
        ]
        reflections += attributes.get("__dict__", [])
        reflecting = frozenset(
            a for n in reflections for a in names.ancestors(n) if isinstance(a, ast.ClassDef)
        )
        strings = frozenset(getattr(n, "value", None) for n in names.by_type[ast.Constant])
        found = _INDEXES[names] = _Index(dict(attributes), strings, reflecting)
    return found


def attribute_loads(names: Names) -> dict[str, list[ast.Attribute] | None]:
    """Per attribute name, every ``.name`` the module reads, whatever object it is on (a
    module's or an imported name's aside), when those are all its reads of an attribute of
    that name; None when the module spells ``"name"``, stores ``.name`` other than as an
    assignment's one target, or reads attributes by a name it computes (``getattr(x,
    name)``, ``vars(x)``, ``__dict__``; on an attribute, ``vars(self.info)``, or a module,
    ``getattr(torch, dtype)``, aside): then every name is None."""
    reflects = any(_reflects(names, call) for call in names.by_type[ast.Call]) or any(
        getattr(node, "attr", None) == "__dict__" for node in names.by_type[ast.Attribute]
    )
    out: dict[str, list[ast.Attribute] | None] = {}
    for node in names.by_type[ast.Attribute]:
        assert isinstance(node, ast.Attribute)
        if _of_module(names, node) or names.qualified(node.value):
            continue  # ``torch.float32``, ``ShardingStrategy.X``: no instance's attribute
        reads = out.setdefault(node.attr, [])
        if reads is None:
            continue
        if reflects:
            out[node.attr] = None
        elif isinstance(node.ctx, ast.Load):
            reads.append(node)
        elif not _stored_plainly(names, node):
            out[node.attr] = None
    for constant in names.by_type[ast.Constant]:
        value = getattr(constant, "value", None)
        if isinstance(value, str) and value in out:
            out[value] = None
    return out


def _reflects(names: Names, call: ast.AST) -> bool:
    """``getattr(x, name)`` (any of ``REFLECTION_CALLS``) with a name not written out, or
    ``vars(x)``, on an object that is a plain name other than an imported module's."""
    assert isinstance(call, ast.Call)
    if not (isinstance(call.func, ast.Name) and call.func.id in REFLECTION_CALLS and call.args):
        return False
    named = len(call.args) > 1 and isinstance(call.args[1], ast.Constant)
    target = call.args[0]
    if named or not isinstance(target, ast.Name):
        return False
    bindings = names.bindings_of(target)
    return not (bindings and all(b.kind == "import" for b in bindings))


def class_body_binding(names: Names, target: ast.Name) -> ast.ClassDef | None:
    """The class whose body binds ``target`` (``x = ...`` there), when that is the body's one
    binding of the name and the body reads it nowhere."""
    scope = names.scope_of(target)
    owner = scope.node
    if (
        not isinstance(owner, ast.ClassDef)
        or names.parent.get(names.statement(target)) is not owner
    ):
        return None
    if len(scope.bindings.get(target.id, [])) != 1:
        return None
    if any(names.scope_of(node) is scope for node in names.loads(target.id)):
        return None
    return owner


def _of_module(names: Names, node: ast.Attribute) -> bool:
    """``module.x`` (``import module``): a module's name, no instance's attribute."""
    if not isinstance(node.value, ast.Name):
        return False
    bindings = names.bindings_of(node.value)
    return bool(bindings) and all(
        b.kind == "import" and isinstance(b.statement, ast.Import) for b in bindings
    )


def _method_class(names: Names, node: ast.Attribute) -> ast.ClassDef | None:
    """The class of a method in which ``node`` is ``self.x`` (``self``: the method's first
    parameter, not rebound), or None."""
    if not isinstance(node.value, ast.Name):
        return None
    function = names.function_of(node)
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    owner = names.parent.get(function)
    positional = [*function.args.posonlyargs, *function.args.args]
    if not isinstance(owner, ast.ClassDef) or not positional or function.decorator_list:
        return None
    first = positional[0].arg
    bindings = names.bindings_of(node.value)
    if node.value.id != first or len(bindings) != 1 or bindings[0].kind != "param":
        return None
    return owner


def _own_base(names: Names, base: ast.expr) -> bool:
    """A base class of the module's own package (or ``object`` / ``ABC``): none of a library
    that may read the attribute."""
    qualified = names.qualified(base)
    if qualified & {"builtins.object", "abc.ABC"}:
        return True
    if isinstance(base, ast.Name) and not qualified:
        bindings = names.bindings_of(base)  # a class of this module
        return bool(bindings) and all(b.kind == "class" for b in bindings)
    # the module's top package among the base's (a namespace package may add parents:
    # ``vitra.training.base_strategy`` for ``training.fsdp``)
    package = names.module_name.split(".")[0]
    return bool(package and qualified) and all(package in q.split(".")[:-1] for q in qualified)


def _stored_plainly(names: Names, node: ast.Attribute) -> bool:
    """``self.x = value``, the one target of an assignment."""
    parent = names.parent.get(node)
    return (
        isinstance(node.ctx, ast.Store)
        and isinstance(parent, (ast.Assign, ast.AnnAssign))
        and (parent.targets if isinstance(parent, ast.Assign) else [parent.target]) == [node]
    )
