"""A second reading of migrated code: what it still holds of FSDP1, and whether any model is
half-migrated. It reads only the output text, with its own resolver over plain ``ast``
(``codemods.audit_names``): nothing of the codemod's analysis, ties, plan or rules, so that a
bug there does not hide here too.

- ``constructors``: FSDP1 constructor calls left (``FullyShardedDataParallel(...)`` and
  ``partial(FSDP, ...)``); ``wrapper_classes``: FSDP1 subclasses and ``wrapper_cls=FSDP``;
- half-migrated: an FSDP2 policy object handed to an FSDP1 constructor (written there or bound
  to a name passed there); an FSDP2-only API (``set_requires_gradient_sync``, ``fully_shard``,
  ``fully_shard_like_fsdp1``, an ``FSDPModule`` test, ``fsdp2_port.clip_grad_norm_``,
  ``fsdp2_port.BF16Optimizer``) on a model an FSDP1 constructor (or a subclass of FSDP1
  defined in the file) builds;
- unmarked: an FSDP1 name (configuration values aside), or an FSDP1-only call (``no_sync``,
  ``clip_grad_norm_``, ``summon_full_params``, ``check_is_root``) or attribute (``_handle``,
  ``_flat_param``, ...) on a model FSDP2 builds, in a statement without a marker;
- ``untied_fsdp2``: FSDP2-only APIs on models of unknown origin (half-migrated when FSDP1
  constructors remain in the same run; see ``run_problems``).

Models are followed within the file: names bound to a value (``model = FSDP(m)``, chains of
them, tuple unpacking), attributes (``self.model`` across a class and the classes it derives
from or that derive from it here; ``state.model`` where ``state`` is bound), functions and
methods of the file that return a model, parameters the file's own calls pass a model to,
``partial`` factories, conditional expressions, ``or``/``and``, walrus, module methods that
return the module (``.to()``, ``.cuda()``...), and ``fully_shard(model)`` made in place. A
binding is not taken for a read it cannot reach (a later statement outside a loop, the other
branch of an ``if``).
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from codemods import audit_names as n
from codemods.markers import PREFIX as _MARKER
from codemods.markers import ignored_lines

_FSDP1, _FSDP2 = "FSDP1", "FSDP2"
#: Module methods that return the module they are called on.
_RETURNS_SELF = frozenset({"to", "cuda", "cpu", "train", "eval", "requires_grad_", "to_empty"})
#: FSDP1-only methods and attributes: wrong on a model FSDP2 builds.
_FSDP1_METHODS = frozenset({"no_sync", "clip_grad_norm_", "summon_full_params", "check_is_root"})
_FSDP1_ATTRIBUTES = frozenset({"_fsdp_wrapped_module", "_flat_param", "_handle", "_all_handles"})
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


@dataclass
class Audit:
    constructors: int = 0
    wrapper_classes: int = 0
    half_migrated: list[str] = field(default_factory=list)
    unmarked: list[str] = field(default_factory=list)
    #: FSDP1 type tests and annotations left unmarked: right while every model of the run
    #: stays FSDP1 (``unmarked`` of the run counts them only when a model migrated).
    unmarked_type_tests: list[str] = field(default_factory=list)
    untied_fsdp2: list[str] = field(default_factory=list)


def audit(
    path: str,
    text: str,
    module_name: str = "",
    is_package: bool = False,
    handed_on: Mapping[str, str] | None = None,
) -> Audit:
    """Audit one file's text (raises ``SyntaxError`` when it does not parse); ``handed_on``:
    the FSDP1 names other modules of the run import (``audit_names.handed_on``)."""
    tree = ast.parse(text, filename=path)
    # Every verdict needs a name imported from a module path with ``fsdp`` in it (torch's
    # FSDP1 and FSDP2, ``fsdp2_port``) or from a module of the run that imported one, except
    # ``set_requires_gradient_sync`` on anything.
    if (
        "fsdp" not in text
        and "fsdp" not in module_name
        and "set_requires_gradient_sync" not in text
        and not any(name.rpartition(".")[2] in text for name in handed_on or {})
    ):
        return Audit()
    return _Reader(path, text, n.Scopes(tree, module_name, is_package, handed_on)).report()


def run_unmarked(before: Mapping[str, Audit], after: Mapping[str, Audit]) -> list[str]:
    """FSDP1 uses left without a marker in a run; its type tests only if a model migrated."""
    out = [p for audit in after.values() for p in audit.unmarked]
    migrated = sum(x.constructors for x in before.values()) > sum(
        x.constructors for x in after.values()
    )
    if migrated:
        out += [p for audit in after.values() for p in audit.unmarked_type_tests]
    return out


def run_problems(
    before: Mapping[str, Audit],
    after: Mapping[str, Audit],
    programs: frozenset[str] = frozenset(),
) -> list[str]:
    """Half-migrations of a whole run: per file (those the input already had aside: a test
    that builds an FSDP1 model and an FSDP2 one under the same name), plus FSDP2 APIs newly
    used on models of unknown origin while FSDP1 constructors remain where they may come from:
    anywhere in the run, or, in one of ``programs`` (scripts no file imports), in it or in a
    file that is none of them."""
    problems = []
    for path, audit in after.items():
        had = Counter(_what(p) for p in before[path].half_migrated) if path in before else {}
        new = Counter(_what(p) for p in audit.half_migrated) - Counter(had)
        problems += [p for p in audit.half_migrated if new[_what(p)] > 0]

    def left(paths: Iterable[str]) -> int:
        return sum(after[p].constructors + after[p].wrapper_classes for p in paths)

    shared = left(p for p in after if p not in programs)
    added = sum(len(x.untied_fsdp2) for x in after.values()) - sum(
        len(x.untied_fsdp2) for x in before.values()
    )
    if added > 0:
        problems += [
            f"{where}: an FSDP2 API on a model of unknown origin while FSDP1 constructors remain"
            for path, x in after.items()
            if (shared + left([path]) if path in programs else left(after))
            for where in x.untied_fsdp2
        ]
    return problems


def _what(problem: str) -> str:
    """A problem without its ``path:line:`` (lines move when a file is rewritten)."""
    return problem.split(": ", 1)[-1]


# -- models ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Build:
    """A call that builds a model of ``kind``; with ``factory``, a ``partial`` whose calls do."""

    call: ast.Call
    kind: str
    factory: bool = False


_Refs = frozenset[_Build]
_EMPTY: _Refs = frozenset()
#: Where a value is stored: an expression, or element ``index`` of ``size`` unpacked from one.
_Source = tuple[ast.expr, int, int]
_WHOLE = -1


class _Models:
    """Which builds the model an expression holds may come from, within one file."""

    def __init__(self, s: n.Scopes) -> None:
        self.s = s
        self.bases: dict[ast.ClassDef, list[ast.ClassDef]] = {}
        self.builds: dict[ast.Call, _Build] = {}
        #: FSDP1 constructor calls proper (not calls of a subclass defined here).
        self.constructors: list[ast.Call] = []
        self.stored: dict[tuple[object, ...], list[_Source]] = {}
        self.returns: dict[ast.AST, list[ast.expr]] = {}
        self.calls_by_name: dict[str, list[ast.Call]] = {}
        self.calls_by_attribute: dict[str, list[ast.Call]] = {}
        self._memo: dict[ast.AST, _Refs] = {}
        self._families: dict[ast.ClassDef, set[ast.ClassDef]] = {}
        for node in s.nodes:
            if isinstance(node, ast.ClassDef):
                self.bases[node] = [c for b in node.bases if (c := self.local_class(b))]
        fsdp1_classes = {c for c in self.bases if self._derives_from_fsdp1(c, set())}
        for node in s.nodes:
            if isinstance(node, ast.Call):
                self._index_call(node, fsdp1_classes)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    self._index_store(target, node.value)
            elif isinstance(node, ast.Return) and node.value is not None:
                function = s.function(node)
                if function is not None:
                    self.returns.setdefault(function, []).append(node.value)
        #: ``fully_shard(model)`` turns ``model`` itself into an FSDP2 module: a later read of
        #: the same name (or attribute) in the same scope holds that model too.
        self.in_place: dict[tuple[object, ...], list[tuple[ast.AST, _Build]]] = {}
        for call in s.nodes:
            if isinstance(call, ast.Call) and call.args:
                build = self.builds.get(call)
                built = {build} if build is not None and not build.factory else set()
                built |= {_Build(f.call, f.kind) for f in self._factories(call.func, set())}
                for build in built:
                    if build.kind == _FSDP2:
                        for key in self.keys(call.args[0]):
                            self.in_place.setdefault(key, []).append((call.args[0], build))

    # -- indexes -----------------------------------------------------------------------------------
    def is_fsdp1_class(self, node: ast.AST) -> bool:
        return n.first_fsdp1(self.s.dotted(node)) == n.FSDP1_CLASS

    def is_fsdp2_builder(self, node: ast.AST) -> bool:
        dotted = self.s.dotted(node)
        return n.first_fsdp2(dotted) == "fully_shard" or not dotted.isdisjoint(n.BRIDGE)

    def _derives_from_fsdp1(self, cls: ast.ClassDef, seen: set[ast.ClassDef]) -> bool:
        seen.add(cls)
        return any(self.is_fsdp1_class(b) for b in cls.bases) or any(
            self._derives_from_fsdp1(b, seen) for b in self.bases[cls] if b not in seen
        )

    def _index_call(self, call: ast.Call, fsdp1_classes: set[ast.ClassDef]) -> None:
        func = call.func
        if self.is_fsdp1_class(func):
            self.builds[call] = _Build(call, _FSDP1)
            self.constructors.append(call)
        elif self.is_fsdp2_builder(func):
            self.builds[call] = _Build(call, _FSDP2)
        elif call.args and self.s.is_(func, n.PARTIAL):
            if self.is_fsdp1_class(call.args[0]):
                self.builds[call] = _Build(call, _FSDP1, factory=True)
                self.constructors.append(call)
            elif self.is_fsdp2_builder(call.args[0]):
                self.builds[call] = _Build(call, _FSDP2, factory=True)
        elif self.local_class(func) in fsdp1_classes:
            self.builds[call] = _Build(call, _FSDP1)
        bare = _unsubscripted(func)
        if isinstance(bare, ast.Name):
            self.calls_by_name.setdefault(bare.id, []).append(call)
        elif isinstance(bare, ast.Attribute):
            self.calls_by_attribute.setdefault(bare.attr, []).append(call)

    def _index_store(self, target: ast.AST, value: ast.expr) -> None:
        if isinstance(target, ast.Attribute):
            key = self.key(target)
            if key is not None:
                self.stored.setdefault(key, []).append((value, _WHOLE, 0))
        elif isinstance(target, (ast.Tuple, ast.List)) and not _starred(target):
            for index, element in enumerate(target.elts):
                key = self.key(element) if isinstance(element, ast.Attribute) else None
                if key is not None:
                    self.stored.setdefault(key, []).append((value, index, len(target.elts)))

    def local_class(self, node: ast.AST) -> ast.ClassDef | None:
        node = _unsubscripted(node)
        if isinstance(node, ast.Name):
            for binding in self.s.bindings(node):
                if binding.kind == "class" and isinstance(binding.node, ast.ClassDef):
                    return binding.node
        return None

    def family(self, cls: ast.ClassDef) -> set[ast.ClassDef]:
        """``cls``, the classes it derives from and those deriving from it, in this file: the
        classes whose methods may run on one of its instances."""
        if cls not in self._families:
            self._families[cls] = self._family(cls)
        return self._families[cls]

    def _family(self, cls: ast.ClassDef) -> set[ast.ClassDef]:
        up, down = {cls}, {cls}
        stack = [cls]
        while stack:
            for base in self.bases.get(stack.pop(), []):
                if base not in up:
                    up.add(base)
                    stack.append(base)
        changed = True
        while changed:
            more = {c for c, bases in self.bases.items() if c not in down and down & set(bases)}
            down |= more
            changed = bool(more)
        return up | down

    # -- self --------------------------------------------------------------------------------------
    def method_class(self, function: ast.AST) -> ast.ClassDef | None:
        """The class of a method that takes its instance (or class) first."""
        if not isinstance(function, n.FUNCTIONS) or not _positional(function):
            return None
        owner = self.s.scope[function].node
        if not isinstance(owner, ast.ClassDef):
            return None
        if any(self.s.is_(d, "builtins.staticmethod") for d in function.decorator_list):
            return None
        return owner

    def self_class(self, node: ast.AST) -> ast.ClassDef | None:
        """The class when ``node`` is a method's first parameter (``self`` by any name)."""
        if not isinstance(node, ast.Name):
            return None
        for binding in self.s.bindings(node):
            if binding.kind != "param":
                continue
            arguments = self.s.parent.get(binding.node)
            function = self.s.parent.get(arguments) if arguments is not None else None
            if function is None:
                continue
            cls = self.method_class(function)
            if cls is not None and _positional(function)[0] == node.id:
                return cls
        return None

    def key(self, node: ast.AST) -> tuple[object, ...] | None:
        """Where a name or attribute chain keeps its value: ``("self", class, *path)`` for the
        instance's attributes, ``("name", scope, name, *path)`` for the rest."""
        path: list[str] = []
        head = node
        while isinstance(head, ast.Attribute):
            path.append(head.attr)
            head = head.value
        if not isinstance(head, ast.Name):
            return None
        cls = self.self_class(head) if path else None
        if cls is not None:
            return ("self", cls, *reversed(path))
        owner = self.s.lookup(head.id, self.s.scope[head])[0]
        return ("name", owner.node if owner else self.s.tree, head.id, *reversed(path))

    def keys(self, node: ast.AST) -> list[tuple[object, ...]]:
        """The key of ``node`` and, for the instance's attributes, that of its relatives."""
        key = self.key(node)
        if key is None:
            return []
        if key[0] == "self":
            assert isinstance(key[1], ast.ClassDef)
            return [("self", cls, *key[2:]) for cls in self.family(key[1])]
        return [key]

    # -- values ------------------------------------------------------------------------------------
    def models(self, expr: ast.AST) -> _Refs:
        """The builds whose models ``expr`` may hold (factories left out)."""
        return frozenset(b for b in self.value(expr) if not b.factory)

    def value(self, expr: ast.AST) -> _Refs:
        if expr in self._memo:
            return self._memo[expr]
        self._memo[expr] = _EMPTY  # a cycle adds nothing
        found = frozenset(self._compute(expr))
        self._memo[expr] = found
        return found

    def _compute(self, expr: ast.AST) -> Iterable[_Build]:
        if isinstance(expr, ast.Call):
            return self._call(expr)
        if isinstance(expr, ast.Name):
            out = set(self._built_in_place(expr))
            for binding in self.s.bindings(expr):
                if binding.kind not in ("assign", "unpack", "param"):
                    continue
                if not self.reaches(binding.node, expr):
                    continue
                if binding.kind == "assign" and binding.value is not None:
                    out |= self.value(binding.value)
                elif binding.kind == "unpack":
                    out |= self._unpacked(binding.node)
                elif binding.kind == "param":
                    out |= self._passed(binding.node)
            return out
        if isinstance(expr, ast.Attribute):
            out = set(self._built_in_place(expr))
            for key in self.keys(expr):
                for source in self.stored.get(key, ()):
                    out |= self._source(source)
            return out
        if isinstance(expr, ast.IfExp):
            return self.value(expr.body) | self.value(expr.orelse)
        if isinstance(expr, ast.BoolOp):
            return {b for v in expr.values for b in self.value(v)}
        if isinstance(expr, (ast.NamedExpr, ast.Await)):
            return self.value(expr.value)
        return ()

    def _source(self, source: _Source) -> _Refs:
        expr, index, size = source
        return self.value(expr) if index == _WHOLE else self._element(expr, index, size, set())

    def _call(self, call: ast.Call) -> set[_Build]:
        if call in self.builds:
            return {self.builds[call]}
        made = {_Build(b.call, b.kind) for b in self.value(call.func) if b.factory}
        if made:
            return made
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr in _RETURNS_SELF:
            return set(self.value(func.value))
        return {
            b for f in self._callees(call) for r in self.returns.get(f, ()) for b in self.value(r)
        }

    def _callees(self, call: ast.Call) -> list[ast.AST]:
        """The functions and methods of this file a call runs (``f()``, ``self.f()``)."""
        func = _unsubscripted(call.func)
        if isinstance(func, ast.Name):
            return [b.node for b in self.s.bindings(func) if b.kind == "def"]
        if isinstance(func, ast.Attribute):
            cls = self.self_class(func.value)
            if cls is not None:
                return [
                    item
                    for c in self.family(cls)
                    for item in c.body
                    if isinstance(item, n.FUNCTIONS) and item.name == func.attr
                ]
        return []

    def _unpacked(self, target: ast.AST) -> _Refs:
        """``a, b = value``: the element of ``value`` that ``target`` takes."""
        tuple_ = self.s.parent.get(target)
        statement = self.s.parent.get(tuple_) if tuple_ is not None else None
        if not (
            isinstance(tuple_, (ast.Tuple, ast.List))
            and isinstance(statement, ast.Assign)
            and tuple_ in statement.targets
            and not _starred(tuple_)
        ):
            return _EMPTY
        index = next(i for i, e in enumerate(tuple_.elts) if e is target)
        return self._element(statement.value, index, len(tuple_.elts), set())

    def _element(self, expr: ast.AST, index: int, size: int, seen: set[ast.AST]) -> _Refs:
        """What element ``index`` of a ``size``-tuple that ``expr`` evaluates to may hold."""
        if expr in seen:
            return _EMPTY
        seen.add(expr)
        if isinstance(expr, (ast.Tuple, ast.List)):
            if len(expr.elts) == size and not _starred(expr):
                return self.value(expr.elts[index])
            return _EMPTY
        values: list[ast.AST] = []
        if isinstance(expr, ast.Call):
            values = [r for f in self._callees(expr) for r in self.returns.get(f, ())]
        elif isinstance(expr, ast.Name):
            values = [
                b.value
                for b in self.s.bindings(expr)
                if b.kind == "assign" and b.value is not None and self.reaches(b.node, expr)
            ]
        elif isinstance(expr, ast.IfExp):
            values = [expr.body, expr.orelse]
        return frozenset(b for v in values for b in self._element(v, index, size, seen))

    def _passed(self, parameter: ast.AST) -> _Refs:
        """What the calls of this file pass for a parameter."""
        arguments = self.s.parent.get(parameter)
        function = self.s.parent.get(arguments) if arguments is not None else None
        if not isinstance(function, n.FUNCTIONS) or not isinstance(parameter, ast.arg):
            return _EMPTY
        positional = _positional(function)
        cls = self.method_class(function)
        offset = 1 if cls is not None else 0
        if cls is not None and positional[0] == parameter.arg:
            return _EMPTY  # the instance itself
        out: set[_Build] = set()
        for call in self._callers(function, cls):
            for index, argument in enumerate(call.args):
                if isinstance(argument, ast.Starred):
                    break
                if index + offset < len(positional) and positional[index + offset] == parameter.arg:
                    out |= self.value(argument)
            for keyword in call.keywords:
                if keyword.arg == parameter.arg:
                    out |= self.value(keyword.value)
        return frozenset(out)

    def _callers(
        self, function: ast.FunctionDef | ast.AsyncFunctionDef, cls: ast.ClassDef | None
    ) -> Iterator[ast.Call]:
        """Calls of ``function`` here: ``f(...)``; ``self.f(...)`` in its class's family; the
        class itself (``Trainer(model)``, ``Trainer[T](model)``) for ``__init__``."""
        if cls is None:
            for call in self.calls_by_name.get(function.name, []):
                func = _unsubscripted(call.func)
                assert isinstance(func, ast.Name)
                if any(b.node is function for b in self.s.bindings(func)):
                    yield call
            return
        family = self.family(cls)
        for call in self.calls_by_attribute.get(function.name, []):
            func = _unsubscripted(call.func)
            assert isinstance(func, ast.Attribute)
            if self.self_class(func.value) in family:
                yield call
        if function.name == "__init__":
            for call in self.calls_by_name.get(cls.name, []):
                if self.local_class(call.func) is cls:
                    yield call

    def _built_in_place(self, node: ast.AST) -> set[_Build]:
        return {
            build
            for key in self.keys(node)
            for argument, build in self.in_place.get(key, ())
            if argument is not node and self.reaches(argument, node, loops=False)
        }

    def _factories(self, expr: ast.AST, seen: set[ast.AST]) -> set[_Build]:
        """The ``partial`` factories ``expr`` may hold (names and attributes only, for the
        in-place index built before any model is followed)."""
        if expr in seen:
            return set()
        seen.add(expr)
        build = self.builds.get(expr) if isinstance(expr, ast.Call) else None
        if build is not None:
            return {build} if build.factory else set()
        values: list[ast.AST] = []
        if isinstance(expr, ast.Name):
            values = [
                b.value
                for b in self.s.bindings(expr)
                if b.kind == "assign" and b.value is not None and self.reaches(b.node, expr)
            ]
        elif isinstance(expr, ast.Attribute):
            values = [
                v for key in self.keys(expr) for v, i, _ in self.stored.get(key, ()) if i == _WHOLE
            ]
        elif isinstance(expr, ast.IfExp):
            values = [expr.body, expr.orelse]
        elif isinstance(expr, ast.BoolOp):
            values = list(expr.values)
        return {f for v in values for f in self._factories(v, seen)}

    def reaches(self, target: ast.AST, use: ast.AST, loops: bool = True) -> bool:
        """Whether the binding at ``target`` can be what ``use`` reads, by position alone: not
        in the other branch of an ``if`` around both, not later (nor in the statement that
        reads it: ``x = f(x)``) unless a loop holds both that does not rebind the name (and
        ``loops``: a loop moves on to another object, so an in-place build does not come back
        round). Other functions' bindings may."""
        s = self.s
        if s.function(target) is not s.function(use):
            return True
        target_path = [target, *s.ancestors(target)]
        use_path = [use, *s.ancestors(use)]
        on_use_path = {id(node): depth for depth, node in enumerate(use_path)}
        for depth, node in enumerate(target_path):
            if id(node) not in on_use_path:
                continue
            if depth and isinstance(node, (ast.If, ast.IfExp)):
                mine = _branch(node, target_path[depth - 1])
                theirs = _branch(node, use_path[on_use_path[id(node)] - 1])
                if mine and theirs and mine != theirs:
                    return False
            break
        statement = next(
            (x for x in target_path if isinstance(x, (ast.Assign, ast.AnnAssign, ast.AugAssign))),
            None,
        )
        reads_itself = statement is not None and id(statement) in on_use_path
        if not reads_itself and _position(target) <= _position(use):
            return True
        name = target.id if isinstance(target, ast.Name) else None
        return loops and any(
            isinstance(x, _LOOPS) and id(x) in on_use_path and not _rebinds(x, name)
            for x in target_path
        )


# -- the reading -----------------------------------------------------------------------------------


class _Reader:
    def __init__(self, path: str, text: str, s: n.Scopes) -> None:
        self.path = path
        self.s = s
        self.models = _Models(s)
        self.lines = _LINE_BREAK.split(text)
        self.ignored = ignored_lines(text)

    def report(self) -> Audit:
        s, models = self.s, self.models
        report = Audit(constructors=len(models.constructors))
        for node in s.nodes:
            if isinstance(node, ast.ClassDef):
                report.wrapper_classes += sum(models.is_fsdp1_class(b) for b in node.bases)
            elif isinstance(node, ast.keyword) and node.arg == "wrapper_cls":
                report.wrapper_classes += models.is_fsdp1_class(node.value)
        for call in models.constructors:
            report.half_migrated += [
                f"{self.path}:{call.lineno}: an FSDP2 policy reaches an FSDP1 constructor"
                for node in ast.walk(call)
                if self._is_fsdp2_policy(node)
            ]
        for node in s.nodes:
            if isinstance(node, ast.Call):
                self._model_call(node, report)
            elif isinstance(node, ast.Attribute) and node.attr in _FSDP1_ATTRIBUTES:
                self._fsdp1_use(node, node.value, f".{node.attr}", report)
        for node in s.nodes:
            if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                continue
            if isinstance(node, (ast.Name, ast.Attribute)):
                self._fsdp1_name(node, report)
        for annotation, constant in self._string_annotations():
            self._quoted_fsdp1_name(annotation, constant, report)
        return report

    def _is_fsdp2_policy(self, node: ast.AST) -> bool:
        """An FSDP2 policy class, or a name bound to an instance of one (``mp = ...Policy()``)."""
        if not isinstance(node, (ast.Name, ast.Attribute)):
            return False
        if n.first_fsdp2(self.s.dotted(node)) in n.FSDP2_POLICIES:
            return True
        return isinstance(node, ast.Name) and any(
            isinstance(b.value, ast.Call)
            and n.first_fsdp2(self.s.dotted(b.value.func)) in n.FSDP2_POLICIES
            and self.models.reaches(b.node, node)
            for b in self.s.bindings(node)
            if b.kind == "assign"
        )

    # -- FSDP2 APIs on FSDP1 models, FSDP1 APIs on FSDP2 models ------------------------------------
    def _model_call(self, call: ast.Call, report: Audit) -> None:
        func = call.func
        # ``torch.nn.utils.clip_grad_norm_``, ``fsdp2_port.clip_grad_norm_``: not methods
        if isinstance(func, ast.Attribute) and func.attr in _FSDP1_METHODS:
            if not self.s.dotted(func):
                self._fsdp1_use(call, func.value, f".{func.attr}()", report)
                return
        receiver, builds = self._fsdp2_api(call)
        if receiver is None or self._is_ignored(call):
            return
        where = f"{self.path}:{call.lineno}"
        kinds = {b.kind for b in self.models.models(receiver)}
        if _FSDP1 in kinds:
            report.half_migrated.append(
                f"{where}: an FSDP2 API on a model an FSDP1 constructor builds"
            )
        elif not kinds and not builds:
            report.untied_fsdp2.append(where)

    def _fsdp2_api(self, call: ast.Call) -> tuple[ast.AST | None, bool]:
        """``(the model an FSDP2-only call is about, whether the call builds that model)``."""
        func, s = call.func, self.s
        if isinstance(func, ast.Attribute) and func.attr == "set_requires_gradient_sync":
            return func.value, False
        if not call.args:
            return None, False
        first = call.args[0]
        if s.is_(func, *n.FSDP2_TOOLS):
            if (
                isinstance(first, ast.Call)
                and isinstance(first.func, ast.Attribute)
                and first.func.attr in ("parameters", "named_parameters")
            ):
                return first.func.value, False
            return first, False
        if self.models.is_fsdp2_builder(func):
            return first, True
        if s.is_(func, "builtins.isinstance") and len(call.args) == 2:
            if any(n.first_fsdp2(s.dotted(x)) == "FSDPModule" for x in ast.walk(call.args[1])):
                return first, False
        return None, False

    def _fsdp1_use(self, node: ast.AST, receiver: ast.AST, what: str, report: Audit) -> None:
        """``model.no_sync()``, ``model._handle``...: FSDP1's, wrong on an FSDP2 model."""
        if self._is_ignored(node) or self._marked(node):
            return
        if any(b.kind == _FSDP2 for b in self.models.models(receiver)):
            where = f"{self.path}:{node.lineno}"  # type: ignore[attr-defined]
            if what in (".no_sync()", ".clip_grad_norm_()"):
                report.unmarked.append(f"{where}: an FSDP1 API on a model FSDP2 builds")
            else:
                report.unmarked.append(f"{where}: FSDP1's {what} on a model FSDP2 builds")

    # -- FSDP1 names -------------------------------------------------------------------------------
    def _fsdp1_name(self, node: ast.Name | ast.Attribute, report: Audit) -> None:
        s = self.s
        parent = s.parent.get(node)
        if isinstance(parent, ast.Attribute) and n.first_fsdp1(s.dotted(parent)) is not None:
            return  # the longer chain is the reference
        name = n.first_fsdp1(s.dotted(node))
        if name is None or name.split(".", 1)[0] in n.CONFIGURATION:
            return
        if self._is_ignored(node) or self._marked(node) or self._tested_with_fsdp2(node):
            return
        where = f"{self.path}:{node.lineno}"
        if self._in_type_test(node):
            report.unmarked_type_tests.append(f"{where}: FSDP1 type test without a marker")
        else:
            report.unmarked.append(f"{where}: FSDP1 name {name} without a marker")

    def _string_annotations(self) -> Iterator[tuple[ast.expr, ast.Constant]]:
        for node in self.s.nodes:
            annotations: list[ast.expr | None] = []
            if isinstance(node, ast.arg):
                annotations = [node.annotation]
            elif isinstance(node, n.FUNCTIONS):
                annotations = [node.returns]
            elif isinstance(node, ast.AnnAssign):
                annotations = [node.annotation]
            for annotation in filter(None, annotations):
                for constant in ast.walk(annotation):
                    if isinstance(constant, ast.Constant) and isinstance(constant.value, str):
                        yield annotation, constant

    def _quoted_fsdp1_name(
        self, annotation: ast.expr, constant: ast.Constant, report: Audit
    ) -> None:
        """``model: "FSDP"``: a type annotation too."""
        try:
            parsed = ast.parse(str(constant.value).strip(), mode="eval")
        except SyntaxError:
            return
        scope = self.s.scope[annotation]
        for node in ast.walk(parsed):
            path: list[str] = []
            head = node
            while isinstance(head, ast.Attribute):
                path.insert(0, head.attr)
                head = head.value
            if not isinstance(head, ast.Name):
                continue
            names = self.s.dotted_name(head.id, scope)
            name = n.first_fsdp1(frozenset(".".join([d, *path]) for d in names))
            if name is not None and name.split(".", 1)[0] not in n.CONFIGURATION:
                if not (self._is_ignored(constant) or self._marked(constant)):
                    report.unmarked_type_tests.append(
                        f"{self.path}:{constant.lineno}: FSDP1 type test without a marker"
                    )
                return

    def _tested_with_fsdp2(self, node: ast.AST) -> bool:
        """``FSDP`` in ``isinstance(m, (FSDP, FSDPModule))``: true for both kinds of model."""
        kinds = self.s.parent.get(node)
        call = self.s.parent.get(kinds) if isinstance(kinds, ast.Tuple) else None
        return (
            isinstance(kinds, ast.Tuple)
            and isinstance(call, ast.Call)
            and self.s.is_(call.func, "builtins.isinstance", "builtins.issubclass")
            and any(n.first_fsdp2(self.s.dotted(e)) == "FSDPModule" for e in kinds.elts)
        )

    def _in_type_test(self, node: ast.AST) -> bool:
        """The class tested in ``isinstance``/``issubclass`` or compared with ``type(x)``
        (``==``, ``is``, negated), or part of an annotation."""
        child = node
        for ancestor in self.s.ancestors(node):
            if isinstance(ancestor, ast.Compare):
                sides = [ancestor.left, *ancestor.comparators]
                return (
                    len(sides) == 2
                    and any(
                        isinstance(side, ast.Call)
                        and self.s.is_(side.func, "builtins.type")
                        and side is not child
                        for side in sides
                    )
                    and isinstance(ancestor.ops[0], (ast.Eq, ast.NotEq, ast.Is, ast.IsNot))
                )
            if isinstance(ancestor, ast.Call):
                return any(child is a for a in ancestor.args[1:]) and self.s.is_(
                    ancestor.func, "builtins.isinstance", "builtins.issubclass"
                )
            if isinstance(ancestor, (ast.arg, ast.AnnAssign)):
                return child is ancestor.annotation
            if isinstance(ancestor, n.FUNCTIONS):
                return child is ancestor.returns
            if isinstance(ancestor, ast.stmt):
                return False
            child = ancestor
        return False

    # -- lines -------------------------------------------------------------------------------------
    def _is_ignored(self, node: ast.AST) -> bool:
        """The line where ``node`` starts or ends ends in ``# fsdp2-port: ignore``."""
        return bool(self.ignored) and (
            node.lineno in self.ignored  # type: ignore[attr-defined]
            or node.end_lineno in self.ignored  # type: ignore[attr-defined]
        )

    def _marked(self, node: ast.AST) -> bool:
        """A marker line directly above the statement that holds ``node``."""
        statement = self.s.statement(node)
        first = min(
            [statement.lineno, *(d.lineno for d in getattr(statement, "decorator_list", []))]
        )
        above = first - 2  # 0-based index of the line above
        return above >= 0 and self.lines[above].strip().startswith(_MARKER)


def _unsubscripted(node: ast.AST) -> ast.AST:
    """``Trainer`` of ``Trainer[Batch](...)``."""
    while isinstance(node, ast.Subscript):
        node = node.value
    return node


def _starred(node: ast.Tuple | ast.List) -> bool:
    return any(isinstance(e, ast.Starred) for e in node.elts)


def _positional(function: ast.AST) -> list[str]:
    assert isinstance(function, n.FUNCTIONS)
    return [a.arg for a in (*function.args.posonlyargs, *function.args.args)]


def _position(node: ast.AST) -> tuple[int, int]:
    return node.lineno, node.col_offset  # type: ignore[attr-defined]


def _rebinds(loop: ast.AST, name: str | None) -> bool:
    """``for name in ...``: each turn binds ``name`` anew before the body reads it."""
    return isinstance(loop, (ast.For, ast.AsyncFor)) and any(
        isinstance(e, ast.Name) and e.id == name for e in ast.walk(loop.target)
    )


def _branch(node: ast.If | ast.IfExp, child: ast.AST) -> str | None:
    for name in ("body", "orelse"):
        part = getattr(node, name)
        if part is child or (isinstance(part, list) and child in part):
            return name
    return None
