"""What each function of the run does with its arguments, followed through the run's calls.

For every module-level function and method of a module-level class (by canonical qualified
name: ``pkg.comm.reduce``, ``pkg.opt.Adapter.step``) and each argument position (a method's
first is the one after ``self``), the effects the code reached from it may have on the value
passed there, or on a value computed from it:

- ``"reduce"``: it goes into a collective of ``torch.distributed`` (``all_reduce``...);
- ``"shape"``: a tensor's shape is read from it (``.ndim``, ``.shape``, ``.dim()``,
  ``.size()``, ``.numel()``: of it, of its ``parameters()``, of its elements);
- ``"storage"``: its storage is read (``untyped_storage()``, ``storage()``, ``data_ptr()``).

A function has an effect on an argument when its own code has it, or when it hands the value
(or one computed from it) to a function of the run whose argument has it: a fixpoint over the
run's calls, through direct calls, calls of ``self``'s methods and of imported names (by the
module the import finds). Calls on objects of no known class are not followed: an effect is
only ever claimed along calls the layer can name.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator, Mapping

from codemods.assumptions import (
    COLLECTIVE_TENSOR_KEYWORDS,
    COLLECTIVES,
    SHAPE_ATTRIBUTES,
    STORAGE_METHODS,
)

#: Per function, per argument position: what may be done to it.
Effects = dict[str, dict[int, frozenset[str]]]
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def find(
    trees: Mapping[str, ast.Module],
    module_names: Mapping[str, str],
    bindings: Mapping[str, Mapping[str, str]],
) -> Effects:
    """The effects of the run's functions (``trees``: each file's; ``module_names``: each
    file's canonical module name; ``bindings``: each file's imported names -> the qualified
    names they stand for). Only functions with an effect are listed."""
    direct: dict[tuple[str, int], set[str]] = defaultdict(set)
    handed: dict[tuple[str, int], set[tuple[str, int]]] = defaultdict(set)
    for path, tree in trees.items():
        module = module_names.get(path, "")
        if not module:
            continue
        for name, function, owner in _functions(tree, module):
            reader = _Reader(function, owner, module, bindings.get(path, {}), tree)
            for position, own, hands in reader.arguments():
                direct[(name, position)] |= own
                handed[(name, position)] |= hands
    out: dict[tuple[str, int], set[str]] = {k: set(v) for k, v in direct.items()}
    changed = True
    while changed:  # a fixpoint: effects flow back along the hand-overs
        changed = False
        for key, targets in handed.items():
            gained = set().union(*(out.get(t, set()) for t in targets)) - out.get(key, set())
            if gained:
                out.setdefault(key, set()).update(gained)
                changed = True
    effects: Effects = {}
    for (name, position), found in out.items():
        if found:
            effects.setdefault(name, {})[position] = frozenset(found)
    return effects


def _functions(
    tree: ast.Module, module: str
) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef, str | None]]:
    """``(qualified name, def, class or None)`` of the module's functions and methods."""
    for statement in tree.body:
        if isinstance(statement, _FUNCTIONS):
            yield f"{module}.{statement.name}", statement, None
        elif isinstance(statement, ast.ClassDef):
            for item in statement.body:
                if isinstance(item, _FUNCTIONS):
                    yield f"{module}.{statement.name}.{item.name}", item, statement.name


class _Reader:
    """One function's own code: what it does with each argument."""

    def __init__(
        self,
        function: ast.FunctionDef | ast.AsyncFunctionDef,
        owner: str | None,
        module: str,
        bindings: Mapping[str, str],
        tree: ast.Module,
    ) -> None:
        self.function = function
        self.owner = owner
        self.module = module
        self.bindings = bindings
        self.local = {s.name for s in tree.body if isinstance(s, (*_FUNCTIONS, ast.ClassDef))}
        self.nodes = list(_own_nodes(function))

    def arguments(self) -> Iterator[tuple[int, set[str], set[tuple[str, int]]]]:
        arguments = [*self.function.args.posonlyargs, *self.function.args.args]
        if self.owner is not None and arguments and not _static(self.function):
            arguments = arguments[1:]  # self, cls
        for position, argument in enumerate(arguments):
            derived = self._derived(argument.arg)
            yield position, self._effects(derived), self._hands(derived)

    def _derived(self, name: str) -> set[str]:
        """The names bound, anywhere in the function, to values computed from ``name``."""
        derived = {name}
        changed = True
        while changed:
            changed = False
            for node in self.nodes:
                sources: list[ast.AST] = []
                targets: list[ast.AST] = []
                if isinstance(node, ast.Assign):
                    sources, targets = [node.value], list(node.targets)
                elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and node.value is not None:
                    sources, targets = [node.value], [node.target]
                elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
                    sources, targets = [node.iter], [node.target]
                elif isinstance(node, ast.NamedExpr):
                    sources, targets = [node.value], [node.target]
                if not any(_mentions(s, derived) for s in sources):
                    continue
                for target in targets:
                    for leaf in ast.walk(target):
                        if isinstance(leaf, ast.Name) and leaf.id not in derived:
                            derived.add(leaf.id)
                            changed = True
        return derived

    def _effects(self, derived: set[str]) -> set[str]:
        found: set[str] = set()
        for node in self.nodes:
            if isinstance(node, ast.Attribute) and _mentions(node.value, derived):
                if node.attr in SHAPE_ATTRIBUTES:
                    found.add("shape")
                elif node.attr in STORAGE_METHODS:
                    found.add("storage")
            elif isinstance(node, ast.Call) and self._callee(node.func) in COLLECTIVES:
                if any(_mentions(a, derived) for a in _tensors(node)):
                    found.add("reduce")
        return found

    def _hands(self, derived: set[str]) -> set[tuple[str, int]]:
        """``(callee, position)`` of the run's functions this one hands the value to."""
        out: set[tuple[str, int]] = set()
        for node in self.nodes:
            if not isinstance(node, ast.Call):
                continue
            callee = self._callee(node.func)
            if not callee:
                continue
            for position, argument in enumerate(node.args):
                if isinstance(argument, ast.Starred):
                    break
                if _mentions(argument, derived):
                    out.add((callee, position))
        return out

    def _callee(self, func: ast.AST) -> str:
        """The qualified name a call's ``func`` names: a function of the file, an imported
        name (and attributes of it: ``dist.all_reduce``), a method of ``self``'s class."""
        parts: list[str] = []
        while isinstance(func, ast.Attribute):
            parts.insert(0, func.attr)
            func = func.value
        if not isinstance(func, ast.Name):
            return ""
        head = func.id
        if head in ("self", "cls") and self.owner is not None and len(parts) == 1:
            return f"{self.module}.{self.owner}.{parts[0]}"
        if head in self.bindings:
            return ".".join([self.bindings[head], *parts])
        if head in self.local and not parts:
            return f"{self.module}.{head}"
        return ""


def _own_nodes(function: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a function's body, not those of functions or classes defined in it."""
    todo: list[ast.AST] = list(getattr(function, "body", []))
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, (*_FUNCTIONS, ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(node))


def _static(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in function.decorator_list)


def _tensors(call: ast.Call) -> list[ast.expr]:
    """The tensor arguments of a collective: its first positional (``all_reduce(tensor, op,
    group)``), its first two for those with an output and an input (``all_gather(out, t)``)."""
    name = call.func.attr if isinstance(call.func, ast.Attribute) else ""
    count = 2 if "gather" in name or "scatter" in name else 1
    return [
        *call.args[:count],
        *(k.value for k in call.keywords if k.arg in COLLECTIVE_TENSOR_KEYWORDS),
    ]


def _mentions(node: ast.AST, names: set[str]) -> bool:
    return any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(node))
