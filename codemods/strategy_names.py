"""F2P013: a sharding strategy that only fsdp2_port's readers read is written as its name.

Where FSDP1's strategy was chosen at run time (``{"fsdp": ShardingStrategy.FULL_SHARD, ...}[cfg]``,
a branch per config string, a module-level map, a default parameter, ``getattr(ShardingStrategy,
s)``), the plain rewrite reads it with ``fsdp2_port.mesh_like_fsdp1`` and
``reshard_after_forward_like_fsdp1``, which take the member's name as well as the member. Once
those readers are the value's only readers, each ``ShardingStrategy.X`` it is built from becomes
``"X"`` and ``getattr(ShardingStrategy, s)`` / ``ShardingStrategy[s]`` becomes ``s``: the choice
stays where the program makes it, and the file no longer needs FSDP1's enum (F2P001 then
removes the import).

The value must reach nothing else. From each member, its path is followed up the tree through
conditional expressions, dict values read only by subscripts (``.get`` too), and assignments to
a name; every read of such a name must continue the path, and the path must end as the strategy
argument of a reader. A name qualifies as ``dead_values`` lets it: a local, or a private or
script module-level name, in a scope the names see through; a parameter's default qualifies
when the function reads the parameter only that way (callers may still pass members). Anything
else on the way (a comparison, a call, a log line, an attribute) keeps the member as it is.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from codemods import dead_values, fsdp1, markers
from codemods.names import Names, Scope
from codemods.rules import Code
from codemods.text import Edit, LineIndex

CODE = "F2P013"
#: Not a rule of its own: it runs once per file, after every rewrite, with F2P012.
DOC = Code(
    summary="sharding strategies read only by fsdp2_port's readers are written as their names",
    topic="strategies chosen at run time",
    rewritten=(
        '`ShardingStrategy.X` → `"X"`, `getattr(ShardingStrategy, s)` / `ShardingStrategy[s]` '
        "→ `s`, where the value (through dicts, conditional expressions, locals, private "
        "module-level maps and parameter defaults) reaches only the strategy argument of "
        "`fsdp2_port.mesh_like_fsdp1` / `reshard_after_forward_like_fsdp1`"
    ),
    marked="—",
)
#: The readers that take a strategy's name: their strategy is argument 0 or this keyword.
_READERS = frozenset({"mesh_like_fsdp1", "reshard_after_forward_like_fsdp1"})
_KEYWORD = "sharding_strategy"
_ENUM = "ShardingStrategy"


@dataclass(frozen=True)
class Named:
    """One strategy written as its name: ``node`` becomes ``text``."""

    node: ast.expr
    text: str

    def message(self) -> str:
        return f"sharding strategy read only by fsdp2_port's readers written as {self.text}"


def find(names: Names, lines: LineIndex) -> list[Named]:
    """Each strategy of the text whose value reaches only the readers' strategy arguments."""
    if not any(_is_reader(names, call) for call in names.by_type[ast.Call]):
        return []
    walk = _Paths(names)
    ignored = markers.ignored_lines(lines.text)
    return [
        named
        for named in _strategies(names, lines)
        if named.node.lineno not in ignored and walk.reaches_only_readers(named.node)
    ]


def edit(lines: LineIndex, named: Named) -> Edit:
    start, end = lines.span(named.node)
    return Edit(start, end, named.text)


def _strategies(names: Names, lines: LineIndex) -> Iterator[Named]:
    """``ShardingStrategy.X`` (any spelling FSDP1's names resolve to), and ``getattr`` /
    subscript of the enum by a name."""
    for node in names.by_type[ast.Attribute]:
        assert isinstance(node, ast.Attribute)
        member = fsdp1.first(names.qualified(node)) or ""
        if member.split(".")[0] == _ENUM and member.count(".") == 1:
            yield Named(node, f'"{node.attr}"')
    for node in names.by_type[ast.Call]:
        assert isinstance(node, ast.Call)
        if (
            names.qualified(node.func) == {"builtins.getattr"}
            and len(node.args) == 2
            and not node.keywords
            and _is_enum(names, node.args[0])
        ):
            yield Named(node, lines.source(node.args[1]))
    for node in names.by_type[ast.Subscript]:
        assert isinstance(node, ast.Subscript)
        if isinstance(node.ctx, ast.Load) and _is_enum(names, node.value):
            yield Named(node, lines.source(node.slice))


def _is_enum(names: Names, node: ast.expr) -> bool:
    return fsdp1.first(names.qualified(node)) == _ENUM


def _is_reader(names: Names, call: ast.AST | None) -> bool:
    return isinstance(call, ast.Call) and any(
        q.startswith("fsdp2_port.") and q.rsplit(".", 1)[1] in _READERS
        for q in names.qualified(call.func)
    )


class _Paths:
    """Where values go, memoised per node and per name (a cycle counts as reaching nothing)."""

    def __init__(self, names: Names) -> None:
        self.names = names
        self.memo: dict[object, bool] = {}

    def _hidden(self, scope: Scope, name: str) -> bool:
        """Whether ``name`` may be read or rebound in ``scope`` where the names cannot see it."""
        return scope.node in dead_values.opaque_scopes(self.names, name)

    def reaches_only_readers(self, node: ast.expr) -> bool:
        """Whether every use of ``node``'s value is a reader's strategy argument."""
        return self._memo(node, lambda: self._value(node))

    def _memo(self, key: object, compute: Callable[[], bool]) -> bool:
        if key not in self.memo:
            self.memo[key] = False  # while computing: a cycle reaches no reader
            self.memo[key] = compute()
        return self.memo[key]

    def _value(self, node: ast.expr) -> bool:
        parent = self.names.parent.get(node)
        if isinstance(parent, ast.IfExp) and node is not parent.test:
            return self.reaches_only_readers(parent)
        if isinstance(parent, ast.Dict) and any(node is v for v in parent.values):
            return self._container(parent)
        if isinstance(parent, ast.Call) and parent.args and parent.args[0] is node:
            return _is_reader(self.names, parent)
        if isinstance(parent, ast.keyword) and parent.arg == _KEYWORD:
            return _is_reader(self.names, self.names.parent.get(parent))
        if isinstance(parent, (ast.Assign, ast.AnnAssign)) and parent.value is node:
            target = parent.targets[0] if isinstance(parent, ast.Assign) else parent.target
            if isinstance(parent, ast.Assign) and len(parent.targets) != 1:
                return False
            return isinstance(target, ast.Name) and self._name(target, self._value_read)
        if isinstance(parent, ast.arguments):
            argument = _defaulted(parent, node)
            return argument is not None and self._parameter(parent, argument)
        return False

    def _container(self, mapping: ast.Dict) -> bool:
        """A dict of strategies: read only by subscripts (or ``.get``) whose results go on."""
        parent = self.names.parent.get(mapping)
        if isinstance(parent, ast.Subscript) and parent.value is mapping:
            return self.reaches_only_readers(parent)
        if isinstance(parent, ast.Assign) and len(parent.targets) == 1 and parent.value is mapping:
            target = parent.targets[0]
            return isinstance(target, ast.Name) and self._name(target, self._lookup_read)
        return False

    def _value_read(self, read: ast.Name) -> bool:
        return self.reaches_only_readers(read)

    def _lookup_read(self, read: ast.Name) -> bool:
        parent = self.names.parent.get(read)
        if isinstance(parent, ast.Subscript) and parent.value is read:
            return isinstance(parent.ctx, ast.Load) and self.reaches_only_readers(parent)
        if isinstance(parent, ast.Attribute) and parent.attr == "get":
            call = self.names.parent.get(parent)
            return (
                isinstance(call, ast.Call)
                and call.func is parent
                and (self.reaches_only_readers(call))
            )
        return False

    def _name(self, target: ast.Name, each_read: Callable[[ast.Name], bool]) -> bool:
        """``target``'s name is visible only here and each of its reads passes ``each_read``."""
        scope = self.names.scope_of(target)
        return self._memo(
            (scope.node, target.id, each_read.__name__),
            lambda: self._reads_pass(scope, target.id, each_read),
        )

    def _reads_pass(self, scope: Scope, name: str, each_read: Callable[[ast.Name], bool]) -> bool:
        if self._hidden(scope, name) or not dead_values.visible_only_here(self.names, scope, name):
            return False
        reads = list(self._reads(scope, name))
        return bool(reads) and all(each_read(r) for r in reads)

    def _reads(self, scope: Scope, name: str) -> Iterator[ast.Name]:
        """Every load of ``name`` that resolves to ``scope``'s binding; a string reference
        (``__all__``, an annotation) counts as a read that goes elsewhere."""
        for node in self.names.by_type[ast.Name]:
            assert isinstance(node, ast.Name)
            if node.id == name and isinstance(node.ctx, ast.Load):
                if self.names.lookup(name, self.names.scope_of(node))[0] is scope:
                    yield node
        for other, where in self.names.string_references():
            if other == name and self.names.lookup(name, where)[0] is scope:
                yield ast.Name(id=name, ctx=ast.Load())  # has no parent: reaches no reader

    def _parameter(self, arguments: ast.arguments, argument: ast.arg) -> bool:
        function = self.names.parent.get(arguments)
        scope = self.names.scopes.get(function) if function is not None else None
        if scope is None or self._hidden(scope, argument.arg):
            return False
        reads = list(self._reads(scope, argument.arg))
        return bool(reads) and all(self.reaches_only_readers(r) for r in reads)


def _defaulted(arguments: ast.arguments, default: ast.expr) -> ast.arg | None:
    """The parameter whose default ``default`` is."""
    positional = [*arguments.posonlyargs, *arguments.args]
    for argument, value in zip(
        positional[len(positional) - len(arguments.defaults) :], arguments.defaults
    ):
        if value is default:
            return argument
    for argument, keyword_default in zip(arguments.kwonlyargs, arguments.kw_defaults):
        if keyword_default is default:
            return argument
    return None
