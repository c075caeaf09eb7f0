"""F2P013's analysis: the FSDP1 values of a file that reach only readers (``find``) and what
the file's functions and attribute reads take (``accepting``); what it does:
``fsdp2_port.codemods.rules.reader_values.rule``."""

from __future__ import annotations

import ast

from fsdp2_port.codemods import markers
from fsdp2_port.codemods.names import Names
from fsdp2_port.codemods.rules.reader_values.across import Accepting, Across, _accepting
from fsdp2_port.codemods.rules.reader_values.members import (
    _compared,
    _configs,
    _field_reads,
    _members,
)
from fsdp2_port.codemods.rules.reader_values.paths import _Paths
from fsdp2_port.codemods.rules.reader_values.policies import (
    _bare_policies,
    _nested_in_place,
    _policies,
    _returned_in_call_shape,
)
from fsdp2_port.codemods.rules.reader_values.slots import _CANDIDATES, _reader_kind
from fsdp2_port.codemods.rules.reader_values.written import Written, _grouped
from fsdp2_port.codemods.text import LineIndex


def find(names: Names, lines: LineIndex, accepts: Across | None = None) -> list[Written]:
    """Each FSDP1 value of the text that reaches only readers' slots of its kind (``accepts``:
    what other files' functions and attribute reads take to readers, ``accepting``)."""
    accepts = accepts or Across()
    if not _concerned(names, accepts):
        return []  # FSDP1 values stay as the user left them
    ignored = markers.ignored_lines(lines.text)
    candidates = [
        written
        for written in [
            *_members(names, lines),
            *_policies(names, lines),
            *_bare_policies(names, lines),
            *_configs(names, lines),
        ]
        if written.node.lineno not in ignored
    ]
    either = {w.node for w in candidates if w.members}
    refused: set[ast.expr] = set()
    while True:
        walk = _Paths(names, lines, either - refused, accepts)
        called = _Paths(names, lines, either - refused, accepts, called_as_policy=True)
        chosen = [
            w
            for w in candidates
            if w.node not in refused
            and (called if w.call_shape else walk).reaches_only(w.node, w.kind)
        ]
        predicates = {w.node for w in chosen if w.condition is not None}
        broken = {w.node for w in chosen if not set(w.members) <= predicates}
        compared, tangled = _compared(names, lines, chosen)
        fields, mixed = _field_reads(names, lines, chosen)
        tangled |= mixed
        if not broken | tangled:
            chosen = [compared.get(w.node, w) for w in chosen]
            written = [_grouped(names, w) for w in _nested_in_place(lines, chosen)]
            written = _returned_in_call_shape(names, lines, written, walk.escapes)
            return [*written, *(w for w in compared.values() if w not in chosen), *fields]
        refused |= broken  # an or-policy with a member kept as it is: all of it stays
        refused |= tangled


def _concerned(names: Names, accepts: Across) -> bool:
    """The module has FSDP2 code (a reader, or a call of another file's function that takes
    values to readers), or reads or binds an attribute other files' readers read."""
    shared = accepts.attributes.keys() if accepts.readers else frozenset()
    return (
        any(
            _reader_kind(names, call)
            or (isinstance(call, ast.Call) and _accepting(names, call, accepts))
            for call in names.by_type[ast.Call]
        )
        or any(getattr(node, "attr", None) in shared for node in names.by_type[ast.Attribute])
        or any(
            isinstance(scope.node, ast.ClassDef) and not shared.isdisjoint(scope.bindings)
            for scope in names.scopes.values()
        )
    )


def accepting(names: Names, lines: LineIndex) -> Across:
    """The module's functions (and classes, by ``__init__``) whose parameters take a kind of
    FSDP1 value only to readers, by qualified name: module-level, bound once, no decorator;
    and what its reads of each attribute name take to readers. Calls from other files may then
    pass FSDP1's values written without FSDP1, and other files store them in attributes that
    only readers read (``find``)."""
    walk = _Paths(names, lines, set(), Across())
    attributes = {}
    for attr, reads in walk.attribute_loads().items():
        if not reads or not (attr.startswith("_") or names.seen.whole_program):
            continue  # told nothing: a file that reads it so keeps the values as they are
        taken = frozenset(c for c in _CANDIDATES if walk.attribute_takes(attr, *c))
        if taken:
            attributes[attr] = {names.module_name: taken}
    calls = names.by_type[ast.Call]
    readers = any(_reader_kind(names, call) for call in calls)
    if not any(_reader_kind(names, call, alike=False) for call in calls):
        return Across({}, attributes, readers)
    module = names.scopes[names.tree]
    out = {}
    for name, bindings in module.bindings.items():
        if len(bindings) != 1 or bindings[0].kind not in ("def", "class"):
            continue
        node = bindings[0].node
        function, skipped = node, 0
        if isinstance(node, ast.ClassDef):
            scope = names.scopes.get(node)
            init = scope.bindings.get("__init__", []) if scope is not None else []
            if node.decorator_list or len(init) != 1 or init[0].kind != "def":
                continue
            function, skipped = init[0].node, 1
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) or (
            function.decorator_list
        ):
            continue
        arguments = function.args
        parameters = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
        takes = {}
        for argument in parameters[skipped:]:
            taken = frozenset(
                (kind, key)
                for kind, key in _CANDIDATES
                if walk.parameter_takes(arguments, argument, kind, key)
            )
            if taken:
                takes[argument.arg] = taken
        if takes:
            positional = tuple(a.arg for a in [*arguments.posonlyargs, *arguments.args][skipped:])
            out[f"{names.module_name}.{name}"] = Accepting(positional, takes)
    return Across(out, attributes, readers=True)
