"""Which expressions hold a model built by which FSDP1 constructor ("ties"): the value flow
of one file, its links into other files left for the run (``semantic.resolve.Resolver``).

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
file exports and passes (``semantic.resolve.Resolver``).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Callable

from fsdp2_port.codemods import flags, flow, fsdp1, syntax
from fsdp2_port.codemods.assumptions import (
    BF16_OPTIMIZERS,
    CAMEL_CASE,
    FSDP1_WRAPPED_ATTRIBUTES,
    NO_MODEL_BUILTINS,
    NOT_FSDP_WRAPPERS,
    PARAMETER_ITERATORS,
    RETURNS_SELF,
)
from fsdp2_port.codemods.names import Binding
from fsdp2_port.codemods.parsed import ParsedFile
from fsdp2_port.codemods.refs import (
    CALL,
    COPY,
    GROUPS,
    UNKNOWN,
    Built,
    Deferred,
    Factory,
    Function,
    Given,
    Instance,
    Optimizer,
    Passed,
    Ref,
    Returned,
    Unknown,
    built,
    deferred,
    groups_of,
)
from fsdp2_port.codemods.semantic import fresh, parts
from fsdp2_port.codemods.semantic.modules import RunModules

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
PARTIAL = "functools.partial"
_COPIES = {"copy.deepcopy", "copy.copy"}

#: Expressions whose value is never a model (nor holds one a read of it could give).
_NO_MODEL = (
    ast.Constant,
    ast.JoinedStr,
    ast.FormattedValue,
    ast.BinOp,
    ast.UnaryOp,
    ast.Compare,
    ast.Lambda,
    ast.List,
    ast.Tuple,
    ast.Set,
    ast.Dict,
    ast.ListComp,
    ast.SetComp,
    ast.DictComp,
    ast.GeneratorExp,
)


class Ties:
    def __init__(
        self, analysis: ParsedFile, wraps: Callable[[ast.AST], bool] | None = None
    ) -> None:
        """``wraps(func)``: whether calling ``func`` builds a model (default: the FSDP1 class)."""
        self.parsed = analysis
        self._modules: RunModules = getattr(analysis, "run_modules", None) or RunModules()
        names = analysis.names
        wraps = wraps or analysis.is_fsdp_class
        #: Constructor call -> id; factories are the ``partial(FSDP, ...)`` among them.
        self.constructors: dict[ast.Call, str] = {}
        self.factories: set[ast.Call] = set()
        self._find_constructors(wraps)
        #: BF16 master optimizers built here (``BF16Optimizer(...)``): followed like models,
        #: as ``Optimizer`` refs, for the caller-side reductions of their norm.
        self.optimizers: dict[ast.Call, Optimizer] = {
            call: Optimizer(analysis.site_id(call))
            for call in names.by_type[ast.Call]
            if isinstance(call, ast.Call) and names.qualified(call.func) & BF16_OPTIMIZERS.members
        }
        self._attributes = self._assigned_attributes()
        self._returns: dict[ast.AST, list[ast.expr]] = defaultdict(list)
        for node in names.by_type[ast.Return]:
            assert isinstance(node, ast.Return)
            function = names.function_of(node)
            if node.value is not None and function is not None:
                self._returns[function].append(node.value)
        #: ``copy.deepcopy(x)`` calls by ``Returned`` name (``refs.COPY``) -> ``x``.
        self.copies: dict[str, ast.expr] = {
            analysis.site_id(call) + COPY: call.args[0]
            for call in names.by_type[ast.Call]
            if isinstance(call, ast.Call)
            and len(call.args) == 1
            and not call.keywords
            and names.qualified(call.func) & _COPIES
        }
        self._memo: dict[ast.AST, frozenset[Ref]] = {}
        self._callee_index: tuple[dict[str, list[ast.Call]], dict[str, list[ast.Call]]] | None = (
            None
        )
        self._exported_memo: dict[str, ast.AST] | None = None
        self._generator_memo: frozenset[ast.AST | None] | None = None

    def _find_constructors(self, wraps: Callable[[ast.AST], bool]) -> None:
        analysis = self.parsed
        for call in analysis.names.by_type[ast.Call]:
            assert isinstance(call, ast.Call)
            if wraps(call.func):
                self.constructors[call] = analysis.site_id(call)
            elif call.args and analysis.resolves_to(call.func, PARTIAL) and wraps(call.args[0]):
                self.constructors[call] = analysis.site_id(call)
                self.factories.add(call)

    def _assigned_attributes(self) -> dict[tuple[ast.AST, str], list[ast.expr]]:
        """Each attribute chain's key (``_attribute_key``) -> the values assigned to it."""
        found: dict[tuple[ast.AST, str], list[ast.expr]] = defaultdict(list)
        for kind in (ast.Assign, ast.AnnAssign):
            for node in self.parsed.names.by_type[kind]:
                assert isinstance(node, (ast.Assign, ast.AnnAssign))
                if node.value is None:
                    continue
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    key = self._attribute_key(target)
                    if key is not None:
                        found[key].append(node.value)
        return found

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

    def _partial_target(self, func: ast.AST) -> tuple[ast.expr, int] | None:
        """``(g, n)`` when ``func`` is a name every reaching binding of which is
        ``functools.partial(g, <n positional arguments>, ...)`` of the same ``g``."""
        if not isinstance(func, ast.Name):
            return None
        reaching = self.reaching(func)
        targets = []
        for binding in reaching:
            value = binding.value
            if not (
                binding.kind == "assign"
                and isinstance(value, ast.Call)
                and value.args
                and not isinstance(value.args[0], ast.Starred)
                and self.parsed.resolves_to(value.func, PARTIAL)
            ):
                return None
            targets.append((value.args[0], len(value.args) - 1))
        if not targets or len({self.parsed.source(t) for t, _ in targets}) != 1:
            return None
        if len({n for _, n in targets}) != 1:
            return None
        return targets[0]

    def assigned(self, attribute: ast.Attribute) -> list[ast.expr]:
        """The values assigned to an attribute chain (``self.x`` anywhere in its class)."""
        key = self._attribute_key(attribute)
        return list(self._attributes.get(key, ())) if key else []

    def never_fsdp(self, expr: ast.AST, seen: frozenset[ast.AST] = frozenset()) -> bool:
        """Every value ``expr`` may hold is a DDP or DataParallel model, never an FSDP one:
        ``ddp = DDP(m)``, names (and attributes of the instance, ``_stored``) bound only to
        such values or constants, their ``.to(...)`` and ``.module``, both branches of a
        conditional. Anything else (a parameter, an unpacking, a cycle) may be FSDP."""
        if expr in seen:
            return False
        seen = seen | {expr}
        if isinstance(expr, ast.Constant):
            return True  # ``self.model = None`` until a method builds it
        if isinstance(expr, ast.Call):
            return self._never_fsdp_call(expr, seen)
        if isinstance(expr, ast.IfExp):
            return self.never_fsdp(expr.body, seen) and self.never_fsdp(expr.orelse, seen)
        if isinstance(expr, ast.Attribute):
            return self._never_fsdp_attribute(expr, seen)
        if not isinstance(expr, ast.Name):
            return False
        reaching = self.reaching(expr)
        return bool(reaching) and all(
            b.kind == "assign" and b.value is not None and self.never_fsdp(b.value, seen)
            for b in reaching
        )

    def _never_fsdp_call(self, call: ast.Call, seen: frozenset[ast.AST]) -> bool:
        """A DDP (or other non-FSDP wrapper's) constructor, or ``.to(...)`` of such a model."""
        func = call.func
        if (
            isinstance(func, ast.Attribute)
            and self.never_fsdp(func.value, seen)
            and self.parsed.assumed.takes(RETURNS_SELF, func.attr, call)
        ):
            return True
        qualified = self.parsed.names.qualified(func)
        return bool(qualified) and qualified <= NOT_FSDP_WRAPPERS.members

    def _never_fsdp_attribute(self, expr: ast.Attribute, seen: frozenset[ast.AST]) -> bool:
        """``.module`` of such a model (what DDP wraps is no FSDP model), or ``self.attr``
        that the class stores only such values into and no other file reads."""
        if expr.attr == "module":
            return self.never_fsdp(expr.value, seen)
        if not self.is_self(expr.value):
            return False
        stored = self._stored(expr)
        return (
            bool(stored)
            and self.parsed.names.seen.own_attribute(expr.attr)
            and all(self.never_fsdp(v, seen) for v in stored)
        )

    def fresh(self, expr: ast.AST) -> bool:
        """``expr`` holds an object its function has just built (``semantic.fresh``)."""
        return fresh.is_fresh(self, expr)

    def spelled_as_class(self, qualified: str, call: ast.Call) -> bool:
        """The callee ``qualified`` is a class, by its spelling: for torch's FSDP and DDP names
        a fact (their CamelCase names are classes), for any other a guess (``CAMEL_CASE``, an
        acronym too: ``GPT(config)``)."""
        last = qualified.rpartition(".")[2]
        spelled = syntax.camel(last)
        if fsdp1.canonical(qualified) or fsdp1.fsdp2(qualified) or qualified in NOT_FSDP_WRAPPERS:
            return spelled
        spelled = spelled or syntax.acronym(last)
        return self.parsed.assumed.takes(CAMEL_CASE, last, call, member=spelled)

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
            return self._named(expr)
        if isinstance(expr, ast.Attribute):
            return self._attribute(expr)
        if isinstance(expr, ast.IfExp):
            return set(self._value(expr.body) | self._value(expr.orelse))
        if isinstance(expr, ast.BoolOp):
            return {r for value in expr.values for r in self._value(value)}
        if isinstance(expr, ast.NamedExpr):
            return set(self._value(expr.value))
        if isinstance(expr, ast.Subscript):
            return parts.element(self, expr.value)
        if isinstance(expr, _NO_MODEL):
            return set()  # literals, displays, arithmetic, comparisons, lambdas: no model
        return {UNKNOWN}

    def _attribute(self, expr: ast.Attribute) -> set[Ref]:
        """What ``x.attr`` may hold: what this file assigns to that chain (for ``self.attr``,
        what no test of a flag of the instance keeps from the read: ``flags.exclusive``),
        and, for an instance of a class of the run (``x = Trainer(...)``), what that class's
        methods assign to ``self.attr`` (a ``Returned`` of ``Class#attr``, settled by the
        run). ``self.param_groups`` that the file never assigns, in a method of a class of
        the run, is ``Class#param_groups``: the parameters handed to the instances of that
        class and its subclasses (``Resolver``)."""
        out = {r for value in self._stored(expr) for r in self._value(value)}
        if not out and expr.attr == GROUPS and self.is_self(expr.value):
            owner = self.parsed.names.class_of(expr)
            module = self.parsed.module_name
            if owner is not None and owner in self.parsed.tree.body and module:
                return {Returned(groups_of(f"{module}.{owner.name}"))}  # an optimizer's
        if not self.is_self(expr.value):
            base = self._value(expr.value)
            fields = {
                Returned(f"{r.function}#{expr.attr}") for r in base if isinstance(r, Returned)
            }
            out |= fields
            if fields and not out - fields and len(fields) < len(base):
                out.add(UNKNOWN)  # the object may also be one of no class of the run's
        return out or {UNKNOWN}  # an attribute this file never assigns

    def _stored(self, expr: ast.Attribute) -> list[ast.expr]:
        """The values this file assigns to the chain ``expr`` reads, but for ``self.attr``
        those a test of a flag of the instance keeps from the read (``flags.exclusive``)."""
        key = self._attribute_key(expr)
        values = self._attributes.get(key, []) if key is not None else []
        if values and self.is_self(expr.value):
            return [v for v in values if not flags.exclusive(self.parsed.names, v, expr)]
        return values

    def _named(self, name: ast.Name) -> set[Ref]:
        """What a read of a name may hold, through the bindings that reach it."""
        reaching = self.reaching(name)
        if not reaching:
            return {UNKNOWN}  # bound by no code of this file (a global set elsewhere)
        out: set[Ref] = set()
        for binding in reaching:
            if binding.kind == "assign":
                out |= self._value(binding.value) if binding.value is not None else {UNKNOWN}
            elif binding.kind == "other":
                out |= parts.unpacked(self, binding.node)
            elif binding.kind == "param":
                out |= self._passed(binding.node)
            elif binding.kind == "import":  # a function or class of the run, or any value
                defined = self._defined(name)
                out |= {Function(q) for q in defined} if defined else {UNKNOWN}
            elif binding.kind in ("def", "class") and binding.node in self.parsed.tree.body:
                out |= {Function(q) for q in [self._defined_here(binding.node)] if q}
        return out  # a function handed on as a value, or a class: no model

    def _defined_here(self, node: ast.AST) -> str | None:
        """The qualified name of a module-level function or class of this file."""
        if isinstance(node, ast.ClassDef):
            module = self.parsed.module_name
            return f"{module}.{node.name}" if module else None
        return self.exported_name(node)

    def _defined(self, name: ast.Name) -> frozenset[str]:
        """The qualified names an imported ``name`` stands for when each is a function or
        class of the run (``RunModules.defines``), else none."""
        qualified = self.parsed.names.qualified(name)
        if qualified and all(self._modules.defines(q) for q in qualified):
            return qualified
        return frozenset()

    def opaque(self, expr: ast.AST) -> bool:
        """Whether some value ``expr`` may hold comes from code the analysis does not follow."""
        return UNKNOWN in self._value(expr)

    def none_of(self, expr: ast.AST) -> bool:
        """Whether ``expr`` provably holds no model of the run: every value it may hold is
        followed to code that makes no model (no constructor, no call into another file, no
        value from code the analysis does not follow)."""
        return not any(
            isinstance(r, (Built, Factory, Returned, Passed, Unknown)) for r in self._value(expr)
        )

    def reaching(self, name: ast.Name) -> list[Binding]:
        """The bindings of ``name`` this read of it may see."""
        names, lines = self.parsed.names, self.parsed.lines
        return [b for b in names.bindings_of(name) if flow.may_reach(names, lines, b.node, name)]

    def _passed(self, parameter: ast.AST) -> set[Ref]:
        """What the calls of this file pass for a function's parameter, and what the run's
        other files may pass (``param:``, when the function is one they can call)."""
        arguments = self.parsed.names.parent.get(parameter)
        function = self.parsed.names.parent.get(arguments) if arguments is not None else None
        if not isinstance(function, _FUNCTIONS) or not isinstance(parameter, ast.arg):
            return {UNKNOWN}  # a lambda's
        positional = syntax.positional(function)
        method = self._takes_self(function)
        if method and positional[0] == parameter.arg:
            return set()  # self
        out: set[Ref] = set()
        exported = self.exported_name(function)
        if exported is not None:
            out.add(Passed(exported, parameter.arg))
        callers = self._callers(function, method)
        if parameter in (function.args.vararg, function.args.kwarg):
            out.add(UNKNOWN)  # gathered
        elif not callers:
            instances = self._handed_to(function)
            if instances:
                out |= {Given(i) for i in instances}  # a library object calls it back
            elif exported is None:
                out.add(UNKNOWN)  # called from where this file cannot see
        for call in callers:
            out |= self._argument(call, function, parameter, 1 if method else 0)
        return out

    def _argument(
        self,
        call: ast.Call,
        function: ast.FunctionDef | ast.AsyncFunctionDef,
        parameter: ast.arg,
        offset: int,
    ) -> set[Ref]:
        """What one call passes for ``parameter`` (``offset``: 1 past a method's ``self``):
        its argument by position or keyword, anything after ``*xs`` or with ``**kwargs``, or
        the parameter's default."""
        positional = syntax.positional(function)
        out: set[Ref] = set()
        given = False
        for index, argument in enumerate(call.args):
            if isinstance(argument, ast.Starred):
                out.add(UNKNOWN)  # f(*xs): any parameter from here on
                given = True
                break
            if index + offset < len(positional) and positional[index + offset] == parameter.arg:
                out |= self._value(argument)
                given = True
        for keyword in call.keywords:
            if keyword.arg == parameter.arg:
                out |= self._value(keyword.value)
                given = True
            elif keyword.arg is None:
                out.add(UNKNOWN)  # f(**kwargs)
                given = True
        return out if given else out | self._default(function, parameter)

    def _handed_to(self, function: ast.FunctionDef | ast.AsyncFunctionDef) -> frozenset[str]:
        """The library objects a function of this file is only handed to, as an argument of
        their methods (``accelerator.register_load_state_pre_hook(hook)``): what they call it
        with is what they were given. Empty when it is read otherwise too, or is a method."""
        names = self.parsed.names
        if names.class_of(function) is not None and self._takes_self(function):
            return frozenset()
        reads = [
            read
            for read in names.loads(function.name)
            if any(b.node is function for b in names.bindings_of(read))
        ]
        found: set[str] = set()
        for read in reads:
            call = names.parent.get(read)
            if isinstance(call, ast.keyword):
                call = names.parent.get(call)
            if not isinstance(call, ast.Call) or call.func is read:
                return frozenset()
            instances = (
                self._instances(call.func.value) if isinstance(call.func, ast.Attribute) else None
            )
            if not instances:
                return frozenset()
            found |= instances
        return frozenset(found)

    def _default(
        self, function: ast.FunctionDef | ast.AsyncFunctionDef, parameter: ast.arg
    ) -> set[Ref]:
        """What a parameter holds when a call does not pass it: its default's value."""
        arguments = function.args
        every = [*arguments.posonlyargs, *arguments.args]
        defaults = dict(zip(every[len(every) - len(arguments.defaults) :], arguments.defaults))
        defaults.update(
            (a, d) for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults) if d is not None
        )
        default = defaults.get(parameter)
        return set(self._value(default)) if default is not None else {UNKNOWN}

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
                and self.is_self(func.value)
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

    def _call(self, call: ast.Call) -> set[Ref]:
        """What a call may return: a model its constructor builds, what a function of this
        file returns, what a method of the receiver hands back, a library's answer."""
        found = self._built(call)
        if found is None:
            found = self._partial(call)
        if found is not None:
            return found
        func = call.func
        partial = self._partial_target(func)
        if partial is not None and (
            isinstance(partial[0], ast.Name) or self.parsed.names.qualified(partial[0])
        ):
            func = partial[0]  # ``f = partial(g, ...)``; ``f(x)`` is a call of ``g``
        for read in (self._on_receiver, self._of_this_file, self._unwrapped):
            found = read(call, func)
            if found is not None:
                return found
        if func is call.func and self.value_called(call):
            return {Returned(self.parsed.site_id(call) + CALL)}
        return self._by_name(call, func)

    def value_called(self, call: ast.Call) -> bool:
        """``shard_fn(model)``: a call of a name bound to a value (a parameter, an
        assignment), not to a function, class or import, that may be a function of the run
        (or a link to one): what it returns is what the functions the value may be return
        (``Returned`` of ``refs.CALL``, settled by the run)."""
        func = call.func
        if not isinstance(func, ast.Name) or self.parsed.names.qualified(func):
            return False
        bindings = self.parsed.names.bindings_of(func)
        if not bindings or any(b.kind not in ("assign", "param", "other") for b in bindings):
            return False
        return any(isinstance(r, (Function, Passed, Returned)) for r in self._value(func))

    def _built(self, call: ast.Call) -> set[Ref] | None:
        """A BF16 optimizer, a constructor's model (a factory), a factory's call."""
        if call in self.optimizers:
            return {self.optimizers[call]}
        if call in self.constructors:
            ref = self.constructors[call]
            return {Factory(ref)} if call in self.factories else {Built(ref)}
        made: set[Ref] = {Built(r.id) for r in self._value(call.func) if isinstance(r, Factory)}
        return made or None

    def _partial(self, call: ast.Call) -> set[Ref] | None:
        """``functools.partial(f, <n positional arguments>, ...)`` of a function of the run:
        ``f`` handed on with ``n`` arguments preset (a ``Function`` shifted by ``n``)."""
        if not (
            call.args
            and not isinstance(call.args[0], ast.Starred)
            and self.parsed.resolves_to(call.func, PARTIAL)
        ):
            return None
        target = self._value(call.args[0])
        if not any(isinstance(r, Function) for r in target):
            return None  # a library's function: its answer may be one of the arguments
        preset = len(call.args) - 1
        return {
            Function(r.name, r.preset + preset) if isinstance(r, Function) else r for r in target
        }

    def _on_receiver(self, call: ast.Call, func: ast.expr) -> set[Ref] | None:
        """``m.to(...)`` (the module itself), ``m.parameters()`` (a site on them is on it), a
        method of ``self``'s class."""
        if not isinstance(func, ast.Attribute):
            return None
        assumed = self.parsed.assumed
        if assumed.takes(RETURNS_SELF, func.attr, call) or assumed.takes(
            PARAMETER_ITERATORS, func.attr, call
        ):
            return set(self._value(func.value))
        if self.is_self(func.value):
            owner = self.parsed.names.class_of(call)
            if owner is not None:
                return self._method(owner, func.attr, set())
        return None

    def _of_this_file(self, call: ast.Call, func: ast.expr) -> set[Ref] | None:
        """A function of this file (what it returns), a class of it (an instance, whose fields
        are followed by name)."""
        if not isinstance(func, ast.Name):
            return None
        out: set[Ref] = set()
        bindings = self.parsed.names.bindings_of(func)
        for binding in bindings:
            if binding.kind == "def" and isinstance(binding.node, _FUNCTIONS):
                out |= self._returned(binding.node)
            elif binding.kind == "class" and binding.node in self.parsed.tree.body:
                out.add(Returned(f"{self.parsed.module_name}.{func.id}"))
        if out or (bindings and all(b.kind in ("def", "class") for b in bindings)):
            return out  # a function of this file that returns no model
        return None

    def _unwrapped(self, call: ast.Call, func: ast.expr) -> set[Ref] | None:
        """What the codemod wrote for ``x.module`` (``fsdp2_port.unwrapped(x)``): what
        ``x.module`` was."""
        qualified = self.parsed.names.qualified(func)
        if len(call.args) != 1 or call.keywords:
            return None
        for attribute, form in FSDP1_WRAPPED_ATTRIBUTES.items():
            if f"fsdp2_port.{form}" in qualified:
                key = self._key(call.args[0], f"{self.parsed.source(call.args[0])}.{attribute}")
                values = self._attributes.get(key, ()) if key is not None else ()
                return {r for value in values for r in self._value(value)}
        return None

    def _by_name(self, call: ast.Call, func: ast.expr) -> set[Ref]:
        """By what the callee's name resolves to: a builtin, a library object's method, a
        library's class or function, a function of another file of the run."""
        qualified = self.parsed.names.qualified(func)
        if qualified and qualified <= NO_MODEL_BUILTINS.members:
            return set()
        copy = self.parsed.site_id(call) + COPY
        if copy in self.copies:
            return {Returned(copy)}  # a new object holding the original's models
        if not qualified and isinstance(func, ast.Attribute):
            instances = self._instances(func.value)
            if instances:  # a library object's method: what it was given, or its arguments
                return {Given(i) for i in instances} | self._passed_through(call)
        if not qualified or any(q.startswith("builtins.") for q in qualified):
            return {UNKNOWN}  # a method of an object it cannot tie, or a builtin
        if all(self._modules.library(q) is not None for q in qualified):
            if all(self.spelled_as_class(q, call) for q in qualified):
                return {Instance(self.parsed.site_id(call))}  # a new object of a library class
            return self._passed_through(call)  # a library function: it may hand one back
        return {Returned(q) for q in qualified}

    def _passed_through(self, call: ast.Call) -> set[Ref]:
        """What a library function may hand back of its own: one of its arguments (wrapped,
        ``torch.compile(model)``), never a model of the run it was not given."""
        out: set[Ref] = set()
        for argument in [*call.args, *(k.value for k in call.keywords)]:
            value = argument.value if isinstance(argument, ast.Starred) else argument
            out |= {r for r in self._value(value) if not isinstance(r, Factory)}
        return out

    def from_library(self, expr: ast.AST) -> bool:
        """Every value ``expr`` may hold is an object a library made or handed back (an
        ``Accelerator``, what its methods return): its attributes are the library's."""
        return bool(self._instances(expr))

    def _instances(self, expr: ast.AST) -> frozenset[str]:
        """The library objects every value ``expr`` may hold is, or comes from
        (``Accelerator(...)``, what its methods return, their elements); empty when a value
        may be anything else."""
        refs = self._value(expr)
        if not refs or not all(isinstance(r, (Instance, Given)) for r in refs):
            return frozenset()
        return frozenset(r.id if isinstance(r, Instance) else r.instance for r in refs)  # type: ignore[union-attr]

    def _method(self, owner: ast.ClassDef, name: str, seen: set[ast.ClassDef]) -> set[Ref]:
        """What ``self.<name>(...)`` returns, looking in ``owner`` then its bases."""
        seen.add(owner)
        for item in owner.body:
            if isinstance(item, _FUNCTIONS) and item.name == name:
                return self._returned(item)
        out: set[Ref] = set()
        for base in owner.bases:
            local = self.local_class(base)
            if local is not None and local not in seen:
                out |= self._method(local, name, seen)
            else:
                out |= {Returned(f"{q}.{name}") for q in self.parsed.names.qualified(base)}
        return out

    def local_class(self, base: ast.expr) -> ast.ClassDef | None:
        if isinstance(base, ast.Name):
            for binding in self.parsed.names.bindings_of(base):
                if binding.kind == "class" and isinstance(binding.node, ast.ClassDef):
                    return binding.node
        return None

    def _returned(self, function: ast.AST) -> set[Ref]:
        """What ``function``'s return statements may give (a generator's: unknown)."""
        if function in self._generators():
            return {UNKNOWN}
        return {r for value in self._returns.get(function, ()) for r in self._value(value)}

    def _generators(self) -> frozenset[ast.AST | None]:
        """The functions of this file that yield (a call of one gives a generator)."""
        if self._generator_memo is None:
            names = self.parsed.names
            self._generator_memo = frozenset(
                names.function_of(node)
                for kind in (ast.Yield, ast.YieldFrom)
                for node in names.by_type[kind]
            )
        return self._generator_memo

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

    def exported_name(self, function: ast.AST) -> str | None:
        """The qualified name of a module-level function or a method of a module-level class
        (``_exported``: as other files, and ``summaries``, name it), else None."""
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
        if self.is_self(head):
            owner = self.parsed.names.class_of(node)
            if owner is not None:
                return owner, "self" + text[len(head.id) :]
        return self.parsed.names.function_of(node) or self.parsed.tree, text

    def is_self(self, node: ast.AST) -> bool:
        """The first parameter of the method ``node`` is in (``self`` by any name)."""
        if not isinstance(node, ast.Name):
            return False
        function = self.parsed.names.function_of(node)
        if not isinstance(function, _FUNCTIONS) or not self._takes_self(function):
            return False
        return syntax.positional(function)[0] == node.id
