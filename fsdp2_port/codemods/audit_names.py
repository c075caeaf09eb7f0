"""The audit's own reading of names, over plain ``ast``: what FSDP1 and FSDP2 are called, and
what a name in a module refers to.

It shares nothing with the codemod's analysis (``fsdp2_port.codemods.names``,
``fsdp2_port.codemods.fsdp1``): a bug
there must not hide here too. Its tables are its own lists of the registry (``AUDIT_*`` in
``fsdp2_port.codemods.assumptions``), written out from torch's own modules
(``torch.distributed.fsdp`` and
its ``api``, ``fully_sharded_data_parallel``, ``wrap`` and ``sharded_grad_scaler``);
``tests/codemods/test_audit_torch.py`` checks them against torch when it is installed.

``Scopes`` resolves a name the way Python does, simplified: module, class, function, lambda and
comprehension scopes; a name bound anywhere in a function is local to all of it (``global`` and
``nonlocal`` aside); class bodies do not enclose their methods; what no scope binds is a
builtin. A name's dotted names come from its imports (``import torch.distributed.fsdp as f``,
``from ... import FullyShardedDataParallel as FSDP``, relative imports when the module's own
name is known) and from plain aliases (``FSDP = fsdp.FullyShardedDataParallel``,
``cls = FSDP if sharded else DDP``); an attribute chain extends its head's.
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Mapping
from dataclasses import dataclass, field

from fsdp2_port.codemods.assumptions import (
    AUDIT_CONFIGURATION,
    AUDIT_FSDP1_MODULES,
    AUDIT_FSDP1_OTHER_PUBLIC,
    AUDIT_FSDP2_MODULES,
    AUDIT_FSDP2_OTHER_NAMES,
    AUDIT_FSDP2_POLICIES,
)

# -- the tables ---------------------------------------------------------------------------------

FSDP1_PACKAGE = "torch.distributed.fsdp"
#: The private module that holds FSDP2 (every other private module is FSDP1's).
_FSDP2_PRIVATE = "_fully_shard"

FSDP1_CLASS = "FullyShardedDataParallel"
#: Every public FSDP1 name: the configuration values, the wrapper, its flat parameter, its grad
#: scaler and the ``enable_wrap``/``wrap`` context API.
FSDP1_PUBLIC = AUDIT_FSDP1_OTHER_PUBLIC.members | {
    name for name in AUDIT_CONFIGURATION if not name.startswith("_")
}

_FSDP2_NAMES = AUDIT_FSDP2_OTHER_NAMES.members | AUDIT_FSDP2_POLICIES.members

PARTIAL = "functools.partial"


def fsdp1_name(qualified: str) -> str | None:
    """``torch.distributed.fsdp.api.ShardingStrategy.HYBRID_SHARD`` ->
    ``ShardingStrategy.HYBRID_SHARD``; None when ``qualified`` is not an FSDP1 name."""
    prefix = FSDP1_PACKAGE + "."
    if not qualified.startswith(prefix):
        return None
    parts = qualified[len(prefix) :].split(".")
    if len(parts) > 1 and parts[0] in AUDIT_FSDP1_MODULES:
        parts = parts[1:]
    head = parts[0]
    if head in FSDP1_PUBLIC or (head.startswith("_") and head != _FSDP2_PRIVATE):
        return ".".join(parts)
    return None


def fsdp2_name(qualified: str) -> str | None:
    """``fully_shard``, ``FSDPModule`` or a policy class when ``qualified`` is FSDP2's."""
    if not qualified.startswith(AUDIT_FSDP2_MODULES.names):
        return None
    last = qualified.rsplit(".", 1)[1]
    return last if last in _FSDP2_NAMES else None


def first_fsdp1(qualified: frozenset[str]) -> str | None:
    """The FSDP1 name among several dotted names (the first in sorted order)."""
    return next((n for n in map(fsdp1_name, sorted(qualified)) if n is not None), None)


def first_fsdp2(qualified: frozenset[str]) -> str | None:
    return next((n for n in map(fsdp2_name, sorted(qualified)) if n is not None), None)


# -- the resolver -------------------------------------------------------------------------------

_BUILTINS = frozenset(dir(builtins))
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_NOTHING: frozenset[str] = frozenset()


@dataclass(eq=False)
class Binding:
    """One place that binds a name: ``kind`` is ``import``, ``assign`` (a name target, with its
    ``value``), ``unpack`` (an element of a tuple target), ``param``, ``def``, ``class`` or
    ``other`` (loop targets, ``with ... as``, ``except ... as``, augmented assignments...)."""

    kind: str
    node: ast.AST
    value: ast.expr | None = None
    dotted: str | None = None


@dataclass(eq=False)
class Scope:
    node: ast.AST
    parent: Scope | None
    names: dict[str, list[Binding]] = field(default_factory=dict)
    declared_global: set[str] = field(default_factory=set)
    declared_nonlocal: set[str] = field(default_factory=set)

    @property
    def is_class(self) -> bool:
        return isinstance(self.node, ast.ClassDef)

    def bind(self, name: str, binding: Binding) -> None:
        self.names.setdefault(name, []).append(binding)


class Scopes:
    """Parents, scopes and bindings of one module, and the dotted names its expressions name."""

    def __init__(
        self,
        tree: ast.Module,
        module_name: str = "",
        is_package: bool = False,
        handed_on: Mapping[str, str] | None = None,
    ) -> None:
        self.tree = tree
        self._package = _package_of(module_name, is_package)
        #: ``module.name`` -> the FSDP1 name another module of the run imports under it.
        self.handed_on: Mapping[str, str] = handed_on or {}
        self.parent: dict[ast.AST, ast.AST] = {}
        #: The scope each node is evaluated in.
        self.scope: dict[ast.AST, Scope] = {}
        #: Each scope node (module, class, function, lambda, comprehension) -> its scope.
        self.scopes: dict[ast.AST, Scope] = {}
        self.nodes: list[ast.AST] = []  # every node, parents before children
        self._dotted: dict[ast.AST, frozenset[str]] = {}
        self._walk()

    # -- the walk ----------------------------------------------------------------------------
    def _walk(self) -> None:
        module = Scope(self.tree, None)
        self.scopes[self.tree] = module
        pending: list[tuple[ast.AST, Scope]] = [(self.tree, module)]
        while pending:
            node, scope = pending.pop()
            self.nodes.append(node)
            self.scope[node] = scope
            inner = self._binds(node, scope)
            for child in reversed(list(ast.iter_child_nodes(node))):  # popped in source order
                self.parent[child] = node
                pending.append((child, inner if _inside(node, child) else scope))

    def _binds(self, node: ast.AST, scope: Scope) -> Scope:
        """Record what ``node`` binds; the scope its inner part is evaluated in."""
        if isinstance(node, (*FUNCTIONS, ast.Lambda)):
            if not isinstance(node, ast.Lambda):
                scope.bind(node.name, Binding("def", node))
            inner = self._new(node, scope)
            arguments = node.args
            for argument in (
                *arguments.posonlyargs,
                *arguments.args,
                *arguments.kwonlyargs,
                *(a for a in (arguments.vararg, arguments.kwarg) if a is not None),
            ):
                inner.bind(argument.arg, Binding("param", argument))
            return inner
        if isinstance(node, ast.ClassDef):
            scope.bind(node.name, Binding("class", node))
            return self._new(node, scope)
        if isinstance(node, _COMPREHENSIONS):
            inner = self._new(node, scope)
            for generator in node.generators:
                self._bind_all(generator.target, inner)
            return inner
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    scope.bind(alias.asname, Binding("import", alias, dotted=alias.name))
                else:  # ``import a.b.c`` binds ``a``
                    head = alias.name.split(".", 1)[0]
                    scope.bind(head, Binding("import", alias, dotted=head))
        elif isinstance(node, ast.ImportFrom):
            base = node.module if not node.level else self._relative(node.level, node.module)
            for alias in node.names:
                if alias.name != "*":
                    dotted = f"{base}.{alias.name}" if base else None
                    scope.bind(alias.asname or alias.name, Binding("import", alias, dotted=dotted))
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                self._bind_target(target, node.value, scope)
        elif isinstance(node, ast.AnnAssign):
            self._bind_target(node.target, node.value, scope)
        elif isinstance(node, ast.NamedExpr) and isinstance(node.target, ast.Name):
            home = scope  # the walrus binds in the scope around its comprehensions
            while isinstance(home.node, _COMPREHENSIONS) and home.parent is not None:
                home = home.parent
            home.bind(node.target.id, Binding("assign", node.target, node.value))
        elif isinstance(node, ast.Global):
            scope.declared_global.update(node.names)
        elif isinstance(node, ast.Nonlocal):
            scope.declared_nonlocal.update(node.names)
        elif isinstance(node, (ast.AugAssign, ast.For, ast.AsyncFor, ast.Delete)):
            targets = node.targets if isinstance(node, ast.Delete) else [node.target]
            for target in targets:
                self._bind_all(target, scope)
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            self._bind_all(node.optional_vars, scope)
        elif (isinstance(node, ast.ExceptHandler) and node.name) or (
            isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name
        ):
            scope.bind(node.name, Binding("other", node))
        elif isinstance(node, ast.MatchMapping) and node.rest:
            scope.bind(node.rest, Binding("other", node))
        return scope

    def _new(self, node: ast.AST, parent: Scope) -> Scope:
        self.scopes[node] = Scope(node, parent)
        return self.scopes[node]

    def _bind_target(self, target: ast.AST, value: ast.expr | None, scope: Scope) -> None:
        if isinstance(target, ast.Name):
            scope.bind(target.id, Binding("assign", target, value))
        elif isinstance(target, (ast.Tuple, ast.List)):
            for element in ast.walk(target):
                if isinstance(element, ast.Name):
                    scope.bind(element.id, Binding("unpack", element))

    def _bind_all(self, target: ast.AST, scope: Scope) -> None:
        for element in ast.walk(target):
            if isinstance(element, ast.Name):
                scope.bind(element.id, Binding("other", element))

    def _relative(self, level: int, module: str | None) -> str | None:
        if self._package is None:
            return None
        parts = self._package.split(".") if self._package else []
        if level - 1 > len(parts):
            return None
        parts = parts[: len(parts) - (level - 1)]
        return ".".join([*parts, *([module] if module else [])]) or None

    # -- lookups -----------------------------------------------------------------------------
    def lookup(self, name: str, scope: Scope) -> tuple[Scope | None, list[Binding]]:
        """The scope whose binding of ``name`` a read in ``scope`` sees, and those bindings."""
        current: Scope | None = scope
        starting = True
        while current is not None:
            if name in current.declared_global:
                module = self.scopes[self.tree]
                return module, module.names.get(name, [])
            visible = starting or not current.is_class
            if visible and name in current.names and name not in current.declared_nonlocal:
                return current, current.names[name]
            starting = False
            current = current.parent
        return None, []

    def bindings(self, node: ast.Name) -> list[Binding]:
        return self.lookup(node.id, self.scope[node])[1]

    def dotted(self, node: ast.AST) -> frozenset[str]:
        """The dotted names a name or attribute chain may stand for (empty when local)."""
        if not isinstance(node, (ast.Name, ast.Attribute)):
            return _NOTHING
        if node in self._dotted:
            return self._dotted[node]
        self._dotted[node] = _NOTHING  # an alias cycle names nothing
        found: frozenset[str]
        if isinstance(node, ast.Attribute):
            found = frozenset(
                self.handed_on.get(f"{base}.{node.attr}", f"{base}.{node.attr}")
                for base in self.dotted(node.value)
            )
        else:
            found = self.dotted_name(node.id, self.scope[node])
        self._dotted[node] = found
        return found

    def dotted_name(self, name: str, scope: Scope) -> frozenset[str]:
        """The dotted names ``name`` may stand for, read in ``scope``."""
        owner, bindings = self.lookup(name, scope)
        if owner is None:
            return frozenset({f"builtins.{name}"}) if name in _BUILTINS else _NOTHING
        names: set[str] = set()
        for binding in bindings:
            if binding.kind == "import" and binding.dotted:
                names.add(self.handed_on.get(binding.dotted, binding.dotted))
            elif binding.kind == "assign" and binding.value is not None:
                names |= self._aliased(binding.value)
        return frozenset(names)

    def _aliased(self, value: ast.expr) -> frozenset[str]:
        """``FSDP = fsdp.FullyShardedDataParallel``; ``wrapper = FSDP if x else DDP``."""
        if isinstance(value, ast.IfExp):
            return self._aliased(value.body) | self._aliased(value.orelse)
        if isinstance(value, ast.BoolOp):
            return frozenset().union(*(self._aliased(v) for v in value.values))
        return self.dotted(value)

    def is_(self, node: ast.AST, *names: str) -> bool:
        return not self.dotted(node).isdisjoint(names)

    # -- structure ---------------------------------------------------------------------------
    def ancestors(self, node: ast.AST) -> list[ast.AST]:
        out = []
        while node in self.parent:
            node = self.parent[node]
            out.append(node)
        return out

    def statement(self, node: ast.AST) -> ast.stmt:
        while not isinstance(node, ast.stmt):
            node = self.parent[node]
        return node

    def function(self, node: ast.AST) -> ast.AST | None:
        """The def or lambda ``node`` runs in (None at module level and in class bodies)."""
        scope: Scope | None = self.scope[node]
        while scope is not None and not isinstance(scope.node, (*FUNCTIONS, ast.Lambda)):
            scope = scope.parent
        return None if scope is None else scope.node


def _inside(node: ast.AST, child: ast.AST) -> bool:
    """Whether ``child`` of the scope node ``node`` runs in ``node``'s own scope (decorators,
    defaults, annotations and bases run outside; a comprehension counts as a whole)."""
    if isinstance(node, (*FUNCTIONS, ast.ClassDef)):
        return child in node.body
    if isinstance(node, ast.Lambda):
        return child is node.body
    return True


def _package_of(module_name: str, is_package: bool) -> str | None:
    """The package relative imports start from (None when the module's name is unknown)."""
    if not module_name:
        return None
    return module_name if is_package else module_name.rpartition(".")[0]


def handed_on(modules: Mapping[str, tuple[ast.Module, bool]]) -> dict[str, str]:
    """The FSDP1 names each module (dotted name -> its tree, is a package) binds by a
    module-level import, as ``module.name`` -> the FSDP1 name, chains followed: what another
    module imports from it is that name."""
    bound: dict[str, str] = {}
    for module, (tree, package) in modules.items():
        scopes = Scopes(tree, module, package)
        for name, bindings in scopes.scopes[tree].names.items():
            for binding in bindings:
                if binding.kind == "import" and binding.dotted:
                    bound[f"{module}.{name}"] = binding.dotted
    out = {}
    for name, target in bound.items():
        seen = {name}
        while target in bound and target not in seen:
            seen.add(target)
            target = bound[target]
        if name.split(".")[0] != "torch" and fsdp1_name(target) is not None:
            out[name] = target
    return out
