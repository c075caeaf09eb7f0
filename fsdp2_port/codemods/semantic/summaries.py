"""What each function of the run does with its arguments, followed through the run's calls.

For every module-level function and method of a module-level class (by canonical qualified
name: ``pkg.comm.reduce``, ``pkg.opt.Adapter.step``) and each argument position (a method's
first is the one after ``self``), the effects the code reached from it may have on the value
passed there, or on a value computed from it:

- ``"collective"``: it goes into a collective of ``torch.distributed`` (``all_reduce``,
  ``broadcast``, ``all_gather``...);
- ``"shape"``: a tensor's shape is read from it (``.ndim``, ``.shape``, ``.dim()``,
  ``.size()``, ``.numel()``: of it, of its ``parameters()``, of its elements);
- ``"storage"``: its storage is read (``untyped_storage()``, ``storage()``, ``data_ptr()``).
- ``"pretrained"``: its ``save_pretrained`` is called with no ``state_dict`` (Hugging Face's:
  it saves its own ``state_dict()``; ``saves_pretrained``).

A function's return value has the effect ``"new"`` (at ``RETURNED``) when every call of it
builds a new object: each ``return`` gives only calls of classes of the run, or of functions of
the run with that effect, directly, through local names (and their moves, ``.to(...)``), as a
tuple, or through a local name bound only to such classes (``_Reader.builds``).

A function only some ranks may run has the effect ``"gated"`` (at position ``GATED``): one of
the run's functions calls it where a test of the rank lets only some ranks through
(``ranks.gated``), directly or through further calls of the run; the effect holds where, as
``"`<test>` in <caller>"``.

A function's return value has the effect ``"norm"`` (at position ``RETURNED``) when it may be
the norm one of torch's clipping functions returns (``NORM_SOURCES``), directly or through names
and functions of the run that return one.

A function has an effect on an argument when its own code has it, or when it hands the value
(or one computed from it) to a function of the run whose argument has it: a fixpoint over the
run's calls, through direct calls, calls of ``self``'s methods and of imported names (by the
module the import finds). Calls on objects of no known class are not followed: an effect is
only ever claimed along calls the layer can name.

Each file is read on its own (``read``: a worker's part, no tree in what it returns); the
fixpoint runs over what all of them found (``find``).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from fsdp2_port.codemods import fsdp1, syntax
from fsdp2_port.codemods.assumptions import (
    COLLECTIVE_TENSOR_KEYWORDS,
    COLLECTIVES,
    CONTAINER_BUILTINS,
    NORM_SOURCES,
    PARAMETER_ITERATORS,
    RETURNS_SELF,
    SHAPE_ATTRIBUTES,
    STORAGE_METHODS,
)

from ..assumed import either_way
from . import ranks

#: Per function, per argument position: what may be done to it.
Effects = dict[str, dict[int, frozenset[str]]]
#: The position of a function's return value in its ``Effects``.
RETURNED = -1
#: The position of where only some ranks call a function (``"gated"``) in its ``Effects``.
GATED = -2
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def read(tree: ast.Module, module: str, bindings: Mapping[str, str]) -> tuple[Function, ...]:
    """What the functions of one file (``module``: its canonical name; ``bindings``: its
    imported names -> the qualified names they stand for) do with their arguments on their
    own: the part of ``find`` that reads a tree (a worker's, in a run of several)."""
    if not module:
        return ()
    local = _local(tree)
    out = []
    for name, function, owner in _functions(tree, module):
        reader = _Reader(function, owner, module, bindings, local)
        arguments = tuple(
            (p, frozenset(o), frozenset(h)) for p, o, h in reader.arguments() if o or h
        )
        returned = reader.returned() if reader.returns else ()
        called = reader.called() if returned else ()
        gated = frozenset((c, f"`{test}` in {name}") for c, test in reader.gated())
        callees = frozenset(reader.callees)
        if arguments or returned or gated or callees:
            flows = tuple(reader.flows) if called else ()
            builds = reader.builds()
            out.append(Function(name, arguments, returned, called, flows, gated, callees, builds))
    return tuple(out)


def classes(
    tree: ast.Module, module: str, bindings: Mapping[str, str]
) -> tuple[tuple[str, frozenset[str]], ...]:
    """(qualified name, the qualified names of its bases) of the module's classes."""
    local = _local(tree)
    return tuple(
        (f"{module}.{n.name}", frozenset(_qualified(b, module, bindings, local) for b in n.bases))
        for n in tree.body
        if isinstance(n, ast.ClassDef)
    )


def find(
    files: Sequence[Sequence[Function]], run_classes: Mapping[str, frozenset[str]] | None = None
) -> Effects:
    """The effects of the run's functions (``files``: what ``read`` found in each file;
    ``run_classes``: the run's classes -> their bases, ``classes``), followed through the
    hand-overs between them. Only functions with an effect are listed."""
    direct: dict[tuple[str, int], set[str]] = defaultdict(set)
    handed: dict[tuple[str, int], set[tuple[str, int]]] = defaultdict(set)
    returning: dict[str, Function] = {}
    for functions in files:
        for function in functions:
            for position, own, hands in function.arguments:
                direct[(function.name, position)] |= own
                handed[(function.name, position)] |= hands
            if function.returned:
                returning[function.name] = function
    for name in _returning_norms(returning):
        direct[(name, RETURNED)].add("norm")
    for name in _building(files, _plain(run_classes or {})):
        direct[(name, RETURNED)].add("new")
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
    for name, where in _gated(files).items():
        effects.setdefault(name, {})[GATED] = frozenset(where)
    return effects


def _plain(run_classes: Mapping[str, frozenset[str]]) -> set[str]:
    """The run's classes none of whose bases, up the run's classes, is FSDP1's class (an
    instance of one is no FSDP model): any other base (``torch.nn.Module``), or one the layer
    cannot name, is taken for a plain one."""
    fsdp = {
        c
        for c, bases in run_classes.items()
        if any(fsdp1.canonical(b) == "FullyShardedDataParallel" for b in bases)
    }
    changed = True
    while changed:
        changed = False
        for name, bases in run_classes.items():
            if name not in fsdp and not bases.isdisjoint(fsdp):
                fsdp.add(name)
                changed = True
    return set(run_classes) - fsdp


def _local(tree: ast.Module) -> set[str]:
    """The names of the module's own functions and classes."""
    return {n.name for n in tree.body if isinstance(n, (*_FUNCTIONS, ast.ClassDef))}


def _building(files: Sequence[Sequence[Function]], run_classes: set[str]) -> set[str]:
    """The functions every call of which builds a new object (``Function.builds``)."""
    builders = [f for functions in files for f in functions if f.builds]
    found: set[str] = set()
    changed = True
    while changed:
        changed = False
        for function in builders:
            if function.name not in found and all(
                c in run_classes or c in found for c in function.builds
            ):
                found.add(function.name)
                changed = True
    return found


def _gated(files: Sequence[Sequence[Function]]) -> dict[str, set[str]]:
    """The functions only some ranks may run -> where (``Function.gated``), through the
    calls of the run: what such a function calls, only those ranks may run too."""
    where: dict[str, set[str]] = defaultdict(set)
    callees: dict[str, set[str]] = defaultdict(set)
    for functions in files:
        for function in functions:
            callees[function.name] |= function.callees
            for callee, why in function.gated:
                where[callee].add(why)
    todo = list(where)
    while todo:
        name = todo.pop()
        for callee in callees.get(name, ()):
            if not where[name] <= where[callee]:
                where[callee] |= where[name]
                todo.append(callee)
    return where


def _returning_norms(functions: Mapping[str, Function]) -> set[str]:
    """The functions whose return value may be a gradient norm: a fixpoint from torch's
    (``NORM_SOURCES``) through the run's functions that return what they call."""
    found: set[str] = set()
    changed = True
    while changed:
        changed = False
        sources = NORM_SOURCES.members | found
        for name, function in functions.items():
            if name not in found and function.returns_one_of(sources):
                found.add(name)
                changed = True
    return found


#: Names read, names read without calling into them, names bound, of one assignment, loop or
#: walrus (``_names``).
_Flow = tuple[frozenset[str], frozenset[str], frozenset[str]]
#: (the qualified names of the run's functions some values call, the names they read or bind)
_Calls = tuple[tuple[frozenset[str], frozenset[str]], ...]


@dataclass(frozen=True)
class Function:
    """One function as ``read`` found it, with no tree: small enough to come back from a
    worker."""

    name: str
    #: (argument position, the effects its own code has on it, the (callee, position) of the
    #: run's functions it hands the value to), for the positions with any.
    arguments: tuple[tuple[int, frozenset[str], frozenset[tuple[str, int]]], ...]
    #: (callees of a returned value, the names it reads), each ``return``.
    returned: _Calls = ()
    #: (callees of an assignment's values, the names it binds), for those that call; only
    #: with ``returned``.
    called: _Calls = ()
    #: Its flows between names (``_Reader.flows``); only with ``called``.
    flows: tuple[_Flow, ...] = ()
    #: (a function of the run it calls where only some ranks get, ``"`<test>` in <name>"``).
    gated: frozenset[tuple[str, str]] = frozenset()
    #: The functions of the run it calls.
    callees: frozenset[str] = frozenset()
    #: What each of its ``return``s calls, when every one returns a call (else empty).
    builds: frozenset[str] = frozenset()

    def returns_one_of(self, functions: frozenset[str] | set[str]) -> bool:
        """Whether a value the function returns may be what one of ``functions`` returned
        (through its names: ``norm = clip(...)``, ``return norm.detach()``)."""
        seeds = {n for callees, bound in self.called if callees & functions for n in bound}
        derived = _derived(self.flows, seeds, structural=False) if seeds else set()
        return any(callees & functions or names & derived for callees, names in self.returned)


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
    """One function's own code, read once: the flows between its names, what it does to
    which names, and which names it hands to which of the run's functions."""

    def __init__(
        self,
        function: ast.FunctionDef | ast.AsyncFunctionDef,
        owner: str | None,
        module: str,
        bindings: Mapping[str, str],
        local: set[str],
    ) -> None:
        self.function = function
        self.owner = owner
        self.module = module
        self.bindings = bindings
        #: The names the module's own functions and classes have.
        self.local = local
        #: (names read, names read without calling into them, names bound) of each
        #: assignment, loop and walrus (``_names``).
        self.flows: list[_Flow] = []
        #: (effect, names its subject reads).
        self.uses: list[tuple[str, frozenset[str]]] = []
        #: (callee, position, names the argument reads).
        self.calls: list[tuple[str, int, frozenset[str]]] = []
        #: (an assignment's values, names it binds).
        self.assigned: list[tuple[Sequence[ast.AST], frozenset[str]]] = []
        #: (a returned value, names it reads).
        self.returns: list[tuple[ast.AST, frozenset[str]]] = []
        #: The qualified names its calls name (``_callee``).
        self.callees: set[str] = set()
        for node in _own_nodes(function):
            self._read(node)

    def _read(self, node: ast.AST) -> None:
        if isinstance(node, ast.Return) and node.value is not None:
            self.returns.append((node.value, _names(node.value)))
        if isinstance(node, ast.Assign):
            self._flow([node.value], node.targets)
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and node.value is not None:
            self._flow([node.value], [node.target])
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            self._flow([node.iter], [node.target])
        elif isinstance(node, ast.NamedExpr):
            self._flow([node.value], [node.target])
        elif isinstance(node, ast.Attribute):
            if either_way(SHAPE_ATTRIBUTES, node.attr):
                self.uses.append(("shape", _names(node.value, structural=True)))
            elif node.attr in STORAGE_METHODS:
                self.uses.append(("storage", _names(node.value, structural=True)))
        elif isinstance(node, ast.Call):
            if saves_pretrained(node):
                assert isinstance(node.func, ast.Attribute)
                self.uses.append(("pretrained", _names(node.func.value, structural=True)))
            callee = self._callee(node.func)
            if callee:
                self.callees.add(callee)
            if callee in COLLECTIVES:
                self.uses += [("collective", _names(a)) for a in _tensors(node)]
            elif callee:
                for position, argument in enumerate(node.args):
                    if isinstance(argument, ast.Starred):
                        break
                    self.calls.append((callee, position, _names(argument)))

    def _flow(self, sources: Sequence[ast.AST], targets: Sequence[ast.AST]) -> None:
        read = frozenset().union(*(_names(s) for s in sources))
        structural = frozenset().union(*(_names(s, structural=True) for s in sources))
        bound = frozenset().union(*(_names(t) for t in targets))
        if read and bound:
            self.flows.append((read, structural, bound))
        if bound:
            self.assigned.append((sources, bound))

    def _callees(self, exprs: Sequence[ast.AST]) -> frozenset[str]:
        """The qualified names of the calls in ``exprs`` that ``_callee`` names."""
        found = {
            self._callee(n.func) for e in exprs for n in ast.walk(e) if isinstance(n, ast.Call)
        }
        return frozenset(found - {""})

    def called(self) -> _Calls:
        """(callees of an assignment's values, names it binds), for those that call."""
        found = [(self._callees(values), bound) for values, bound in self.assigned]
        return tuple((callees, bound) for callees, bound in found if callees)

    def gated(self) -> Iterator[tuple[str, str]]:
        """(a call's qualified name, the rank test, as written, that gates it)."""
        for block, test in ranks.gated(self.function.body):
            written = ast.unparse(test)
            for statement in block:
                for node in _own_nodes(statement, itself=True):
                    if isinstance(node, ast.Call) and (callee := self._callee(node.func)):
                        yield callee, written

    def builds(self) -> frozenset[str]:
        """The callees whose new objects its ``return``s give, when each gives only such
        objects (``_built_by``), else nothing."""
        found: set[str] = set()
        for value, _ in self.returns:
            built = self._built_by(value, set())
            if not built:
                return frozenset()
            found |= built
        return frozenset(found)

    def _built_by(self, value: ast.AST, seen: set[str]) -> set[str]:
        """The callees whose new objects ``value`` may only be (empty: it may be anything
        else): a call of a name ``_callee`` names (``Model(config)``) or of a local name bound
        only to such names (``cls = A if big else B``; ``cls(**kw)``); a local name every
        assignment of which is one, or that object moved (``model = model.to(device)``); a
        tuple of them (``return model, tokenizer``)."""
        if isinstance(value, ast.Tuple):
            parts = [self._built_by(e, seen) for e in value.elts]
            return set().union(*parts) if parts and all(parts) else set()
        if isinstance(value, ast.Name):
            return self._name_built_by(value.id, seen)
        if not isinstance(value, ast.Call):
            return set()
        callee = self._callee(value.func)
        if callee:
            return {callee}
        if isinstance(value.func, ast.Name):
            return self._names_of(value.func.id)
        return set()

    def _name_built_by(self, name: str, seen: set[str]) -> set[str]:
        if name in seen:
            return set()
        seen.add(name)
        sources = self._sources(name)
        if not sources or name in self._parameters():
            return set()
        found: set[str] = set()
        for source in sources:
            if _moves(source, name):
                continue
            built = self._built_by(source, seen)
            if not built:
                return set()
            found |= built
        return found

    def _names_of(self, name: str) -> set[str]:
        """The functions and classes a local name is bound to by each of its assignments
        (``cls = T5Encoder``, ``cls = A if big else B``); empty when one binds anything else."""
        if name in self._parameters():
            return set()
        found: set[str] = set()
        for source in self._sources(name):
            choices = [source.body, source.orelse] if isinstance(source, ast.IfExp) else [source]
            named = {self._callee(c) for c in choices}
            if "" in named:
                return set()
            found |= named
        return found

    def _sources(self, name: str) -> list[ast.AST]:
        """The values the function's assignments (loops, walruses) bind ``name`` from."""
        return [v for values, bound in self.assigned if name in bound for v in values]

    def _parameters(self) -> set[str]:
        arguments = self.function.args
        every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
        every += [a for a in (arguments.vararg, arguments.kwarg) if a is not None]
        return {a.arg for a in every}

    def returned(self) -> _Calls:
        return tuple((self._callees([value]), names) for value, names in self.returns)

    def arguments(self) -> Iterator[tuple[int, set[str], set[tuple[str, int]]]]:
        arguments = [*self.function.args.posonlyargs, *self.function.args.args]
        if self.owner is not None and arguments and not _static(self.function):
            arguments = arguments[1:]  # self, cls
        if not (self.uses or self.calls):
            return
        for position, argument in enumerate(arguments):
            computed = _derived(self.flows, {argument.arg}, structural=False)
            parts = _derived(self.flows, {argument.arg}, structural=True)
            effects = {
                kind
                for kind, names in self.uses
                if not names.isdisjoint(computed if kind == "collective" else parts)
            }
            hands = {(c, p) for c, p, names in self.calls if not names.isdisjoint(computed)}
            yield position, effects, hands

    def _callee(self, func: ast.AST) -> str:
        """The qualified name a call's ``func`` names: a function of the file, an imported
        name (and attributes of it: ``dist.all_reduce``), a method of ``self``'s class."""
        if (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id in ("self", "cls")
            and self.owner is not None
        ):
            return f"{self.module}.{self.owner}.{func.attr}"
        return _qualified(func, self.module, self.bindings, self.local)


def _moves(value: ast.AST, name: str) -> bool:
    """``name.to(...)``, ``name.cuda()``...: the object ``name`` holds, moved or set up (or a
    new one the method makes from it)."""
    method = syntax.method_on(value, name)
    return method is not None and either_way(RETURNS_SELF, method)


def _qualified(node: ast.AST, module: str, bindings: Mapping[str, str], local: set[str]) -> str:
    """The qualified name a chain of names spells: an imported name (and attributes of it:
    ``dist.all_reduce``), a function or class of the module; else ""."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.insert(0, node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return ""
    if node.id in bindings:
        return ".".join([bindings[node.id], *parts])
    if node.id in local and not parts:
        return f"{module}.{node.id}"
    return ""


def saves_pretrained(call: ast.Call) -> bool:
    """``m.save_pretrained(...)`` with no ``state_dict=``: it saves ``m.state_dict()``."""
    return (
        isinstance(call.func, ast.Attribute)
        and call.func.attr == "save_pretrained"
        and not any(k.arg == "state_dict" for k in call.keywords)
    )


def _derived(flows: Sequence[_Flow], names: set[str], structural: bool) -> set[str]:
    """The names bound, anywhere in a function (``flows``: its ``_Reader.flows``), to values
    computed from ``names`` (``structural``: only to their parts: parameters, elements,
    attributes, not what calling them computes)."""
    derived = set(names)
    changed = True
    while changed:
        changed = False
        for read, parts, bound in flows:
            source = parts if structural else read
            if not bound <= derived and not source.isdisjoint(derived):
                derived |= bound
                changed = True
    return derived


def _own_nodes(function: ast.AST, itself: bool = False) -> Iterator[ast.AST]:
    """The nodes of a function's body (``itself``: of a statement, with it), not those of
    functions or classes defined in it."""
    todo: list[ast.AST] = [function] if itself else list(getattr(function, "body", []))
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


def _names(node: ast.AST, structural: bool = False) -> frozenset[str]:
    """The names an expression reads (or a target binds), never one it only calls
    (``model(x)``: ``x``); ``structural``: only those it reads parts of (attributes, elements,
    ``m.parameters()``, containers of them), not what a call computes (``model.encode(x)``,
    ``f(x)``)."""
    found: set[str] = set()
    todo: list[ast.AST] = [node]
    while todo:
        current = todo.pop()
        if isinstance(current, ast.Name):
            found.add(current.id)
            continue
        if isinstance(current, ast.Call):
            func = current.func
            if not structural or (isinstance(func, ast.Name) and func.id in CONTAINER_BUILTINS):
                todo += [*current.args, *(k.value for k in current.keywords)]
            if isinstance(func, ast.Attribute) and (
                not structural or either_way(PARAMETER_ITERATORS, func.attr)
            ):
                todo.append(func.value)  # a method's receiver, not a callee's name
            continue
        todo.extend(ast.iter_child_nodes(current))
    return frozenset(found)
