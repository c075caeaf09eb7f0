"""Which expressions hold a model built by which FSDP1 constructor ("ties").

A constructor is a call of the FSDP1 class (``FSDP(m, ...)``) or a ``functools.partial`` of it
(a factory: its calls build models). Its id is ``path:line:column``. Values flow, within one
file, through:

- names bound to a value (``model = FSDP(...)``, ``wrapped = model``), in their own scope;
- attributes assigned anywhere in a class (``self.model = ...`` is seen in every method), or in
  the same function for other chains (``state.model = ...``);
- calls of functions and methods of this file that return a model (builders), including
  ``self.method(...)`` and methods of base classes defined here;
- conditional expressions, ``or``/``and``, walrus, and module methods that return the module
  itself (``.to(...)``, ``.cuda()``, ``.train()``...).

A call of a function imported from elsewhere is recorded as ``refs.Returned``, and a parameter
of a function other files may call as ``refs.Passed``; the run resolves both against what every
file exports and passes (``plan.Resolver``).
"""

from __future__ import annotations

import ast
import operator
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from codemods import flow, syntax
from codemods.assumptions import (
    BF16_OPTIMIZERS,
    BUILDERS,
    FSDP1_ONLY_ATTRIBUTES,
    FSDP1_WRAPPED_ATTRIBUTES,
    NOT_FSDP_WRAPPERS,
    RETURNS_SELF,
    UNSHARDING_METHODS,
)
from codemods.names import Binding
from codemods.parsed import ParsedFile
from codemods.plan import Passing
from codemods.refs import (
    Built,
    Deferred,
    Factory,
    Optimizer,
    Passed,
    Ref,
    Returned,
    built,
    deferred,
)

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
#: The comparisons a version helper's answer is read with.
_COMPARE: dict[type, Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Is: operator.is_,
    ast.IsNot: operator.is_not,
}
_PARTIAL = "functools.partial"


class Ties:
    def __init__(
        self, analysis: ParsedFile, wraps: Callable[[ast.AST], bool] | None = None
    ) -> None:
        """``wraps(func)``: whether calling ``func`` builds a model (default: the FSDP1 class)."""
        self.parsed = analysis
        names = analysis.names
        wraps = wraps or analysis.is_fsdp_class
        #: Constructor call -> id; factories are the ``partial(FSDP, ...)`` among them.
        self.constructors: dict[ast.Call, str] = {}
        self.factories: set[ast.Call] = set()
        for call in names.by_type[ast.Call]:
            assert isinstance(call, ast.Call)
            if wraps(call.func):
                self.constructors[call] = analysis.site_id(call)
            elif call.args and analysis.resolves_to(call.func, _PARTIAL) and wraps(call.args[0]):
                self.constructors[call] = analysis.site_id(call)
                self.factories.add(call)
        #: BF16 master optimizers built here (``BF16Optimizer(...)``): followed like models,
        #: as ``Optimizer`` refs, for the caller-side reductions of their norm.
        self.optimizers: dict[ast.Call, Optimizer] = {
            call: Optimizer(analysis.site_id(call))
            for call in names.by_type[ast.Call]
            if isinstance(call, ast.Call) and names.qualified(call.func) & BF16_OPTIMIZERS.members
        }
        self._attributes: dict[tuple[ast.AST, str], list[ast.expr]] = defaultdict(list)
        for kind in (ast.Assign, ast.AnnAssign):
            for node in names.by_type[kind]:
                assert isinstance(node, (ast.Assign, ast.AnnAssign))
                if node.value is None:
                    continue
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    key = self._attribute_key(target)
                    if key is not None:
                        self._attributes[key].append(node.value)
        self._returns: dict[ast.AST, list[ast.expr]] = defaultdict(list)
        for node in names.by_type[ast.Return]:
            assert isinstance(node, ast.Return)
            function = names.function_of(node)
            if node.value is not None and function is not None:
                self._returns[function].append(node.value)
        self._memo: dict[ast.AST, frozenset[Ref]] = {}
        #: A version helper's answers per type (``_type_answers``), None when it is none.
        self._answers: dict[ast.AST, dict[str, object] | None] = {}
        self._callee_index: tuple[dict[str, list[ast.Call]], dict[str, list[ast.Call]]] | None = (
            None
        )
        self._exported_memo: dict[str, ast.AST] | None = None

    # -- queries ---------------------------------------------------------------------------------
    def of(self, expr: ast.AST) -> tuple[frozenset[str], frozenset[Deferred]]:
        """``(constructor ids, links into other files)`` whose models ``expr`` may hold."""
        refs = self._value(expr)
        return built(refs), deferred(refs)

    def optimizers_of(self, expr: ast.AST) -> tuple[frozenset[Optimizer], frozenset[Deferred]]:
        """``(BF16 optimizers, links into other files)`` of what ``expr`` may hold."""
        refs = self._value(expr)
        return frozenset(r for r in refs if isinstance(r, Optimizer)), deferred(refs)

    def returned_by(self, function: ast.AST) -> tuple[frozenset[str], frozenset[Deferred]]:
        """``(constructor ids, links into other files)`` whose models ``function`` returns."""
        refs = self._returned(function)
        return built(refs), deferred(refs)

    def exports(self) -> dict[str, frozenset[Ref]]:
        """Qualified names of this file's functions and methods -> what their calls return."""
        out = {name: self._returned(function) for name, function in self._exported().items()}
        return {
            k: frozenset(r for r in v if not isinstance(r, Factory)) for k, v in out.items() if v
        }

    def signatures(self) -> dict[str, tuple[str, ...]]:
        """Qualified names of this file's functions and methods -> the names their positional
        arguments bind to, as other files call them (``self`` left out)."""
        return {
            name: tuple(syntax.positional(function)[1 if self._takes_self(function) else 0 :])
            for name, function in self._exported().items()
        }

    def passes(self) -> list[Passing]:
        """``(callee, position or keyword, refs)`` for each model this file passes to a
        function of another file (``save(model)``, ``Trainer(model=model)``)."""
        out: list[Passing] = []
        for call in self.parsed.names.by_type[ast.Call]:
            assert isinstance(call, ast.Call)
            if call in self.constructors or not (call.args or call.keywords):
                continue
            callees = self.parsed.names.qualified(syntax.unsubscripted(call.func))
            if not callees or any(c.startswith("builtins.") for c in callees):
                continue
            slots: list[tuple[int | str, ast.AST]] = []
            for index, argument in enumerate(call.args):
                if isinstance(argument, ast.Starred):
                    break
                slots.append((index, argument))
            slots += [(k.arg, k.value) for k in call.keywords if k.arg is not None]
            for slot, value in slots:
                refs = frozenset(r for r in self._value(value) if not isinstance(r, Factory))
                if refs:
                    out += [Passing(callee, slot, refs) for callee in callees]
        return out

    def assigned(self, attribute: ast.Attribute) -> list[ast.expr]:
        """The values assigned to an attribute chain (``self.x`` anywhere in its class)."""
        key = self._attribute_key(attribute)
        return list(self._attributes.get(key, ())) if key else []

    def never_fsdp(self, expr: ast.AST, seen: frozenset[ast.AST] = frozenset()) -> bool:
        """Every value ``expr`` may hold is a DDP or DataParallel model, never an FSDP one:
        ``ddp = DDP(m)``, names bound only to such values, their ``.to(...)`` and ``.module``,
        both branches of a conditional. Anything else (a parameter, an unpacking, a cycle) may
        be FSDP."""
        if expr in seen:
            return False
        seen = seen | {expr}
        if isinstance(expr, ast.Call):
            func = expr.func
            if isinstance(func, ast.Attribute) and func.attr in RETURNS_SELF:
                return self.never_fsdp(func.value, seen)
            qualified = self.parsed.names.qualified(func)
            return bool(qualified) and qualified <= NOT_FSDP_WRAPPERS.members
        if isinstance(expr, ast.IfExp):
            return self.never_fsdp(expr.body, seen) and self.never_fsdp(expr.orelse, seen)
        if isinstance(expr, ast.Attribute) and expr.attr == "module":
            return self.never_fsdp(expr.value, seen)  # what DDP wraps is no FSDP model
        if not isinstance(expr, ast.Name):
            return False
        reaching = self._reaching(expr)
        return bool(reaching) and all(
            b.kind == "assign" and b.value is not None and self.never_fsdp(b.value, seen)
            for b in reaching
        )

    def fresh(self, expr: ast.AST) -> bool:
        """``expr`` names an object its function has just built and not yet handed to anyone,
        so no FSDP wrapper, nor one sharded in place: the one binding that reaches it is
        ``x = C(...)`` (``_builds_anew``) earlier in the read's block, and between them nothing
        can shard ``x`` (``_keeps_it_unsharded``). A name from elsewhere may still be a factory
        of the run: the run's ties, when it has any, win."""
        if not isinstance(expr, ast.Name):
            return False
        reaching = self._reaching(expr)
        if len(reaching) != 1 or reaching[0].kind != "assign":
            return False
        statement = self.parsed.names.parent.get(reaching[0].node)
        if not (isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Call)):
            return False
        if not self._builds_anew(statement.value):
            return False
        path = flow.between(self.parsed.names, statement, expr)
        return path is not None and all(
            self._keeps_it_unsharded(n)
            for s in path
            for n in ast.walk(s)
            if isinstance(n, ast.Name) and n.id == expr.id and n is not expr
        )

    def _keeps_it_unsharded(self, use: ast.Name) -> bool:
        """A use of a fresh object that cannot shard it in place: an attribute read, or a call
        of a method torch or Hugging Face define that does not (its own methods might call
        ``FSDP(self)``, which under FSDP2 shards the object itself)."""
        names = self.parsed.names
        attribute = names.parent.get(use)
        if not isinstance(attribute, ast.Attribute):
            return False
        call = names.parent.get(attribute)
        return not (isinstance(call, ast.Call) and call.func is attribute) or (
            attribute.attr in RETURNS_SELF.members | UNSHARDING_METHODS.members
        )

    def _builds_anew(self, call: ast.Call) -> bool:
        """A call that returns a new object of a class other than FSDP's: a class of this
        file (or a classmethod's ``cls``) with no FSDP base, ``C.from_pretrained(...)``, or a
        ``CamelCase`` name from elsewhere."""
        func = call.func
        if call in self.constructors:
            return False
        if isinstance(func, ast.Attribute) and func.attr in BUILDERS:
            return True
        if isinstance(func, ast.Name):
            local = self._local_class(func) or self._class_of_cls(func)
            if local is not None:
                return not any(self.parsed.is_fsdp_class(b) for b in local.bases)
        qualified = self.parsed.names.qualified(func)
        return bool(qualified) and all(syntax.camel(q.rsplit(".", 1)[-1]) for q in qualified)

    def _class_of_cls(self, name: ast.Name) -> ast.ClassDef | None:
        """The class a classmethod's first parameter (``cls``) is bound to, read there."""
        bindings = self.parsed.names.bindings_of(name)
        if len(bindings) != 1 or bindings[0].kind != "param":
            return None
        function = self.parsed.names.function_of(name)
        if not (
            isinstance(function, _FUNCTIONS)
            and function.args.args
            and function.args.args[0] is bindings[0].node
            and any(
                isinstance(d, ast.Name) and d.id == "classmethod" for d in function.decorator_list
            )
        ):
            return None
        return self.parsed.names.class_of(function)

    def known_fsdp1(self, expr: ast.AST) -> bool:
        """Known to be an FSDP1 module without knowing which: annotated so, or guarded by an
        FSDP1 type test (``guarded_fsdp1``)."""
        if isinstance(expr, ast.Name):
            for binding in self.parsed.names.bindings_of(expr):
                annotation = getattr(binding.node, "annotation", None)
                if annotation is not None and self._mentions_fsdp1(annotation):
                    return True
        return self.guarded_fsdp1(expr)

    def guarded_fsdp1(self, expr: ast.AST) -> bool:
        """Reached only when ``isinstance(expr, FSDP)`` (or ``hasattr(expr, "<FSDP1-only
        attribute>")``) holds: later in an ``and``, in the body of an ``if`` (or conditional
        expression) whose test asserts it, in the ``else`` of one that denies it, or after
        ``if not isinstance(expr, FSDP): return`` (any jump) in the same block. An FSDP2 model
        never gets there while the test names FSDP1."""
        return self._guarded(expr, self._tests_fsdp1)

    def unreached_by_fsdp2(self, expr: ast.AST) -> bool:
        """Reached only where a test rules FSDP2 out for ``expr`` (the places of
        ``guarded_fsdp1``): an FSDP1 type test, ``not isinstance(expr, FSDPModule)``, or a
        version helper of this file (``fsdp_version(expr) == 1``, after ``if fsdp_version(expr)
        == 2: return``). FSDP1, DDP or a plain module may get there, an FSDP2 model never: code
        there holds no model of the run (it is no proof of FSDP1: ``known_fsdp1`` does not
        read it)."""
        return self._guarded(expr, self._excludes_fsdp2)

    def _guarded(self, expr: ast.AST, tests: Callable[[ast.AST, str, bool], bool]) -> bool:
        """Whether ``expr`` is reached only where ``tests(test, text, holds)`` says a test's
        outcome implies its property."""
        text = self.parsed.source(expr)
        child: ast.AST = expr
        for ancestor in self.parsed.names.ancestors(expr):
            if isinstance(ancestor, ast.BoolOp) and isinstance(ancestor.op, ast.And):
                earlier = ancestor.values[: ancestor.values.index(child)]  # type: ignore[arg-type]
                if any(tests(v, text, True) for v in earlier):
                    return True
            if isinstance(ancestor, (ast.If, ast.IfExp)):
                body = ancestor.body if isinstance(ancestor, ast.If) else [ancestor.body]
                orelse = ancestor.orelse if isinstance(ancestor, ast.If) else [ancestor.orelse]
                if child in body and tests(ancestor.test, text, True):
                    return True
                if child in orelse and tests(ancestor.test, text, False):
                    return True
            for block in syntax.blocks(ancestor):
                if child in block and any(
                    syntax.rules_out_then_jumps(s, text, tests) for s in block[: block.index(child)]
                ):
                    return True
            if isinstance(ancestor, (*_FUNCTIONS, ast.Lambda, ast.ClassDef)):
                break
            child = ancestor
        return False

    # -- values ----------------------------------------------------------------------------------
    def _value(self, expr: ast.AST) -> frozenset[Ref]:
        if expr in self._memo:
            return self._memo[expr]
        self._memo[expr] = frozenset()  # a cycle contributes nothing
        found = frozenset(self._compute(expr))
        self._memo[expr] = found
        return found

    def _compute(self, expr: ast.AST) -> set[Ref]:
        if isinstance(expr, ast.Call):
            return self._call(expr)
        if isinstance(expr, ast.Name):
            out: set[Ref] = set()
            for binding in self._reaching(expr):
                if binding.kind == "assign" and binding.value is not None:
                    out |= self._value(binding.value)
                elif binding.kind == "other":
                    out |= self._unpacked(binding.node)
                elif binding.kind == "param":
                    out |= self._passed(binding.node)
            return out
        if isinstance(expr, ast.Attribute):
            key = self._attribute_key(expr)
            if key is None:
                return set()
            return {r for value in self._attributes.get(key, ()) for r in self._value(value)}
        if isinstance(expr, ast.IfExp):
            return set(self._value(expr.body) | self._value(expr.orelse))
        if isinstance(expr, ast.BoolOp):
            return {r for value in expr.values for r in self._value(value)}
        if isinstance(expr, ast.NamedExpr):
            return set(self._value(expr.value))
        return set()

    def _reaching(self, name: ast.Name) -> list[Binding]:
        """The bindings of ``name`` this read of it may see."""
        names, lines = self.parsed.names, self.parsed.lines
        return [b for b in names.bindings_of(name) if flow.may_reach(names, lines, b.node, name)]

    def _passed(self, parameter: ast.AST) -> set[Ref]:
        """What the calls of this file pass for a function's parameter, and what the run's
        other files may pass (``param:``, when the function is one they can call)."""
        arguments = self.parsed.names.parent.get(parameter)
        function = self.parsed.names.parent.get(arguments) if arguments is not None else None
        if not isinstance(function, _FUNCTIONS) or not isinstance(parameter, ast.arg):
            return set()
        positional = syntax.positional(function)
        method = self._takes_self(function)
        if method and positional[0] == parameter.arg:
            return set()  # self
        out: set[Ref] = set()
        exported = self._exported_name(function)
        if exported is not None:
            out.add(Passed(exported, parameter.arg))
        for call in self._callers(function, method):
            offset = 1 if method else 0
            for index, argument in enumerate(call.args):
                if isinstance(argument, ast.Starred):
                    break
                if index + offset < len(positional) and positional[index + offset] == parameter.arg:
                    out |= self._value(argument)
            for keyword in call.keywords:
                if keyword.arg == parameter.arg:
                    out |= self._value(keyword.value)
        return out

    def _callers(self, function: ast.AST, method: bool) -> list[ast.Call]:
        """Calls of ``function`` in this file: by its name, ``self.<name>`` in its class, or
        the class itself for ``__init__``."""
        assert isinstance(function, _FUNCTIONS)
        found = []
        owner = self.parsed.names.class_of(function) if method else None
        by_name, by_attribute = self._calls_by_callee()
        candidates = (
            by_attribute.get(function.name, [])
            + by_name.get(function.name, [])
            + (by_name.get(owner.name, []) if owner is not None else [])
        )
        for call in candidates:
            func = syntax.unsubscripted(call.func)  # Trainer[Batch](model) calls Trainer
            if isinstance(func, ast.Name) and func.id == function.name and not method:
                if any(b.node is function for b in self.parsed.names.bindings_of(func)):
                    found.append(call)
            elif method and function.name == "__init__" and isinstance(func, ast.Name):
                if any(b.node is owner for b in self.parsed.names.bindings_of(func)):
                    found.append(call)
            elif (
                method
                and isinstance(func, ast.Attribute)
                and func.attr == function.name
                and self._is_self(func.value)
                and self.parsed.names.class_of(call) is owner
            ):
                found.append(call)
        return found

    def _calls_by_callee(self) -> tuple[dict[str, list[ast.Call]], dict[str, list[ast.Call]]]:
        """This file's calls by the name they call (``f(...)``) and by the attribute they call
        (``x.f(...)``), built once: finding a function's callers stays linear in the file."""
        if self._callee_index is None:
            by_name: dict[str, list[ast.Call]] = defaultdict(list)
            by_attribute: dict[str, list[ast.Call]] = defaultdict(list)
            for call in self.parsed.names.by_type[ast.Call]:
                assert isinstance(call, ast.Call)
                func = syntax.unsubscripted(call.func)
                if isinstance(func, ast.Name):
                    by_name[func.id].append(call)
                elif isinstance(func, ast.Attribute):
                    by_attribute[func.attr].append(call)
            self._callee_index = (dict(by_name), dict(by_attribute))
        return self._callee_index

    def _unpacked(self, target: ast.AST) -> set[Ref]:
        """``a, b = value``: what element ``target`` takes, when ``value`` is a tuple or a call
        of a function here that returns tuples."""
        parent = self.parsed.names.parent.get(target)
        statement = self.parsed.names.parent.get(parent) if parent is not None else None
        if not (isinstance(parent, (ast.Tuple, ast.List)) and isinstance(statement, ast.Assign)):
            return set()
        if parent not in statement.targets or any(isinstance(e, ast.Starred) for e in parent.elts):
            return set()
        index = parent.elts.index(target)  # type: ignore[arg-type]
        values: list[ast.AST] = [statement.value]
        if isinstance(statement.value, ast.Call):
            func = statement.value.func
            functions = [
                b.node
                for b in (self.parsed.names.bindings_of(func) if isinstance(func, ast.Name) else [])
                if b.kind == "def"
            ]
            values = [r for f in functions for r in self._returns.get(f, ())]
        out: set[Ref] = set()
        for value in values:
            if isinstance(value, ast.Tuple) and len(value.elts) == len(parent.elts):
                out |= self._value(value.elts[index])
        return out

    def _call(self, call: ast.Call) -> set[Ref]:
        if call in self.optimizers:
            return {self.optimizers[call]}
        if call in self.constructors:
            ref = self.constructors[call]
            return {Factory(ref)} if call in self.factories else {Built(ref)}
        func = call.func
        made: set[Ref] = {Built(r.id) for r in self._value(func) if isinstance(r, Factory)}
        if made:
            return made
        if isinstance(func, ast.Attribute) and func.attr in RETURNS_SELF:
            return set(self._value(func.value))
        if isinstance(func, ast.Name):
            out: set[Ref] = set()
            for binding in self.parsed.names.bindings_of(func):
                if binding.kind == "def" and isinstance(binding.node, _FUNCTIONS):
                    out |= self._returned(binding.node)
            if out:
                return out
        if isinstance(func, ast.Attribute) and self._is_self(func.value):
            owner = self.parsed.names.class_of(call)
            if owner is not None:
                return self._method(owner, func.attr, set())
        qualified = self.parsed.names.qualified(func)
        for attribute, form in FSDP1_WRAPPED_ATTRIBUTES.items():  # what F2P010 writes
            if f"fsdp2_port.{form}" in qualified and len(call.args) == 1 and not call.keywords:
                # what the codemod wrote for ``x.module``: what ``x.module`` was
                key = self._key(call.args[0], f"{self.parsed.source(call.args[0])}.{attribute}")
                values = self._attributes.get(key, ()) if key is not None else ()
                return {r for value in values for r in self._value(value)}
        return {Returned(q) for q in qualified}

    def _method(self, owner: ast.ClassDef, name: str, seen: set[ast.ClassDef]) -> set[Ref]:
        """What ``self.<name>(...)`` returns, looking in ``owner`` then its bases."""
        seen.add(owner)
        for item in owner.body:
            if isinstance(item, _FUNCTIONS) and item.name == name:
                return self._returned(item)
        out: set[Ref] = set()
        for base in owner.bases:
            local = self._local_class(base)
            if local is not None and local not in seen:
                out |= self._method(local, name, seen)
            else:
                out |= {Returned(f"{q}.{name}") for q in self.parsed.names.qualified(base)}
        return out

    def _local_class(self, base: ast.expr) -> ast.ClassDef | None:
        if isinstance(base, ast.Name):
            for binding in self.parsed.names.bindings_of(base):
                if binding.kind == "class" and isinstance(binding.node, ast.ClassDef):
                    return binding.node
        return None

    def _returned(self, function: ast.AST) -> set[Ref]:
        return {r for value in self._returns.get(function, ()) for r in self._value(value)}

    # -- helpers ---------------------------------------------------------------------------------
    def _exported(self) -> dict[str, ast.AST]:
        """This file's module-level functions and methods of module-level classes, by the
        qualified names other files import them by."""
        if self._exported_memo is not None:
            return self._exported_memo
        module = self.parsed.module_name
        out: dict[str, ast.AST] = {}
        self._exported_memo = out
        if not module:
            return out
        for statement in self.parsed.tree.body:
            if isinstance(statement, _FUNCTIONS):
                out[f"{module}.{statement.name}"] = statement
            elif isinstance(statement, ast.ClassDef):
                for item in statement.body:
                    if isinstance(item, _FUNCTIONS):
                        out[f"{module}.{statement.name}.{item.name}"] = item
        return out

    def _exported_name(self, function: ast.AST) -> str | None:
        return next((k for k, v in self._exported().items() if v is function), None)

    def _takes_self(self, function: ast.AST) -> bool:
        """A method called on an instance or a class (its first parameter is not passed)."""
        assert isinstance(function, _FUNCTIONS)
        if self.parsed.names.class_of(function) is None or not syntax.positional(function):
            return False
        return not any(
            self.parsed.resolves_to(d, "builtins.staticmethod") for d in function.decorator_list
        )

    def _attribute_key(self, node: ast.AST) -> tuple[ast.AST, str] | None:
        """``(owner, text)``: the class for ``self.x...``, else the enclosing function/module."""
        if not isinstance(node, ast.Attribute):
            return None
        return self._key(node, self.parsed.source(node))

    def _key(self, node: ast.expr, text: str) -> tuple[ast.AST, str] | None:
        """``_attribute_key`` of the chain ``text`` that starts where ``node`` does."""
        head: ast.AST = node
        while isinstance(head, ast.Attribute):
            head = head.value
        if not isinstance(head, ast.Name):
            return None
        if self._is_self(head):
            owner = self.parsed.names.class_of(node)
            if owner is not None:
                return owner, "self" + text[len(head.id) :]
        return self.parsed.names.function_of(node) or self.parsed.tree, text

    def _is_self(self, node: ast.AST) -> bool:
        """The first parameter of the method ``node`` is in (``self`` by any name)."""
        if not isinstance(node, ast.Name):
            return False
        function = self.parsed.names.function_of(node)
        if not isinstance(function, _FUNCTIONS) or not self._takes_self(function):
            return False
        return syntax.positional(function)[0] == node.id

    def _mentions_fsdp1(self, annotation: ast.AST) -> bool:
        return any(
            isinstance(n, (ast.Name, ast.Attribute)) and self.parsed.is_fsdp_class(n)
            for n in ast.walk(annotation)
        )

    def _tests_fsdp1(self, test: ast.AST, text: str, holds: bool) -> bool:
        """Whether ``test`` being ``holds`` implies ``isinstance(<text>, FSDP)`` (``holds``
        True) or its negation (False): through ``not``, and ``and`` (``or``) for True (False)."""
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return self._tests_fsdp1(test.operand, text, not holds)
        if isinstance(test, ast.BoolOp):
            wanted = ast.And if holds else ast.Or
            return isinstance(test.op, wanted) and any(
                self._tests_fsdp1(v, text, holds) for v in test.values
            )
        if not (
            holds
            and isinstance(test, ast.Call)
            and isinstance(test.func, ast.Name)
            and len(test.args) == 2
            and self.parsed.source(test.args[0]) == text
        ):
            return False
        if test.func.id == "hasattr":  # hasattr(m, "_fsdp_wrapped_module"): FSDP1 only
            second = test.args[1]
            return isinstance(second, ast.Constant) and second.value in FSDP1_ONLY_ATTRIBUTES
        return test.func.id == "isinstance" and self._mentions_fsdp1(test.args[1])

    def _excludes_fsdp2(self, test: ast.AST, text: str, holds: bool) -> bool:
        """Whether ``test`` being ``holds`` implies that ``<text>`` is no FSDP2 module: an
        FSDP1 type test, a denied ``isinstance(<text>, FSDPModule)``, a comparison of a version
        helper's answer (``_type_answers``), through ``not``, ``and`` and ``or``."""
        if self._tests_fsdp1(test, text, holds):
            return True
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return self._excludes_fsdp2(test.operand, text, not holds)
        if isinstance(test, ast.BoolOp):
            wanted = ast.And if holds else ast.Or
            return isinstance(test.op, wanted) and any(
                self._excludes_fsdp2(v, text, holds) for v in test.values
            )
        tested = syntax.isinstance_arguments(test)
        if tested is not None and not holds and self.parsed.source(tested[0]) == text:
            return self._fsdp2_only(tested[1])
        return self._version_excludes_fsdp2(test, text, holds)

    def _fsdp2_only(self, kinds: ast.AST) -> bool:
        """``FSDPModule`` (alone or with more FSDP2 names in a tuple)."""
        parts = kinds.elts if isinstance(kinds, ast.Tuple) else [kinds]
        return bool(parts) and all(self.parsed.fsdp2_name(p) == "FSDPModule" for p in parts)

    def _version_excludes_fsdp2(self, test: ast.AST, text: str, holds: bool) -> bool:
        """``f(<text>) <op> <int>`` for a helper ``f`` of this file that answers a constant per
        type: whether the comparison being ``holds`` rules out the FSDP2 answer."""
        if not (
            isinstance(test, ast.Compare)
            and len(test.ops) == 1
            and isinstance(test.left, ast.Call)
            and isinstance(test.left.func, ast.Name)
            and len(test.left.args) == 1
            and not test.left.keywords
            and self.parsed.source(test.left.args[0]) == text
            and isinstance(test.comparators[0], ast.Constant)
        ):
            return False
        answers = self._type_answers(test.left.func)
        compare = _COMPARE.get(type(test.ops[0]))
        if answers is None or compare is None:
            return False
        try:
            return bool(compare(answers["fsdp2"], test.comparators[0].value)) != holds
        except TypeError:  # a comparison the answers do not support
            return False

    def _type_answers(self, func: ast.Name) -> dict[str, object] | None:
        """What a helper of this file returns for an FSDP2 module and for anything else (and for
        an FSDP1 module when it tests for one), when its body is only ``if isinstance(<param>,
        <FSDP1 class>): return <c>`` / ``elif isinstance(<param>, FSDPModule): return <c>`` /
        ``else: return <c>`` (in any order, as ``if``/``elif`` or as ``if``s that return, then a
        last ``return``)."""
        bindings = self.parsed.names.bindings_of(func)
        if len(bindings) != 1 or bindings[0].kind != "def":
            return None
        function = bindings[0].node
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return None
        if function.decorator_list or len(syntax.positional(function)) != 1:
            return None
        if function in self._answers:
            return self._answers[function]
        parameter = syntax.positional(function)[0]
        body = list(function.body)
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]  # the docstring
        answers: dict[str, object] = {}
        while body:
            statement = body.pop(0)
            if isinstance(statement, ast.Return) and isinstance(statement.value, ast.Constant):
                answers.setdefault("other", statement.value.value)
                break
            if not (
                isinstance(statement, ast.If)
                and len(statement.body) == 1
                and isinstance(statement.body[0], ast.Return)
                and isinstance(statement.body[0].value, ast.Constant)
            ):
                answers = {}
                break
            kind = self._tested_kind(statement.test, parameter)
            if kind is None or kind in answers:
                answers = {}
                break
            answers[kind] = statement.body[0].value.value
            body = [*statement.orelse, *body]
        # FSDP1's test may be gone (--drop-fsdp1-branches deletes it): FSDP1 modules then get
        # the last answer, which changes nothing about FSDP2's
        found = answers if {"fsdp2", "other"} <= set(answers) else None
        self._answers[function] = found
        return found

    def _tested_kind(self, test: ast.AST, parameter: str) -> str | None:
        """``isinstance(<parameter>, <FSDP1 class>)`` -> "fsdp1", ``..., FSDPModule)`` ->
        "fsdp2"; None for any other test."""
        tested = syntax.isinstance_arguments(test)
        if tested is None or not (isinstance(tested[0], ast.Name) and tested[0].id == parameter):
            return None
        kinds = tested[1]
        parts = kinds.elts if isinstance(kinds, ast.Tuple) else [kinds]
        if parts and all(
            isinstance(p, (ast.Name, ast.Attribute)) and self.parsed.is_fsdp_class(p) for p in parts
        ):
            return "fsdp1"
        return "fsdp2" if self._fsdp2_only(kinds) else None
