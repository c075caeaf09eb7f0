"""What a part of a value holds, for the value flow (``values.Ties``): an element of a
container, a name a tuple or a loop unpacks into, a part of a module a walk yields
(``m.modules()``, ``FSDP.fsdp_modules(m)``)."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from fsdp2_port.codemods import fsdp1
from fsdp2_port.codemods.assumptions import MODULE_WALKS
from fsdp2_port.codemods.refs import UNKNOWN, Given, Ref, Returned

if TYPE_CHECKING:
    from fsdp2_port.codemods.semantic.values import Ties

_FSDP_MODULES_FSDP1 = "FullyShardedDataParallel.fsdp_modules"
_FSDP_MODULES = {"fsdp2_port.fsdp_modules"}


def unpacked(ties: Ties, target: ast.AST) -> set[Ref]:
    """``a, b = value``: what element ``target`` takes, when ``value`` is a tuple or a call
    of a function that returns tuples (of this file, or of the run: ``_element_of``)."""
    parent = ties.parsed.names.parent.get(target)
    statement = ties.parsed.names.parent.get(parent) if parent is not None else None
    if isinstance(parent, (ast.For, ast.AsyncFor)) and parent.target is target:
        return element(ties, parent.iter)
    if isinstance(statement, (ast.For, ast.AsyncFor)) and statement.target is parent:
        return _named_part(ties, statement.iter, parent, target)
    if not (isinstance(parent, (ast.Tuple, ast.List)) and isinstance(statement, ast.Assign)):
        return {UNKNOWN}  # a ``with``'s, an ``except``'s target, a nested unpacking...
    if parent not in statement.targets or any(isinstance(e, ast.Starred) for e in parent.elts):
        return set()
    return _unpacked_from(
        ties,
        statement.value,
        parent.elts.index(target),  # type: ignore[arg-type]
        len(parent.elts),
    )


def _unpacked_from(ties: Ties, value: ast.expr, index: int, length: int) -> set[Ref]:
    """Element ``index`` of the ``length`` that ``value`` unpacks into: of a tuple spelled
    out, of the tuples a function of this file returns, of a call of another file's."""
    values: list[ast.AST] = [value]
    if isinstance(value, ast.Call):
        func = value.func
        functions = [
            b.node
            for b in (ties.parsed.names.bindings_of(func) if isinstance(func, ast.Name) else [])
            if b.kind == "def"
        ]
        if not functions:
            if not ties.parsed.names.qualified(func):
                return {UNKNOWN}  # ``self.method()``, a local callable: tuples not followed
            return _element_of(ties, value, index, length)
        values = [r for f in functions for r in ties._returns.get(f, ())]
    out = {ref for one in values for ref in tuple_element(ties, one, index, length)}
    return out if values else {UNKNOWN}


def tuple_element(ties: Ties, value: ast.AST, index: int, length: int) -> set[Ref]:
    """What element ``index`` of ``length`` takes from one value unpacked (spelled, or
    returned): that element of a tuple of ``length``, nothing of another tuple (it fails to
    unpack), anything of a value not spelled as a tuple."""
    if not isinstance(value, ast.Tuple) or any(isinstance(e, ast.Starred) for e in value.elts):
        return {UNKNOWN}
    return set(ties._value(value.elts[index])) if len(value.elts) == length else set()


def _element_of(ties: Ties, call: ast.Call, index: int, length: int) -> set[Ref]:
    """Element ``index`` of the ``length`` a call by a qualified name unpacks into: for
    another file's function ``f``, a ``Returned`` of ``f[index/length]``, which the run
    settles from the tuples ``f`` returns (``file_links.FileLinks.exports``); for a
    library's, what it was handed."""
    return {
        Returned(f"{r.function}[{index}/{length}]") if isinstance(r, Returned) else r
        for r in ties._value(call)
    }


def element(ties: Ties, container: ast.AST) -> set[Ref]:
    """What an element of ``container`` (``x[i]``, ``for m in x``) may hold: a library
    object's container holds what the object was given; a walk of a module's parts
    (``_walked_module``) holds parts of the module (a site on a part is on it); anything else,
    anything."""
    instances = ties._instances(container)
    if instances:
        return {Given(i) for i in instances}
    walked = _walked_module(ties, container)
    return set(ties._value(walked)) if walked is not None else {UNKNOWN}


def _named_part(ties: Ties, container: ast.expr, pair: ast.AST, target: ast.AST) -> set[Ref]:
    """``for name, part in m.named_modules()``: the name holds no model, the part is a
    part of ``m``; any other unpacking in a loop, anything."""
    walked = _walked_module(ties, container)
    named = isinstance(container, ast.Call) and isinstance(container.func, ast.Attribute)
    if not (named and container.func.attr.startswith("named_")):  # type: ignore[attr-defined]
        return {UNKNOWN}
    if walked is None or not isinstance(pair, ast.Tuple) or len(pair.elts) != 2:
        return {UNKNOWN}
    return set(ties._value(walked)) if pair.elts[1] is target else set()


def _walked_module(ties: Ties, container: ast.AST) -> ast.expr | None:
    """The module whose parts ``container`` walks: ``m`` of ``m.modules()`` (a
    ``MODULE_WALKS`` method), of ``FSDP.fsdp_modules(m)``, ``fsdp2_port.fsdp_modules(m)``."""
    if not isinstance(container, ast.Call):
        return None
    func = container.func
    qualified = ties.parsed.names.qualified(func)
    if qualified & _FSDP_MODULES or fsdp1.first(qualified) == _FSDP_MODULES_FSDP1:
        return container.args[0] if len(container.args) == 1 else None
    if isinstance(func, ast.Attribute) and not qualified:
        if ties.parsed.assumed.takes(MODULE_WALKS, func.attr, container):
            return func.value
    return None
