"""F2P012: FSDP1 values the migration left unread, once per file, before the import clean-up.

A statement ``NAME = <FSDP1 value>`` (or annotated) goes when the migration made it dead:

- the value is a call of an FSDP1 config or policy class (``FullStateDictConfig(...)``,
  ``MixedPrecision(...)``, ``ModuleWrapPolicy(...)``, ...), ``functools.partial`` of an FSDP1
  wrap policy function, or a member of an FSDP1 enum (``ShardingStrategy.FULL_SHARD``), with
  arguments that cannot have side effects (constants, names, attribute chains, lambdas and
  containers of those): removing it cannot change what the program does;
- ``NAME`` is bound once, in a function (a local) or at module level when private (``_NAME``)
  or in a script (``if __name__ == "__main__":``); nothing reads it (names, string annotations,
  ``__all__``, nested scopes), and nothing in its scope can reach it unseen (``del``,
  ``global``/``nonlocal``, ``locals()``/``vars()``/``globals()``/``eval``/``exec``);
- the input had the same statement, text for text, and read the name: a binding the user never
  read is the user's business;
- the statement has its lines to itself, no marker above it, no ``# fsdp2-port: ignore``, and
  its block keeps another statement (no ``pass`` is ever written).

A public module-level name of an importable module is never removed: another module may import
it. A second run removes nothing more: what is left unread was unread in its input.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from codemods import fsdp1, markers
from codemods.names import Binding, Names, Scope
from codemods.rules.base import Code
from codemods.text import Edit, LineIndex, back

CODE = "F2P012"
#: Not a rule of its own: it runs once per file, after every rewrite, before F2P001.
DOC = Code(
    summary="FSDP1 configs, policies and enum members bound to a name the migration left unread "
    "are removed",
    topic="FSDP1 values left unread",
    rewritten=(
        "`NAME = FullStateDictConfig(...)` / `MixedPrecision(...)` / `ModuleWrapPolicy(...)` / "
        "`functools.partial(<FSDP1 wrap policy>, ...)` / `ShardingStrategy.X` (and the other "
        "FSDP1 configs, policies and enums) whose only reads the migration rewrote: removed "
        "when its arguments have no side effects and the name is a local, or a private or "
        "script module-level name; a binding already unread in the input is left alone"
    ),
    marked="—",
)
#: ``functools.partial`` of one of these is a wrap policy: FSDP1's public functions and the
#: private combinators users import.
_WRAP_POLICY_FUNCTIONS = fsdp1.WRAP_POLICY_FUNCTIONS | {
    "_or_policy",
    "_module_wrap_policy",
    "_wrap_module_cls_individually",
}
#: Calls that read or change a scope's names without naming them.
_DYNAMIC = frozenset({"locals", "vars", "globals", "eval", "exec"})
#: Those of them that reach the module's names from anywhere.
_GLOBAL = frozenset({"globals", "eval", "exec"})
#: Builtins that read or write an object's attributes by a computed name.
_REFLECTION = frozenset(("getattr", "setattr", "delattr", "hasattr", "vars"))
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


@dataclass(frozen=True)
class Dead:
    """One statement to remove: it binds ``target`` to the FSDP1 value named ``what``."""

    statement: ast.Assign | ast.AnnAssign
    target: ast.Name
    what: str

    def message(self) -> str:
        return f"FSDP1 value {self.what} bound to {self.target.id}, no longer read, removed"


def find(
    names: Names,
    lines: LineIndex,
    original: str,
    edits: Sequence[Edit],
    starts: Sequence[int],
) -> list[Dead]:
    """The dead FSDP1 value bindings of the new text (``names``/``lines``) that the migration
    made dead; ``edits``/``starts`` lead from ``original`` to the new text (``apply_tracked``)."""
    uses = names.uses()
    ignored = markers.ignored_lines(lines.text)
    opaque = opaque_scopes(names)
    found = [
        dead
        for scope, binding in _single_bindings(names)
        if not uses.get(binding)
        and scope.node not in opaque
        and visible_only_here(names, scope, binding.name)
        and (dead := _bound_value(names, binding)) is not None
        and _removable_text(lines, dead.statement, ignored)
    ]
    found = _keeping_blocks(names, found)
    return _read_in_input(found, lines, original, edits, starts, names.module_name) if found else []


def removal(lines: LineIndex, dead: Dead) -> Edit:
    """The edit that deletes the statement's lines (``find`` checked it has them to itself),
    with the blank lines above it when a blank line (or the end) follows: the blank lines
    around it do not add up."""
    start, end = lines.span(dead.statement)
    first = lines.line_of(start)
    after = lines.line_end(max(end - 1, start))
    if after == len(lines.text) or not lines.text[after : lines.line_end(after)].strip():
        while first > 1 and not lines.lines[first - 2].strip():
            first -= 1
    return Edit(lines.starts[first - 1], after, "")


def _single_bindings(names: Names) -> Iterator[tuple[Scope, Binding]]:
    """Each name bound exactly once in a function or at module level, by an assignment."""
    for scope in names.scopes.values():
        if not isinstance(scope.node, (*_FUNCTIONS, ast.Module)):
            continue
        for bindings in scope.bindings.values():
            if len(bindings) == 1 and bindings[0].kind == "assign":
                yield scope, bindings[0]


def visible_only_here(names: Names, scope: Scope, name: str) -> bool:
    """A local; or a module-level name no other module reads (``visibility``), that no
    ``global``/``del`` anywhere in the module names. A class attribute never is: it is read
    as an attribute (``self.x``), wherever an instance goes."""
    if isinstance(scope.node, ast.ClassDef):
        return False
    if not isinstance(scope.node, ast.Module):
        return True
    if not names.seen.own(name):
        return False
    declared = (n for g in names.by_type[ast.Global] for n in g.names)  # type: ignore[attr-defined]
    deleted = (
        t.id for d in names.by_type[ast.Delete] for t in ast.walk(d) if isinstance(t, ast.Name)
    )
    return name not in {*declared, *deleted}


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
    if any(isinstance(n, ast.Constant) and n.value == attr for n in names.by_type[ast.Constant]):
        return None
    if any(
        (isinstance(n, ast.Name) and n.id in _REFLECTION) or getattr(n, "attr", None) == "__dict__"
        for n in ast.walk(owner)
    ):
        return None
    reads = []
    for node in names.by_type[ast.Attribute]:
        assert isinstance(node, ast.Attribute)
        if node.attr != attr or _of_module(names, node):
            continue
        if _method_class(names, node) is not owner:
            return None
        if isinstance(node.ctx, ast.Load):
            reads.append(node)
        elif not _stored_plainly(names, node):
            return None
    return reads


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
    """``getattr(x, name)`` (any of ``_REFLECTION``) with a name not written out, or
    ``vars(x)``, on an object that is a plain name other than an imported module's."""
    assert isinstance(call, ast.Call)
    if not (isinstance(call.func, ast.Name) and call.func.id in _REFLECTION and call.args):
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


def seen_only_here(names: Names, scope: Scope, name: str) -> bool:
    """``visible_only_here``, and ``scope`` reads or rebinds ``name`` nowhere ``names`` cannot
    see (``opaque_scopes``): every read of it is one of ``names``'."""
    return visible_only_here(names, scope, name) and scope.node not in opaque_scopes(names, name)


def opaque_scopes(names: Names, naming: str | None = None) -> set[ast.AST]:
    """Functions holding ``del``, ``global``, ``nonlocal`` (only those that name ``naming``,
    when given) or a dynamic call (``locals()`` ...) anywhere inside (nested scopes included),
    and the module when ``globals()``/``eval``/``exec`` is anywhere or ``locals()``/``vars()``
    at its top level: there a name may be read or rebound where ``names`` cannot see it."""
    opaque: set[ast.AST] = set()
    dynamic = [
        call
        for call in names.by_type[ast.Call]
        if isinstance(call.func, ast.Name)  # type: ignore[attr-defined]
        and call.func.id in _DYNAMIC  # type: ignore[attr-defined]
        and not (call.func.id == "vars" and call.args)  # type: ignore[attr-defined]  # an object's
    ]
    if any(c.func.id in _GLOBAL or names.function_of(c) is None for c in dynamic):  # type: ignore[attr-defined]
        opaque.add(names.tree)
    hiding = [
        node
        for kind in (ast.Delete, ast.Global, ast.Nonlocal)
        for node in names.by_type[kind]
        if naming is None or naming in _named_by(node)
    ]
    for node in [*hiding, *dynamic]:
        opaque.update(a for a in names.ancestors(node) if isinstance(a, _FUNCTIONS))
    return opaque


def _named_by(statement: ast.AST) -> set[str]:
    """The names a ``del``/``global``/``nonlocal`` statement names."""
    if isinstance(statement, (ast.Global, ast.Nonlocal)):
        return set(statement.names)
    return {n.id for n in ast.walk(statement) if isinstance(n, ast.Name)}


def _bound_value(names: Names, binding: Binding) -> Dead | None:
    """The statement to remove when ``binding`` is ``NAME = <FSDP1 value>`` (or annotated)."""
    target, value = binding.node, binding.value
    statement = names.parent.get(target)
    if not (
        isinstance(statement, (ast.Assign, ast.AnnAssign))
        and isinstance(target, ast.Name)
        and value is not None
        and statement.value is value
    ):
        return None
    what = _fsdp1_value(names, value)
    return None if what is None else Dead(statement, target, what)


def _fsdp1_value(names: Names, value: ast.expr) -> str | None:
    """How to name ``value`` when it is an FSDP1 value removing which changes nothing."""
    if isinstance(value, ast.Attribute):
        member = fsdp1.first(names.qualified(value))
        return member if fsdp1.enum_of_member(member) else None
    if not isinstance(value, ast.Call) or not _pure_arguments(value):
        return None
    called = fsdp1.first(names.qualified(value.func))
    if called in fsdp1.VALUE_CLASSES:
        return called
    if "functools.partial" in names.qualified(value.func) and value.args:
        policy = fsdp1.first(names.qualified(value.args[0]))
        if policy in _WRAP_POLICY_FUNCTIONS:
            return f"functools.partial({policy}, ...)"
    return None


def _pure_arguments(call: ast.Call) -> bool:
    """Every argument is evaluated without side effects (no ``*``/``**`` unpacking)."""
    return all(_pure(a) for a in call.args) and all(
        k.arg is not None and _pure(k.value) for k in call.keywords
    )


def _pure(node: ast.expr) -> bool:
    """Constants, names, attribute chains, lambdas, ``-1``, and containers of those."""
    if isinstance(node, (ast.Constant, ast.Name, ast.Lambda)):
        return True
    if isinstance(node, ast.Attribute):
        return _pure(node.value)
    if isinstance(node, ast.UnaryOp):
        return _pure(node.operand)
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return all(_pure(e) for e in node.elts)
    if isinstance(node, ast.Dict):
        return all(k is not None and _pure(k) for k in node.keys) and all(
            _pure(v) for v in node.values
        )
    return False


def _removable_text(lines: LineIndex, statement: ast.stmt, ignored: frozenset[int]) -> bool:
    """The statement has its lines to itself (a trailing comment goes with it), no marker
    above it and no ``# fsdp2-port: ignore`` on any of its lines."""
    start, end = lines.span(statement)
    line_start, line_end = lines.line_start(start), lines.line_end(max(end - 1, start))
    after = lines.text[end:line_end].strip()
    return (
        not lines.text[line_start:start].strip()
        and (not after or after.startswith("#"))
        and not markers.existing_above(lines, line_start)
        and not ignored & set(range(statement.lineno, (statement.end_lineno or 0) + 1))
    )


def _keeping_blocks(names: Names, found: list[Dead]) -> list[Dead]:
    """``found`` less the statements of blocks they would leave empty."""
    blocks: dict[int, int] = {}
    for dead in found:
        block = _block(names, dead.statement)
        blocks[id(block)] = blocks.get(id(block), len(block)) - 1
    return [d for d in found if blocks[id(_block(names, d.statement))] > 0]


def _block(names: Names, statement: ast.stmt) -> list[ast.stmt]:
    """The statement list that holds ``statement`` (a body, ``orelse``, ``finalbody``)."""
    parent = names.parent[statement]
    return next(
        getattr(parent, f)
        for f in ("body", "orelse", "finalbody")
        if statement in getattr(parent, f, [])
    )


def _read_in_input(
    found: list[Dead],
    lines: LineIndex,
    original: str,
    edits: Sequence[Edit],
    starts: Sequence[int],
    module_name: str,
) -> list[Dead]:
    """Those of ``found`` whose statement the input had, text for text, with reads of its name."""
    before = Names(ast.parse(original), module_name)
    before_lines = LineIndex(original)
    uses = before.uses()
    stores = {
        before_lines.start(n): n
        for n in before.by_type[ast.Name]
        if isinstance(n.ctx, ast.Store)  # type: ignore[attr-defined]
    }
    kept = []
    for dead in found:
        start, end = lines.span(dead.statement)
        if original[back(start, edits, starts) : back(end, edits, starts)] != lines.text[start:end]:
            continue
        node = stores.get(back(lines.start(dead.target), edits, starts))
        if not isinstance(node, ast.Name) or node.id != dead.target.id:
            continue
        bindings = before.lookup(node.id, before.scope_of(node))[1]
        if any(b.node is node and uses.get(b) for b in bindings):
            kept.append(dead)
    return kept
