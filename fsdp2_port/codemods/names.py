"""What each name in a module refers to: scopes, bindings, qualified names, from ``ast``.

One walk over the tree records every scope (module, class, function, lambda, comprehension),
every binding in it (imports with the dotted name they bind, assignments with their value,
parameters, definitions) and every node's parent. Lookups then follow Python's rules: a name
bound anywhere in a function is local to all of it (``global``/``nonlocal`` aside), class
bodies are not enclosing scopes for their methods, and what no scope binds is a builtin.

A name can have several bindings (``try: from x import A`` / ``except: A = None``): its
qualified names are those of all its import bindings, as libcst's ``QualifiedNameProvider``
reports them. Relative imports resolve when the module's own dotted name is known.
"""

from __future__ import annotations

import ast
import builtins
from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from fsdp2_port.codemods import trees
from fsdp2_port.codemods.visibility import Visibility

_BUILTINS = frozenset(dir(builtins))
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
#: Calls that import a module named by a string and return it.
_IMPORTERS = frozenset({"importlib.import_module", "pytest.importorskip"})


#: The node types ``_Builder._enter`` records something for.
_BINDERS = frozenset(
    {
        *_FUNCTIONS,
        ast.Lambda,
        ast.ClassDef,
        *_COMPREHENSIONS,
        ast.Import,
        ast.ImportFrom,
        ast.Global,
        ast.Nonlocal,
        ast.Assign,
        ast.AnnAssign,
        ast.AugAssign,
        ast.For,
        ast.AsyncFor,
        ast.withitem,
        ast.ExceptHandler,
        ast.NamedExpr,
        ast.Delete,
        ast.MatchAs,
        ast.MatchStar,
        ast.MatchMapping,
    }
)


@dataclass(eq=False)
class Binding:
    """One place that binds ``name`` in a scope."""

    name: str
    #: ``import``, ``assign``, ``param``, ``def``, ``class`` or ``other``.
    kind: str
    #: The binding node: an ``ast.alias``, the ``ast.Name`` target, the ``arg``, the def.
    node: ast.AST
    #: For imports: the dotted name bound (``torch.distributed.fsdp.ShardingStrategy``).
    qualified: str | None = None
    #: For ``name = value`` (a single plain target): the value.
    value: ast.expr | None = None
    #: The import statement, for imports.
    statement: ast.stmt | None = None


@dataclass(eq=False)
class Scope:
    node: ast.AST
    parent: Scope | None
    bindings: dict[str, list[Binding]] = field(default_factory=lambda: defaultdict(list))
    globals: set[str] = field(default_factory=set)
    nonlocals: set[str] = field(default_factory=set)

    @property
    def is_class(self) -> bool:
        return isinstance(self.node, ast.ClassDef)

    @property
    def is_function(self) -> bool:
        return isinstance(self.node, (*_FUNCTIONS, ast.Lambda))


class Names:
    """Scopes, bindings and parents of one parsed module."""

    def __init__(
        self,
        tree: ast.Module,
        module_name: str = "",
        is_package: bool = False,
        reexports: Mapping[str, str] | None = None,
        seen: Visibility | None = None,
        renames: Mapping[str, str] | None = None,
    ) -> None:
        self.tree = tree
        self.module_name = module_name
        self.is_package = is_package
        #: FSDP1 names other modules of the run re-export (``reexports.find``), read through.
        self.reexports: Mapping[str, str] = reexports or {}
        #: Which of its module-level names only this module reads (``visibility``).
        self.seen = seen or Visibility()
        #: Modules its imports spell otherwise than the run names the files they find
        #: (``ModuleGraph.renames``): read by that name.
        self.renames: Mapping[str, str] = renames or {}
        self.parent: dict[ast.AST, ast.AST] = {}
        self.scopes: dict[ast.AST, Scope] = {}
        #: Every node of each type, in source order: rules take what they look at from here.
        self.by_type: dict[type, list[ast.AST]] = defaultdict(list)
        #: Every annotation expression (string annotations name things too).
        self.annotations: list[ast.expr] = []
        self._qualified: dict[ast.AST, frozenset[str]] = {}
        self._loads: dict[str, list[ast.Name]] | None = None
        self._strings: list[tuple[str, Scope]] | None = None
        self._scope: dict[ast.AST, Scope] = {}
        _Builder(self).build(tree)

    # -- structure ---------------------------------------------------------------------------
    def ancestors(self, node: ast.AST) -> Iterator[ast.AST]:
        while node in self.parent:
            node = self.parent[node]
            yield node

    def statement(self, node: ast.AST) -> ast.stmt:
        """The innermost statement that holds ``node`` (``node`` itself if a statement)."""
        while not isinstance(node, ast.stmt):
            node = self.parent[node]
        return node

    def scope_of(self, node: ast.AST) -> Scope:
        """The scope ``node`` is evaluated in (a def's name and defaults: the outer one);
        recorded as the tree was read, found from the ancestors for a node made since."""
        recorded = self._scope.get(node)
        if recorded is not None:
            return recorded
        child = node
        for ancestor in self.ancestors(node):
            scope = self.scopes.get(ancestor)
            if scope is not None and _evaluated_inside(ancestor, child):
                return scope
            child = ancestor
        return self.scopes[self.tree]

    def function_of(self, node: ast.AST) -> ast.AST | None:
        """The innermost function (def or lambda) around ``node``, or None at module level."""
        scope: Scope | None = self.scope_of(node)
        while scope is not None and not scope.is_function:
            scope = scope.parent
        return None if scope is None else scope.node

    def class_of(self, node: ast.AST) -> ast.ClassDef | None:
        """The class whose method (or body) holds ``node``."""
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, ast.ClassDef):
                return ancestor
        return None

    # -- lookups -------------------------------------------------------------------------------
    def lookup(self, name: str, scope: Scope) -> tuple[Scope | None, list[Binding]]:
        """The scope that binds ``name`` as seen from ``scope``, and its bindings there."""
        current: Scope | None = scope
        first = True
        while current is not None:
            if name in current.globals:
                module = self.scopes[self.tree]
                return module, module.bindings.get(name, [])
            if not (current.is_class and not first) and name in current.bindings:
                if name not in current.nonlocals:
                    return current, current.bindings[name]
            first = False
            current = current.parent
        return None, []

    def bindings_of(self, node: ast.Name) -> list[Binding]:
        return self.lookup(node.id, self.scope_of(node))[1]

    def qualified(self, node: ast.AST) -> frozenset[str]:
        """Dotted names an ``ast.Name``/``ast.Attribute`` chain may refer to (empty if local);
        computed once per node (rules ask about the same nodes many times)."""
        found = self._qualified.get(node)
        if found is None:
            found = self._qualified[node] = self._compute_qualified(node)
        return found

    def _compute_qualified(self, node: ast.AST) -> frozenset[str]:
        if isinstance(node, ast.Attribute):
            return frozenset(
                self.through(f"{base}.{node.attr}") for base in self.qualified(node.value)
            )
        if not isinstance(node, ast.Name):
            return frozenset()
        scope, bindings = self.lookup(node.id, self.scope_of(node))
        if scope is None:
            return frozenset({f"builtins.{node.id}"} if node.id in _BUILTINS else ())
        alias = self._alias(bindings)
        if alias is not None:
            return self.qualified(alias)
        module = self._imported_module(bindings)
        if module is not None:
            return frozenset({self.through(module)})
        return frozenset(self.through(b.qualified) for b in bindings if b.qualified is not None)

    def through(self, qualified: str) -> str:
        """A name as the run names it: a module of the run by its canonical name
        (``renames``), a name another module of the run re-exports as the torch name it
        stands for."""
        if self.renames:
            qualified = self._renamed(qualified)
        return self.reexports.get(qualified, qualified)

    def _renamed(self, qualified: str) -> str:
        head = qualified
        while True:
            new = self.renames.get(head)
            if new is not None:
                return new + qualified[len(head) :]
            if "." not in head:
                return qualified
            head = head.rpartition(".")[0]

    def _alias(self, bindings: list[Binding]) -> ast.expr | None:
        """The chain a name bound once in its scope is an alias of (``Wrapper = fsdp.FSDP``,
        ``FSDP1Module: TypeAlias = FSDP``, ``old_hook = _runtime_utils._post_backward_hook``),
        which it then resolves like."""
        if len(bindings) != 1:
            return None
        value = bindings[0].value
        if bindings[0].kind != "assign" or not isinstance(value, (ast.Name, ast.Attribute)):
            return None
        head: ast.expr = value
        while isinstance(head, ast.Attribute):
            head = head.value
        if isinstance(head, ast.Name) and head.id == bindings[0].name:
            return None  # x = x.y: not an alias of itself
        return value

    def _imported_module(self, bindings: list[Binding]) -> str | None:
        """The module a name bound once to ``importlib.import_module("m")`` (or
        ``pytest.importorskip("m")``) is: ``m``, absolute."""
        if len(bindings) != 1 or bindings[0].kind != "assign":
            return None
        value = bindings[0].value
        if not (
            isinstance(value, ast.Call)
            and value.args
            and isinstance(value.args[0], ast.Constant)
            and isinstance(value.args[0].value, str)
            and not value.args[0].value.startswith(".")
        ):
            return None
        return value.args[0].value if self.qualified(value.func) & _IMPORTERS else None

    def imports(self) -> Iterator[Binding]:
        """Every import binding of the module, in every scope."""
        for scope in self.scopes.values():
            for bindings in scope.bindings.values():
                yield from (b for b in bindings if b.kind == "import")

    def uses(self) -> dict[Binding, int]:
        """How often each binding is read: name loads, string annotations and ``__all__``."""
        counts: dict[Binding, int] = defaultdict(int)
        for node in self.by_type[ast.Name]:
            assert isinstance(node, ast.Name)
            if isinstance(node.ctx, ast.Load):
                for binding in self.bindings_of(node):
                    counts[binding] += 1
        for name, scope in self.string_references():
            for binding in self.lookup(name, scope)[1]:
                counts[binding] += 1
        return counts

    def loads(self, name: str) -> list[ast.Name]:
        """Every load of the name ``name``, whatever it resolves to (indexed once)."""
        if self._loads is None:
            self._loads = defaultdict(list)
            for node in self.by_type[ast.Name]:
                assert isinstance(node, ast.Name)
                if isinstance(node.ctx, ast.Load):
                    self._loads[node.id].append(node)
        return self._loads.get(name, [])

    def string_references(self) -> list[tuple[str, Scope]]:
        """Names read inside string annotations and listed in a module's ``__all__`` (found
        once)."""
        if self._strings is None:
            self._strings = list(self._string_references())
        return self._strings

    def _string_references(self) -> Iterator[tuple[str, Scope]]:
        for annotation in self.annotations:
            for constant in ast.walk(annotation):
                if isinstance(constant, ast.Constant) and isinstance(constant.value, str):
                    try:
                        parsed = ast.parse(constant.value.strip(), mode="eval")
                    except SyntaxError:
                        continue
                    scope = self.scope_of(annotation)
                    for inner in ast.walk(parsed):
                        if isinstance(inner, ast.Name):
                            yield inner.id, scope
        module = self.scopes[self.tree]
        for binding in module.bindings.get("__all__", []):
            if isinstance(binding.value, (ast.List, ast.Tuple)):
                for element in binding.value.elts:
                    if isinstance(element, ast.Constant) and isinstance(element.value, str):
                        yield element.value, module

    def resolve_relative(self, level: int, module: str | None) -> str | None:
        """The module ``from <dots><module> import`` names, when this module's own is known."""
        if not self.module_name:
            return None
        parts = self.module_name.split(".")
        if not self.is_package:
            parts = parts[:-1]
        if level - 1 > len(parts):
            return None
        base = parts[: len(parts) - (level - 1)]
        return ".".join([*base, *([module] if module else [])]) or None


def names_of(
    tree: ast.Module,
    module_name: str = "",
    is_package: bool = False,
    reexports: Mapping[str, str] | None = None,
    seen: Visibility | None = None,
    renames: Mapping[str, str] | None = None,
) -> Names:
    """``Names(...)``: built once per tree and settings in a run (``trees.derived``)."""
    settings = (module_name, is_package, dict(reexports or {}), seen, dict(renames or {}))
    return trees.derived(
        tree,
        "names",
        settings,
        lambda: Names(tree, module_name, is_package, reexports, seen, renames),
    )


def _evaluated_inside(scope_node: ast.AST, child: ast.AST) -> bool:
    """Whether ``child`` (a direct child of ``scope_node``) is evaluated in that node's scope.

    Decorators, defaults, annotations and bases belong to the outer scope; a comprehension is
    taken as a whole to be its own scope (its first iterable, strictly, is not).
    """
    if isinstance(scope_node, (*_FUNCTIONS, ast.ClassDef)):
        return child in scope_node.body
    if isinstance(scope_node, ast.Lambda):
        return child is scope_node.body
    return True


class _Builder:
    """The one walk: parents, per-type index, scopes and their bindings."""

    def __init__(self, names: Names) -> None:
        self.names = names

    def build(self, tree: ast.Module) -> None:
        module = Scope(tree, None)
        self.names.scopes[tree] = module
        self._visit_block(tree, module)

    def _visit_block(self, node: ast.AST, scope: Scope) -> None:
        parent = self.names.parent
        by_type = self.names.by_type
        scopes = self.names._scope
        stack: list[tuple[ast.AST, Scope]] = [(node, scope)]
        while stack:
            current, current_scope = stack.pop()
            by_type[type(current)].append(current)
            scopes[current] = current_scope
            inner_scope = self._enter(current, current_scope)
            for child in reversed(list(ast.iter_child_nodes(current))):
                parent[child] = current
                inside = inner_scope is not current_scope and _evaluated_inside(current, child)
                stack.append((child, inner_scope if inside else current_scope))

    def _enter(self, node: ast.AST, scope: Scope) -> Scope:
        """Record what ``node`` binds in ``scope``; the scope its children are evaluated in."""
        if type(node) not in _BINDERS:  # most nodes: nothing to record
            return scope
        if isinstance(node, _FUNCTIONS):
            self._bind(scope, node.name, "def", node)
            inner = self._new_scope(node, scope)
            self._bind_arguments(node.args, inner)
            self._annotations(node)
            return inner
        if isinstance(node, ast.Lambda):
            inner = self._new_scope(node, scope)
            self._bind_arguments(node.args, inner)
            return inner
        if isinstance(node, ast.ClassDef):
            self._bind(scope, node.name, "class", node)
            return self._new_scope(node, scope)
        if isinstance(node, _COMPREHENSIONS):
            inner = self._new_scope(node, scope)
            for generator in node.generators:
                for target in ast.walk(generator.target):
                    if isinstance(target, ast.Name):
                        self._bind(inner, target.id, "other", target)
            return inner
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    self._bind(scope, alias.asname, "import", alias, alias.name, node)
                else:
                    head = alias.name.split(".", 1)[0]
                    self._bind(scope, head, "import", alias, head, node)
        elif isinstance(node, ast.ImportFrom):
            base = (
                node.module
                if not node.level
                else self.names.resolve_relative(node.level, node.module)
            )
            for alias in node.names:
                if alias.name == "*":
                    continue
                qualified = f"{base}.{alias.name}" if base else None
                self._bind(scope, alias.asname or alias.name, "import", alias, qualified, node)
        elif isinstance(node, ast.Global):
            scope.globals.update(node.names)
        elif isinstance(node, ast.Nonlocal):
            scope.nonlocals.update(node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            plain = isinstance(node, (ast.Assign, ast.AnnAssign)) and len(targets) == 1
            for target in targets:
                if isinstance(target, ast.Name):
                    value = node.value if plain else None
                    self._bind(scope, target.id, "assign", target, value=value)
                else:
                    self._bind_targets(target, scope)
            if isinstance(node, ast.AnnAssign):
                self._record_annotation(node.annotation)
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            self._bind_targets(node.target, scope)
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            self._bind_targets(node.optional_vars, scope)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            self._bind(scope, node.name, "other", node)
        elif isinstance(node, ast.NamedExpr) and isinstance(node.target, ast.Name):
            target_scope = scope
            while isinstance(target_scope.node, _COMPREHENSIONS) and target_scope.parent:
                target_scope = target_scope.parent
            self._bind(target_scope, node.target.id, "assign", node.target, value=node.value)
        elif isinstance(node, ast.Delete):
            for target in node.targets:
                self._bind_targets(target, scope)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            self._bind(scope, node.name, "other", node)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            self._bind(scope, node.rest, "other", node)
        return scope

    def _new_scope(self, node: ast.AST, parent: Scope) -> Scope:
        scope = Scope(node, parent)
        self.names.scopes[node] = scope
        return scope

    def _bind(
        self,
        scope: Scope,
        name: str,
        kind: str,
        node: ast.AST,
        qualified: str | None = None,
        statement: ast.stmt | None = None,
        value: ast.expr | None = None,
    ) -> None:
        scope.bindings[name].append(Binding(name, kind, node, qualified, value, statement))

    def _bind_targets(self, target: ast.AST, scope: Scope) -> None:
        """The names a target binds (``a``, ``a, *b``), not those it reads (``self.x``,
        ``d[k]``, ``f(m).x``)."""
        for node in ast.walk(target):
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                self._bind(scope, node.id, "other", node)

    def _bind_arguments(self, arguments: ast.arguments, scope: Scope) -> None:
        every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
        every += [a for a in (arguments.vararg, arguments.kwarg) if a is not None]
        for argument in every:
            self._bind(scope, argument.arg, "param", argument)

    def _annotations(self, function: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        arguments = function.args
        every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
        every += [a for a in (arguments.vararg, arguments.kwarg) if a is not None]
        for argument in every:
            if argument.annotation is not None:
                self._record_annotation(argument.annotation)
        if function.returns is not None:
            self._record_annotation(function.returns)

    def _record_annotation(self, expr: ast.expr) -> None:
        self.names.annotations.append(expr)
