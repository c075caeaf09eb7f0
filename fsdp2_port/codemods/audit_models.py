"""The audit's own following of models within one file (``_Models``): which FSDP1 or FSDP2
constructor each expression may hold, read from the output with ``audit_names`` alone."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from fsdp2_port.codemods import audit_names as n
from fsdp2_port.codemods.assumptions import AUDIT_BRIDGE, AUDIT_RETURNS_SELF

_FSDP1, _FSDP2 = "FSDP1", "FSDP2"
_LOOPS = (ast.For, ast.AsyncFor, ast.While)


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
        return n.first_fsdp2(dotted) == "fully_shard" or not dotted.isdisjoint(AUDIT_BRIDGE.members)

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
        if isinstance(func, ast.Attribute) and func.attr in AUDIT_RETURNS_SELF:
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
