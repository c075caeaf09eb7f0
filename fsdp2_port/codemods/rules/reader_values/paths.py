"""F2P013's value paths: where a value goes from where the program builds it, and whether every
way ends in a slot that takes it without FSDP1 (``_Paths.reaches_only``)."""

from __future__ import annotations

import ast
from collections.abc import Callable

from fsdp2_port.codemods import calls, flow
from fsdp2_port.codemods.assumptions import LOG_METHODS
from fsdp2_port.codemods.local_names import opaque_scopes, seen_only_here, visible_only_here
from fsdp2_port.codemods.names import Names, Scope
from fsdp2_port.codemods.rules.reader_values.across import Across, _accepting
from fsdp2_port.codemods.rules.reader_values.attributes import (
    attribute_loads,
    class_body_binding,
    own_attribute_reads,
)
from fsdp2_port.codemods.rules.reader_values.members import _field_read, _tested_kind
from fsdp2_port.codemods.rules.reader_values.policies import _growing
from fsdp2_port.codemods.rules.reader_values.slots import POLICY, _in_fsdp1_call_shape, _reader_kind
from fsdp2_port.codemods.rules.reader_values.tree import (
    _called_on,
    _defaulted,
    _reads,
    _tested_for_none,
    _text_key,
    _top_import,
)
from fsdp2_port.codemods.text import LineIndex

from ...assumed import either_way


class _Paths:
    """Where values go, memoised (a cycle counts as reaching nothing)."""

    def __init__(
        self,
        names: Names,
        lines: LineIndex,
        either: set[ast.expr],
        accepts: Across,
        called_as_policy: bool = False,
    ) -> None:
        self.names = names
        self.lines = lines
        #: A call of the value in FSDP1's call shape, ``policy(module, recurse,
        #: nonwrapped_numel)``, ends its path (for values written in that shape).
        self.called_as_policy = called_as_policy
        #: What other files' functions take without FSDP1 (``accepting``).
        self.accepts = accepts
        #: The or-policies that may be written as predicates: other lists lead nowhere.
        self.either = either
        self.memo: dict[object, bool] = {}
        self.loads_by_attribute: dict[str, list[ast.Attribute] | None] | None = None
        #: ``return``s of public functions a policy leaves by (``_returned``): written in
        #: FSDP1's call shape (``fsdp2_port.auto_wrap_policy``) where the policy is written
        self.escapes: set[ast.Return] = set()

    def reaches_only(self, node: ast.expr, kind: str) -> bool:
        """Whether every use of ``node``'s value is a reader's slot for ``kind``."""
        return self._memo(("value", node, kind), lambda: self._value(node, kind))

    def _memo(self, key: object, compute: Callable[[], bool]) -> bool:
        if key not in self.memo:
            self.memo[key] = False  # while computing: a cycle reaches no reader
            self.memo[key] = compute()
        return self.memo[key]

    def _value(self, node: ast.expr, kind: str) -> bool:
        if self._logged(node):
            return True
        parent = self.names.parent.get(node)
        if _tested_for_none(node, parent):
            return True  # neither spelling is None
        if isinstance(parent, (ast.Tuple, ast.List, ast.Set)):
            if _tested_kind(self.names, self.names.parent.get(parent)) == kind:
                return True  # one of the members of ``x in (A, B)``
        if _tested_kind(self.names, parent) == kind:
            return True  # compared by name (``member_name``): either spelling compares alike
        if isinstance(parent, ast.Attribute) and _field_read(self.names, self.lines, parent, kind):
            return True  # ``v.param_dtype`` -> ``v["param_dtype"]`` (``_field_reads``)
        if isinstance(parent, ast.IfExp) and node is not parent.test:
            return self.reaches_only(parent, kind)
        if isinstance(parent, ast.Dict) and any(node is v for v in parent.values):
            key = parent.keys[[id(v) for v in parent.values].index(id(node))]
            return self._dict(parent, kind, _text_key(key))
        if isinstance(parent, (ast.List, ast.Tuple)) and kind == POLICY:
            return self._in_or_list(parent)
        if (
            self.called_as_policy
            and isinstance(parent, ast.Call)
            and parent.func is node
            and _in_fsdp1_call_shape(parent)
        ):
            return True  # harold's ``size_policy(module, recurse, nonwrapped_numel)``
        if isinstance(parent, ast.Call) and parent.args[1:] == [node] and self._dict_get(parent):
            return self.reaches_only(parent, kind)  # d.get(key, value): the value, or d's
        if isinstance(parent, ast.Call) and any(node is a for a in parent.args):
            appended = _called_on(parent, "append")
            if appended is not None and kind == POLICY:
                return self._or_list_name(appended)
            return self._argument(parent, kind, position=parent.args.index(node))
        if isinstance(parent, ast.Return) and parent.value is node:
            return self._returned(
                node, ("returned", kind), lambda c: self.reaches_only(c, kind), kind == POLICY
            )
        if isinstance(parent, ast.keyword) and parent.arg is not None:
            call = self.names.parent.get(parent)
            if not isinstance(call, ast.Call):
                return False
            if self.names.qualified(call.func) == {"builtins.dict"} and not call.args:
                return self._dict(call, kind, parent.arg)  # dict(key=value)
            updated = _called_on(call, "update")
            if updated is not None:
                return self._dict_name(updated, kind, parent.arg)  # d.update(key=value)
            return self._argument(call, kind, keyword=parent.arg)
        if isinstance(parent, (ast.Assign, ast.AnnAssign)) and parent.value is node:
            if isinstance(parent, ast.Assign) and len(parent.targets) != 1:
                return False
            target = parent.targets[0] if isinstance(parent, ast.Assign) else parent.target
            if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
                stored = _text_key(target.slice)  # d["key"] = value
                return stored is not None and self._dict_name(target.value, kind, stored)
            if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Attribute):
                stored = _text_key(target.slice)  # obj.d["key"] = value
                return stored is not None and self._attribute(target.value, kind, stored)
            if isinstance(target, ast.Attribute) or (
                isinstance(target, ast.Name)
                and isinstance(self.names.scope_of(target).node, ast.ClassDef)
            ):
                return self._attribute(target, kind)  # self.x = value, or x = value in a class
            return isinstance(target, ast.Name) and self._reads_pass(
                self.names.scope_of(target),
                target.id,
                kind,
                lambda read: self.reaches_only(read, kind),
                since=target,
            )
        if isinstance(parent, ast.arguments):
            argument = _defaulted(parent, node)
            return argument is not None and self.parameter_takes(parent, argument, kind, None)
        return False

    def _dict_get(self, call: ast.Call) -> bool:
        """``d.get(key, default)`` on a name bound once, to a dict written out: what it returns
        is one of the dict's values or the default."""
        mapping = _called_on(call, "get")
        if mapping is None or len(call.args) != 2 or call.keywords:
            return False
        bound = self.names.bindings_of(mapping)
        return len(bound) == 1 and isinstance(bound[0].value, ast.Dict)

    def _attribute(
        self, target: ast.Attribute | ast.Name, kind: str, key: str | None = None
    ) -> bool:
        """``self.x = value`` (or ``x = value`` in the class body; with ``key``, a dict holding
        the value under it, or ``obj.x[key] = value``) where only the class reads ``x``
        (``own_attribute_reads``), or every file of the run that reads ``.x`` takes it to
        readers (``_across``): each of its reads continues the path (any method may run after
        any other: every read)."""

        def compute() -> bool:
            reads = own_attribute_reads(self.names, target)
            if reads is None:
                return self._across(target, attr, kind, key)
            return all(self._continues(r, kind, key) for r in reads)

        owner = self.names.class_of(target)
        attr = target.attr if isinstance(target, ast.Attribute) else target.id
        return self._memo(("attribute", owner, attr, kind, key), compute)

    def _continues(self, read: ast.expr, kind: str, key: str | None) -> bool:
        return self.reaches_only(read, kind) if key is None else self._dict(read, kind, key)

    def _across(
        self, target: ast.Attribute | ast.Name, attr: str, kind: str, key: str | None
    ) -> bool:
        """An attribute other files of the run read too (a base class's settings a script
        changes, StableCascade's ``fsdp_defaults``): no code outside the run reads it (a
        private name, or ``--whole-program``), every file that reads ``.x`` or spells ``"x"``
        (``Visibility.attributes_shared``) told what its reads take (``accepts.attributes``)
        and takes this, and so does every ``.x`` read here, on whatever object (an attribute
        of that name anywhere). A class that binds it has no decorator (a dataclass's fields
        are read by name)."""
        if not (attr.startswith("_") or self.names.seen.whole_program):
            return False
        if isinstance(target, ast.Name):
            owner = class_body_binding(self.names, target)
        else:
            owner = self.names.class_of(target)
        if owner is not None and owner.decorator_list:
            return False
        others = {
            module: taken
            for module, taken in self.accepts.attributes.get(attr, {}).items()
            if module != self.names.module_name
        }
        if len(others) != self.names.seen.attributes_shared.get(attr, 0):
            return False  # a file that reads it told nothing (no readers there, or unread)
        return all((kind, key) in taken for taken in others.values()) and self.attribute_takes(
            attr, kind, key
        )

    def attribute_loads(self) -> dict[str, list[ast.Attribute] | None]:
        if self.loads_by_attribute is None:
            self.loads_by_attribute = attribute_loads(self.names)
        return self.loads_by_attribute

    def attribute_takes(self, attr: str, kind: str, key: str | None) -> bool:
        """Every ``.attr`` this module reads (``attributes.attribute_loads``) takes a value of
        ``kind`` (under ``key`` of a dict) to readers."""

        def compute() -> bool:
            reads = self.attribute_loads().get(attr, [])
            return reads is not None and all(self._continues(r, kind, key) for r in reads)

        return self._memo(("attribute reads", attr, kind, key), compute)

    def _logged(self, node: ast.expr) -> bool:
        """``node`` is shown by a log line: an argument of ``print`` or of a logger's method
        (``logger.info``), or formatted into an f-string that is one. Only its text changes."""
        parent = self.names.parent.get(node)
        if isinstance(parent, ast.FormattedValue) and parent.value is node:
            joined = self.names.parent.get(parent)
            return isinstance(joined, ast.JoinedStr) and self._logged(joined)
        if not (isinstance(parent, ast.Call) and any(node is a for a in parent.args)):
            return False
        func = parent.func
        return self.names.qualified(func) == {"builtins.print"} or (
            isinstance(func, ast.Attribute) and either_way(LOG_METHODS, func.attr)
        )

    # -- dicts: a lookup table of values, or the keyword arguments of a call ---------------------
    def _dict(self, mapping: ast.expr, kind: str, key: str | None) -> bool:
        """A dict expression holding the value under ``key`` (None: a key not written out):
        every way it is read lets the value reach only readers' slots for ``kind``."""
        return self._memo(("dict", mapping, kind, key), lambda: self._dict_read(mapping, kind, key))

    def _dict_read(self, mapping: ast.expr, kind: str, key: str | None) -> bool:
        if self._logged(mapping):
            return True
        parent = self.names.parent.get(mapping)
        if isinstance(parent, ast.Subscript) and parent.value is mapping:
            if isinstance(parent.ctx, ast.Store):
                return True  # a write
            asked = _text_key(parent.slice)
            return (asked is not None and asked != key) or self.reaches_only(parent, kind)
        if isinstance(parent, ast.Attribute) and parent.value is mapping:
            call = self.names.parent.get(parent)
            if not (isinstance(call, ast.Call) and call.func is parent):
                return False
            if parent.attr == "update":
                return not call.args  # keywords only: writes
            if parent.attr == "get" and call.args:
                asked = _text_key(call.args[0])
                return (asked is not None and asked != key) or self.reaches_only(call, kind)
            return False
        if (
            isinstance(parent, ast.Call)
            and parent.args
            and parent.args[0] is mapping
            and "fsdp2_port.kwargs_as_migrated" in self.names.qualified(parent.func)
        ):
            return self._dict(parent, kind, key)  # the same mapping, its keys checked
        if isinstance(parent, ast.keyword) and parent.arg is None:  # **mapping
            call = self.names.parent.get(parent)
            return (
                key is not None
                and isinstance(call, ast.Call)
                and self._argument(call, kind, keyword=key)
            )
        if isinstance(parent, ast.keyword):  # f(x=mapping): a parameter that takes the dict
            call = self.names.parent.get(parent)
            return isinstance(call, ast.Call) and self._argument(
                call, kind, keyword=parent.arg, key=key
            )
        if isinstance(parent, ast.Call) and any(mapping is a for a in parent.args):
            position = [id(a) for a in parent.args].index(id(mapping))
            return self._argument(parent, kind, position=position, key=key)
        if isinstance(parent, ast.Assign) and len(parent.targets) == 1 and parent.value is mapping:
            target = parent.targets[0]
            if isinstance(target, ast.Attribute) or (
                isinstance(target, ast.Name)
                and isinstance(self.names.scope_of(target).node, ast.ClassDef)
            ):
                return self._attribute(target, kind, key)  # self.d = {...}, d = {...} in a class
            return isinstance(target, ast.Name) and self._dict_name(target, kind, key)
        if isinstance(parent, ast.Return) and isinstance(mapping, ast.Name):
            return self._returned(
                mapping, ("returned", kind, key), lambda call: self._dict(call, kind, key)
            )
        return False

    def _dict_name(self, name: ast.Name, kind: str, key: str | None) -> bool:
        """A name bound to the dict: each of its reads passes ``_dict`` (a write through it,
        ``d["k"] = v`` or ``d.update(k=v)``, passes)."""
        scope = self.names.lookup(name.id, self.names.scope_of(name))[0]
        return scope is not None and self._reads_pass(
            scope, name.id, ("dict", kind, key), lambda read: self._dict(read, kind, key)
        )

    def _returned(
        self,
        value: ast.expr,
        what: object,
        each_call: Callable[[ast.Call], bool],
        escapes: bool = False,
    ) -> bool:
        """``return value`` from a function defined here (no decorator, not a generator):
        every read of the function's name calls it, and ``each_call`` holds for each call.
        With ``escapes`` (a policy), a public function of an importable module may also
        return it, to callers the run does not see: its calls here must pass, and the
        returned value (the policy itself, or a name bound once to it) is written in FSDP1's
        call shape (``self.escapes``)."""
        function = self.names.function_of(value)
        if not isinstance(function, ast.FunctionDef) or function.decorator_list:
            return False
        if any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in ast.walk(function)):
            return False
        scope = self.names.scope_of(function)

        def called(read: ast.Name) -> bool:
            call = self.names.parent.get(read)
            return isinstance(call, ast.Call) and call.func is read and each_call(call)

        if escapes and self._escapes(value, scope, function.name):
            reads = [r for r in _reads(self.names, scope, function.name) if r in self.names.parent]
            if all(called(r) for r in reads):
                self.escapes.add(self.names.parent[value])  # type: ignore[arg-type]
                return True
            return False
        return self._reads_pass(scope, function.name, what, called)

    def _escapes(self, value: ast.expr, scope: Scope, function: str) -> bool:
        """``return value`` leaves the run: a public function of an importable module (bound
        once, at module level, in a scope the names see through), returning the policy
        itself or a name bound once, in a module that imports at its top (``import
        fsdp2_port`` goes there)."""
        if not isinstance(scope.node, ast.Module) or _top_import(scope.node) is None:
            return False
        if visible_only_here(self.names, scope, function):
            return False  # private: every call is here, ``_reads_pass`` decides
        if scope.node in opaque_scopes(self.names, function):
            return False
        defined = [s for s in scope.node.body if getattr(s, "name", None) == function]
        if len(defined) != 1:
            return False
        if isinstance(value, ast.Name):
            bound = self.names.bindings_of(value)
            return len(bound) == 1 and bound[0].value is not None
        return True

    # -- or-policies: a list of policies that ``partial(_or_policy, policies=...)`` combines ------
    def _in_or_list(self, listed: ast.List | ast.Tuple) -> bool:
        """A list or tuple of policies: the ``policies`` of an or-policy that is written as a
        predicate, bound to a name that is (``_or_list_name``), or added by ``.extend`` to
        one."""
        if self._combined(listed):
            return True
        parent = self.names.parent.get(listed)
        if isinstance(parent, ast.Assign) and parent.value is listed and len(parent.targets) == 1:
            target = parent.targets[0]
            return isinstance(target, ast.Name) and self._or_list_name(target)
        if isinstance(parent, ast.Call) and parent.args == [listed]:
            extended = _called_on(parent, "extend")
            return extended is not None and self._or_list_name(extended)
        return False

    def _or_list_name(self, name: ast.Name) -> bool:
        """A list name whose reads only grow it or are the ``policies`` of a written
        or-policy."""
        scope = self.names.lookup(name.id, self.names.scope_of(name))[0]
        return scope is not None and self._reads_pass(
            scope, name.id, "or-list", lambda read: self._or_list_read(read)
        )

    def _or_list_read(self, read: ast.Name) -> bool:
        return self._combined(read) or _growing(self.names, read) is not None

    def _combined(self, node: ast.expr) -> bool:
        """``node`` is the ``policies`` of an or-policy that may be written as a predicate
        (``_either``; ``find`` refuses one when a policy it combines is not written too) and
        whose value reaches only readers' policy slots."""
        keyword = self.names.parent.get(node)
        if not (isinstance(keyword, ast.keyword) and keyword.arg == "policies"):
            return False
        call = self.names.parent.get(keyword)
        return (
            isinstance(call, ast.Call) and call in self.either and self.reaches_only(call, POLICY)
        )

    def _argument(
        self,
        call: ast.Call,
        kind: str,
        position: int | None = None,
        keyword: str | None = None,
        key: str | None = None,
    ) -> bool:
        """A reader's slot for ``kind``, or the parameter it fills of a function defined here
        or of one another file defines that takes it (``accepts``); ``key``: the value is a
        dict's, under that key."""
        slots = _reader_kind(self.names, call)
        if slots is not None:
            return key is None and any(
                k == kind and (position == p or keyword == w) for k, p, w in slots
            )
        if any(isinstance(a, ast.Starred) for a in call.args):
            return False
        if any(k.arg is None for k in call.keywords):
            return False
        accepting = _accepting(self.names, call, self.accepts)
        if accepting is not None:
            if position is not None:
                if position >= len(accepting.positional):
                    return False
                keyword = accepting.positional[position]
            return (kind, key) in accepting.takes.get(keyword or "", frozenset())
        function = self._defined_here(call) or self._own_method(call)
        if function is None:
            return False
        if position is not None and isinstance(call.func, ast.Attribute):
            position += 1  # after ``self``
        parameter = calls.parameter_for(function.args, position, keyword)
        return parameter is not None and self.parameter_takes(function.args, parameter, kind, key)

    def _defined_here(self, call: ast.Call) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        """The ``def`` a call's plain name is bound to, bound once (no decorator)."""
        if not isinstance(call.func, ast.Name):
            return None
        bindings = self.names.bindings_of(call.func)
        if len(bindings) != 1 or bindings[0].kind != "def":
            return None
        function = bindings[0].node
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return None
        return None if function.decorator_list else function

    def _own_method(self, call: ast.Call) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        """The method ``self._name(...)`` calls from another method of its class: defined
        once in that class's body, private (a subclass elsewhere is not expected to replace
        it), no decorator, on the caller's own first parameter."""
        func = call.func
        if not (
            isinstance(func, ast.Attribute)
            and func.attr.startswith("_")
            and not func.attr.startswith("__")
            and isinstance(func.value, ast.Name)
        ):
            return None
        caller = self.names.function_of(call)
        owner = self.names.parent.get(caller) if caller is not None else None
        if not (
            isinstance(caller, (ast.FunctionDef, ast.AsyncFunctionDef))
            and isinstance(owner, ast.ClassDef)
            and not caller.decorator_list
            and caller.args.args
            and caller.args.args[0].arg == func.value.id
        ):
            return None
        scope = self.names.scopes.get(owner)
        bound = scope.bindings.get(func.attr, []) if scope is not None else []
        if len(bound) != 1 or bound[0].kind != "def":
            return None
        method = bound[0].node
        if not isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return None
        return None if method.decorator_list or not method.args.args else method

    def _reads_pass(
        self,
        scope: Scope,
        name: str,
        what: object,
        each_read: Callable[[ast.Name], bool],
        since: ast.Name | ast.arg | None = None,
    ) -> bool:
        """``name``, bound in ``scope``, is visible only here (a local, a parameter, a private
        or script module-level name) and ``each_read`` holds for each of its reads (none: the
        value reaches nothing, and nothing can notice its spelling); with ``since`` (one
        binding: a name stored, a parameter), each read that binding may reach
        (``flow.may_reach``); memoised per ``what`` (what ``each_read`` asks)."""

        def compute() -> bool:
            if not seen_only_here(self.names, scope, name):
                return False
            reads = [
                read
                for read in _reads(self.names, scope, name)
                if since is None
                or read not in self.names.parent
                or flow.may_reach(self.names, self.lines, since, read)
            ]
            return all(each_read(r) for r in reads)

        return self._memo(("reads", scope.node, name, what, since), compute)

    def parameter_takes(
        self, arguments: ast.arguments, argument: ast.arg, kind: str, key: str | None
    ) -> bool:
        """Whether every read of the parameter takes a value of ``kind`` to a reader (with
        ``key``: a dict holding it under that key)."""
        function = self.names.parent.get(arguments)
        scope = self.names.scopes.get(function) if function is not None else None
        if scope is None:
            return False
        if key is None:
            return self._reads_pass(
                scope, argument.arg, kind, lambda r: self.reaches_only(r, kind), since=argument
            )
        what = ("dict", kind, key)
        return self._reads_pass(
            scope, argument.arg, what, lambda r: self._dict(r, kind, key), since=argument
        )
