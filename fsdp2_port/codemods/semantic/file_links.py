"""What one file tells the run: what its functions return and its classes' fields hold
(``exports``), how they are called (``signatures``), what it passes to other files' functions,
to library objects and to called values (``passes``), what it calls (``calls``), what its FSDP1
constructors wrap (``sharded``) and which function values it hands to code the analysis does not
follow (``escaping``); read from the file's value flow (``values.Ties``) and settled by the run
(``resolve.Resolver``)."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from fsdp2_port.codemods import syntax
from fsdp2_port.codemods.refs import (
    CALL,
    DISPATCHED,
    GIVEN_TO,
    UNKNOWN,
    Factory,
    Passing,
    Ref,
    groups_of,
)
from fsdp2_port.codemods.semantic import function_values, parts
from fsdp2_port.codemods.semantic.values import Ties

if TYPE_CHECKING:
    from fsdp2_port.codemods.names import Names

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


class FileLinks:
    def __init__(self, ties: Ties) -> None:
        self.ties = ties

    def exports(self) -> dict[str, frozenset[Ref]]:
        """Qualified names of this file's functions and methods -> what their calls return; its
        classes' fields, the elements its functions' tuples unpack into, its copies
        (``refs.COPY``) -> what they hold; its calls of values (``refs.CALL``) -> what the
        called value may be."""
        out = {
            name: self.ties._returned(function) for name, function in self.ties._exported().items()
        }
        out.update(self._fields())
        out.update(self._elements())
        out.update({name: set(self.ties._value(x)) for name, x in self.ties.copies.items()})
        out.update(self._called_values())
        return {k: frozenset(r for r in v if not isinstance(r, Factory)) for k, v in out.items()}

    def _called_values(self) -> dict[str, set[Ref]]:
        """``path:line:column`` + ``refs.CALL`` -> what the value a call calls may be
        (``Ties.value_called``): the run settles what the call returns from it."""
        return {
            self.ties.parsed.site_id(call) + CALL: set(self.ties._value(call.func))
            for call in self.ties.parsed.names.by_type[ast.Call]
            if isinstance(call, ast.Call) and self.ties.value_called(call)
        }

    def _elements(self) -> dict[str, set[Ref]]:
        """``module.f[i/n]`` -> what element ``i`` of a call of ``f`` holds when unpacked into
        ``n`` names, for each size ``n`` of a tuple ``f`` returns (``parts.tuple_element``)."""
        out: dict[str, set[Ref]] = {}
        for name, function in self.ties._exported().items():
            if function in self.ties._generators():
                continue
            returns = self.ties._returns.get(function, ())
            for size in {len(r.elts) for r in returns if isinstance(r, ast.Tuple)}:
                for index in range(size):
                    out[f"{name}[{index}/{size}]"] = {
                        ref
                        for value in returns
                        for ref in parts.tuple_element(self.ties, value, index, size)
                    }
        return out

    def _fields(self) -> dict[str, set[Ref]]:
        """``module.Class#attr`` -> what the methods of this file's module-level classes
        assign to ``self.attr`` (what an instance's ``x.attr`` holds elsewhere)."""
        module = self.ties.parsed.module_name
        out: dict[str, set[Ref]] = {}
        if not module:
            return out
        classes = {c: c.name for c in self.ties.parsed.tree.body if isinstance(c, ast.ClassDef)}
        for (owner, text), values in self.ties._attributes.items():
            if owner in classes and text.count(".") == 1 and text.startswith("self."):
                name = f"{module}.{classes[owner]}#{text[len('self.') :]}"
                out[name] = {r for value in values for r in self.ties._value(value)}
        for owner, name in classes.items():
            params = self._optimizer_params(owner)
            if params is not None:
                groups = out.setdefault(groups_of(f"{module}.{name}"), set())
                groups.update(r for p in params for r in self.ties._value(p))
        return out

    def _optimizer_params(self, owner: ast.ClassDef) -> list[ast.expr] | None:
        """What the methods of ``owner`` hand its bases' ``__init__`` (None: nothing): a torch
        optimizer's parameters (``SGD.__init__(self, params, ...)``, ``super().__init__(params,
        ...)`` in a class whose first base is one), or, to any other base, every argument:
        what its instances' ``param_groups`` may hold."""
        names = self.ties.parsed.names
        first = names.qualified(owner.bases[0]) if owner.bases else frozenset()
        found: list[ast.expr] | None = None
        for call in names.by_type[ast.Call]:
            assert isinstance(call, ast.Call)
            func = call.func
            if not (isinstance(func, ast.Attribute) and func.attr == "__init__"):
                continue
            if names.class_of(call) is not owner:
                continue
            args = list(call.args)
            if _super(names, func.value):
                base = first
            else:
                base = names.qualified(func.value)
                args = args[1:]  # self
                if not base:
                    continue  # not a class's __init__ by its name
            if _torch_optimizer(base):
                given = args[:1] or [k.value for k in call.keywords if k.arg == "params"]
            else:
                given = [*args, *(k.value for k in call.keywords)]
            found = (found or []) + given
        return found

    def signatures(self) -> dict[str, tuple[str, ...]]:
        """Qualified names of this file's functions and methods -> the names their positional
        arguments bind to, as other files call them (``self`` left out)."""
        return {
            name: tuple(syntax.positional(function)[1 if self.ties._takes_self(function) else 0 :])
            for name, function in self.ties._exported().items()
        }

    def passes(self) -> list[Passing]:
        """``(callee, position or keyword, refs)`` for each model this file passes to a
        function of another file (``save(model)``, ``Trainer(model=model)``), to a library
        object's method, or to a method of an object of no known class (``receiver``)."""
        out: list[Passing] = []
        for call in self.ties.parsed.names.by_type[ast.Call]:
            assert isinstance(call, ast.Call)
            if call not in self.ties.constructors:
                out += self._passing(call)
        return out

    def escaping(self) -> frozenset[Ref]:
        """What this file hands, of what may be a function value, to code the analysis does
        not follow (``function_values.escaping``)."""
        return function_values.escaping(self.ties)

    def _passing(self, call: ast.Call) -> list[Passing]:
        func, arguments, preset = syntax.unsubscripted(call.func), call.args, 0
        partial = self.ties._partial_target(func)
        if partial is not None:
            func, preset = partial
        elif function_values.presets(self.ties, call):  # partial(f, x): x is passed to f
            func, arguments = call.args[0], call.args[1:]
        callees, receiver = self._callees(func)
        if not callees or any(c.startswith("builtins.") for c in callees):
            return []
        out = []
        if receiver and not (call.args or call.keywords):  # called: its method is called
            out.append(Passing(next(iter(callees)), "", frozenset(), receiver))
        slots: list[tuple[int | str, ast.AST]] = []
        for index, argument in enumerate(arguments):
            if isinstance(argument, ast.Starred):
                break
            slots.append((index + preset, argument))
        slots += [(k.arg, k.value) for k in call.keywords if k.arg is not None]
        for slot, value in slots:
            refs = frozenset(r for r in self.ties._value(value) if not isinstance(r, Factory))
            if refs:
                out += [Passing(callee, slot, refs, receiver) for callee in callees]
        return out

    def _callees(self, func: ast.expr) -> tuple[frozenset[str], frozenset[Ref]]:
        """The names a call's ``func`` calls (a library object's method: ``GIVEN_TO`` its
        instance; a method of an object of no known class: ``DISPATCHED`` its name, with what
        the object may be)."""
        callees = self.ties.parsed.names.qualified(func)
        if callees or self._local_callees(func):
            return callees, frozenset()
        if not isinstance(func, ast.Attribute) or self.ties.is_self(func.value):
            return function_values.called(self.ties, func)  # shard_fn(model), self.fn(model)
        bases = self._super_bases(func.value)
        if bases:  # super().__init__(model): the bases' method
            return frozenset(f"{b}.{func.attr}" for b in bases), frozenset()
        instances = self.ties._instances(func.value)
        if instances:
            return frozenset(f"{GIVEN_TO}{i}" for i in instances), frozenset()
        return frozenset({f"{DISPATCHED}{func.attr}"}), self.ties._value(func.value)

    def _super_bases(self, value: ast.expr) -> frozenset[str]:
        """``super()`` (or ``super(C, self)``) in a method: the qualified names of the bases
        of its class that name one (an import, a class of this module)."""
        names = self.ties.parsed.names
        if not (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Name)
            and value.func.id == "super"
            and "builtins.super" in names.qualified(value.func)
        ):
            return frozenset()
        owner = names.class_of(value)
        if owner is None:
            return frozenset()
        module = self.ties.parsed.module_name
        found: set[str] = set()
        for base in owner.bases:
            qualified = names.qualified(base)
            if not qualified and isinstance(base, ast.Name) and module:
                if any(b.kind == "class" for b in names.bindings_of(base)):
                    qualified = frozenset({f"{module}.{base.id}"})
            found |= qualified
        return frozenset(found)

    def sharded(self) -> frozenset[Ref]:
        """What the modules this file's FSDP1 constructors wrap may hold (a constructor's
        first argument, or a factory's call's): under FSDP2 these objects are sharded in
        place."""
        out: set[Ref] = set()
        names = self.ties.parsed.names
        for call in names.by_type[ast.Call]:
            assert isinstance(call, ast.Call)
            if call in self.ties.factories:
                continue
            built = call in self.ties.constructors or any(
                isinstance(r, Factory) for r in self.ties._value(call.func)
            )
            if built:
                out |= self._wrapped(call)
        return frozenset(r for r in out if not isinstance(r, Factory))

    def wraps(self) -> dict[str, frozenset[Ref]]:
        """Each FSDP1 constructor call's id -> what the module it wraps may hold."""
        return {
            cid: frozenset(r for r in self._wrapped(call) if not isinstance(r, Factory))
            for call, cid in self.ties.constructors.items()
            if call not in self.ties.factories
        }

    def _wrapped(self, call: ast.Call) -> frozenset[Ref]:
        module = call.args[0] if call.args else None
        module = next((k.value for k in call.keywords if k.arg == "module"), module)
        return self.ties._value(module) if module is not None else frozenset({UNKNOWN})

    def calls(self) -> frozenset[str]:
        """The qualified names this file calls (a function of another file, a library's)."""
        out: set[str] = set()
        for call in self.ties.parsed.names.by_type[ast.Call]:
            assert isinstance(call, ast.Call)
            func = syntax.unsubscripted(call.func)
            partial = self.ties._partial_target(func)
            func = partial[0] if partial is not None else func
            out |= self.ties.parsed.names.qualified(func)
            out |= {name for f in self._local_callees(func) if (name := self.ties.exported_name(f))}
        return frozenset(q for q in out if not q.startswith("builtins."))

    def _local_callees(self, func: ast.expr) -> list[ast.AST]:
        """The functions of this file a call's ``func`` names: a def's name, a method called on
        ``self``, a class's ``__init__`` by the class's name."""
        names = self.ties.parsed.names
        if isinstance(func, ast.Name):
            found: list[ast.AST] = []
            for binding in names.bindings_of(func):
                if binding.kind == "def":
                    found.append(binding.node)
                elif binding.kind == "class" and isinstance(binding.node, ast.ClassDef):
                    found += [
                        f
                        for f in binding.node.body
                        if isinstance(f, _FUNCTIONS) and f.name == "__init__"
                    ]
            return found
        if isinstance(func, ast.Attribute) and self.ties.is_self(func.value):
            owner = names.class_of(func)
            if owner is not None:
                return [f for f in owner.body if isinstance(f, _FUNCTIONS) and f.name == func.attr]
        return []


def _torch_optimizer(qualified: frozenset[str]) -> bool:
    """A class of ``torch.optim`` (``SGD``, ``AdamW``, ``Optimizer``): its ``__init__`` takes the
    parameters first."""
    return bool(qualified) and all(q.startswith("torch.optim.") for q in qualified)


def _super(names: Names, expr: ast.AST) -> bool:
    """``super()`` or ``super(C, self)``."""
    return isinstance(expr, ast.Call) and "builtins.super" in names.qualified(expr.func)
