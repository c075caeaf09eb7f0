"""F2P013's analysis: which FSDP1 values reach only readers (``find``), what they are
written as (``Written``) and what other files' functions and attribute reads take
(``accepting``); what it does: ``codemods.rules.reader_values.rule``."""

from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Callable, Iterator, Mapping

from codemods import calls, flow, fsdp1, imports, markers
from codemods.local_names import opaque_scopes, seen_only_here, visible_only_here
from codemods.names import Binding, Names, Scope
from codemods.plan import NeededImport
from codemods.rules.reader_values.attributes import (
    attribute_loads,
    class_body_binding,
    own_attribute_reads,
)
from codemods.text import Edit, LineIndex

CODE = "F2P013"
STRATEGY, POLICY = "sharding strategy", "wrap policy"
PREFETCH, STATE_DICT_TYPE = "backward prefetch", "state-dict type"
MIXED, OFFLOAD = "mixed precision", "cpu offload"
MODEL_CONFIG, OPTIM_CONFIG = "state-dict config", "optimizer state-dict config"
#: FSDP1's enums the readers take by member name.
_ENUMS = {
    "ShardingStrategy": STRATEGY,
    "BackwardPrefetch": PREFETCH,
    "StateDictType": STATE_DICT_TYPE,
}
#: FSDP1's config dataclasses the readers take as a dict of their fields: (kind, the fields in
#: order, for arguments by position).
_CONFIGS: dict[str, tuple[str, tuple[str, ...]]] = {
    "MixedPrecision": (MIXED, fsdp1.MIXED_PRECISION_FIELDS),
    "CPUOffload": (OFFLOAD, fsdp1.CPU_OFFLOAD_FIELDS),
    "FullStateDictConfig": (MODEL_CONFIG, ("offload_to_cpu", "rank0_only")),
    "ShardedStateDictConfig": (MODEL_CONFIG, ("offload_to_cpu", "_use_dtensor")),
    "FullOptimStateDictConfig": (OPTIM_CONFIG, ("offload_to_cpu", "rank0_only")),
    "ShardedOptimStateDictConfig": (OPTIM_CONFIG, ("offload_to_cpu", "_use_dtensor")),
}
#: ``size_based_auto_wrap_policy``'s own arguments (``fsdp2_port.size_based_policy``'s).
_SIZE_BASED_ARGUMENTS = frozenset(("min_num_params", "force_leaf_modules", "exclude_wrap_modules"))
#: What FSDP1 (and ``units_like_fsdp1``) passes a policy by keyword on every call: a
#: ``partial`` that binds one of them binds nothing the policy ever sees.
_CALL_ARGUMENTS_IN_ORDER = ("module", "recurse", "nonwrapped_numel")
_CALL_ARGUMENTS = frozenset(_CALL_ARGUMENTS_IN_ORDER)
#: No position: a keyword-only slot.
_KEYWORD_ONLY = -1
_STATE_DICT_SLOTS = (
    (STATE_DICT_TYPE, 1, "state_dict_type"),
    (MODEL_CONFIG, 2, "state_dict_config"),
    (OPTIM_CONFIG, 3, "optim_state_dict_config"),
)
#: reader -> its slots: (the kind of value a slot takes, its position, its keyword). The
#: bridge (``fully_shard_like_fsdp1``, FSDP1's signature) and the state-dict type functions
#: take both spellings too.
_READERS: dict[str, tuple[tuple[str, int, str], ...]] = {
    "mesh_like_fsdp1": ((STRATEGY, 0, "sharding_strategy"),),
    "reshard_after_forward_like_fsdp1": ((STRATEGY, 0, "sharding_strategy"),),
    "units_like_fsdp1": (
        (POLICY, 1, "auto_wrap_policy"),
        (MIXED, _KEYWORD_ONLY, "mixed_precision"),
    ),
    "mp_policy_like_fsdp1": ((MIXED, 0, "mixed_precision"),),
    "buffer_dtype_like_fsdp1": ((MIXED, 0, "mixed_precision"),),
    "full_precision_like_fsdp1": ((MIXED, 0, "mixed_precision"),),
    "offload_policy_like_fsdp1": ((OFFLOAD, 0, "cpu_offload"),),
    "fully_shard_like_fsdp1": (
        (STRATEGY, 2, "sharding_strategy"),
        (OFFLOAD, 3, "cpu_offload"),
        (POLICY, 4, "auto_wrap_policy"),
        (PREFETCH, 5, "backward_prefetch"),
        (MIXED, 6, "mixed_precision"),
    ),
    "state_dict_type": _STATE_DICT_SLOTS,
    "set_state_dict_type": _STATE_DICT_SLOTS,
}
#: FSDP2's slots where FSDP1's value and its spelling without FSDP1 come to the same: neither
#: is a ``CPUOffloadPolicy`` (no offload: verl hands its ``CPUOffload`` to both versions), and
#: ``fully_shard`` refuses either as ``reshard_after_forward`` and as ``mp_policy`` (no
#: ``output_dtype``: the first forward fails), so a run that took that path never trained
#: (dolomite's helper returns FSDP1's or FSDP2's config, each for its own version).
_FSDP2_SLOTS: dict[str, tuple[tuple[str, int, str], ...]] = {
    "fully_shard": (
        (STRATEGY, _KEYWORD_ONLY, "reshard_after_forward"),
        (MIXED, _KEYWORD_ONLY, "mp_policy"),
        (OFFLOAD, _KEYWORD_ONLY, "offload_policy"),
    ),
}
#: What a parameter of a function may take without FSDP1 (``accepting``): each kind, itself
#: or in a dict under a keyword of a slot for it (spread into the call, ``**kwargs``).
_CANDIDATES = tuple(
    dict.fromkeys(
        [
            *((kind, None) for kind in _ENUMS.values()),
            *((kind, None) for kind, _ in _CONFIGS.values()),
            (POLICY, None),
            *(
                (kind, keyword)
                for slots in [*_READERS.values(), *_FSDP2_SLOTS.values()]
                for kind, _, keyword in slots
            ),
        ]
    )
)
#: Why a member test and its members are written by name.
_BY_NAME = "tested by name"
#: Where an f-string piece opens: its quote.
_FSTRING_OPENING = re.compile(r"""(?:[fF][rR]?|[rR][fF])("|')""")
#: Methods of a logger: a value they show changes its text only.
_LOG_METHODS = frozenset(("debug", "info", "warning", "warn", "error", "critical", "exception"))


@dataclasses.dataclass(frozen=True)
class Written:
    """One value written without FSDP1: ``node`` (a ``kind``) becomes ``text``, which reads
    the names ``imports`` bind."""

    node: ast.expr
    kind: str
    text: str
    imports: tuple[NeededImport, ...] = ()
    #: For a policy that selects by module (a predicate, not a size-based policy): the
    #: condition it tests on ``module``.
    condition: str | None = None
    #: For ``partial(_or_policy, policies=...)``: the policies it combines, each of which must
    #: be written as a predicate too (the lambda calls each with the module alone).
    members: tuple[ast.expr, ...] = ()
    #: What a public function returns, written in FSDP1's call shape.
    returned: bool = False
    #: Written as a policy FSDP1's call still fits (``size_based_policy(...)``): code that
    #: calls it as FSDP1 calls a policy (harold's own policy function) may read it too.
    call_shape: bool = False
    #: Why it may be written so, when not because only readers read it.
    why: str = "read only by fsdp2_port's readers"

    def message(self) -> str:
        shown = self.text if "\n" not in self.text else self.text.split("(")[0] + "(...)"
        if self.returned:
            return (
                f"{self.kind} a public function returns written as {shown}: FSDP1's call "
                "shape, for callers the run does not see"
            )
        return f"{self.kind} {self.why} written as {shown}"


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
    shared = accepts.attributes.keys()
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


@dataclasses.dataclass(frozen=True)
class Accepting:
    """What a function of one file takes without FSDP1, for the calls other files make:
    ``positional``, its parameters in order (``self`` left out); ``takes``, per parameter, the
    kinds of value its every path ends in a reader's slot for (``(kind, None)``), or, for a
    dict, the key whose value does (``(kind, key)``: verl's ``fsdp_kwargs``)."""

    positional: tuple[str, ...]
    takes: Mapping[str, frozenset[tuple[str, str | None]]]


@dataclasses.dataclass(frozen=True)
class Across:
    """What the other files of a run take without FSDP1, once each file's rewrites are made
    (``accepting``): ``functions``, by qualified name; ``attributes``, per attribute name, per
    module that reads ``.name`` (``attributes.attribute_loads``), what its every read takes
    to readers (``(kind, None)`` / ``(kind, key)`` as ``Accepting.takes``)."""

    functions: Mapping[str, Accepting] = dataclasses.field(default_factory=dict)
    attributes: Mapping[str, Mapping[str, frozenset[tuple[str, str | None]]]] = dataclasses.field(
        default_factory=dict
    )

    def __or__(self, other: Across) -> Across:
        attributes = {k: dict(v) for k, v in self.attributes.items()}
        for attr, modules in other.attributes.items():
            attributes.setdefault(attr, {}).update(modules)
        return Across({**self.functions, **other.functions}, attributes)


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
    if not any(_reader_kind(names, call, alike=False) for call in names.by_type[ast.Call]):
        return Across({}, attributes)
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
    return Across(out, attributes)


def _accepting(names: Names, call: ast.Call, accepts: Across) -> Accepting | None:
    """What the function of another file that ``call`` calls takes without FSDP1, if known: by
    its qualified name, or the one function whose name ends it (a module outside any package,
    no ``__init__.py`` around it, is named by its file alone: ``fsdp_utils.apply_fsdp2`` for
    ``verl.utils.fsdp_utils.apply_fsdp2`` in a namespace package)."""
    functions = accepts.functions
    if not functions:
        return None
    for qualified in names.qualified(call.func):
        if qualified in functions:
            return functions[qualified]
        ends = [k for k in functions if qualified.endswith(f".{k}")]
        if len(ends) == 1:
            return functions[ends[0]]
    return None


def _compared(
    names: Names, lines: LineIndex, chosen: list[Written]
) -> tuple[dict[ast.expr, Written], set[ast.expr]]:
    """Member tests written by name: each node -> how (the members by name, the value they
    test as ``fsdp2_port.member_name(x)``); and the members of tests whose value holds a
    written value inside it (two edits in one place: those members stay)."""
    written = {w.node: w for w in chosen}
    out: dict[ast.expr, Written] = {}
    tangled: set[ast.expr] = set()
    anchor = _top_import(names.tree)
    for compare in names.by_type[ast.Compare]:
        assert isinstance(compare, ast.Compare)
        test = _member_test(names, compare)
        if test is None:
            continue
        kind, operand = test
        members = [n for n in ast.walk(compare) if n in written and not _within(n, operand)]
        if not members or operand in written:
            continue  # kept; or a value written by name itself (``s == "X"``)
        if any(_within(n, operand) for n in written) or anchor is None:
            tangled.update(members)
            continue
        for member in members:
            out[member] = dataclasses.replace(written[member], why=_BY_NAME)
        needed = (imports.after(lines, anchor, "fsdp2_port", None),)
        text = f"fsdp2_port.member_name({lines.source(operand)})"
        out[operand] = Written(operand, kind, text, needed, why=_BY_NAME)
    return out, tangled


def _returned_in_call_shape(
    names: Names, lines: LineIndex, written: list[Written], escapes: set[ast.Return]
) -> list[Written]:
    """A written policy a public function returns, in FSDP1's call shape: the callers the run
    does not see may hand it to FSDP1 (``fsdp2_port.auto_wrap_policy(<predicate>)``)."""
    if not escapes:
        return written
    anchor = _top_import(names.tree)
    assert anchor is not None  # ``_Paths._escapes``
    needed = (imports.after(lines, anchor, "fsdp2_port", None),)
    by_node = {w.node: w for w in written}
    out = list(written)
    for returned in sorted(escapes, key=lambda r: (r.lineno, r.col_offset)):
        value = returned.value
        assert value is not None
        name = value if isinstance(value, ast.Name) and value not in by_node else None
        # a name is bound once (``_Paths._escapes``): to the policy, written or not
        policy = by_node.get(names.bindings_of(name)[0].value if name else value)  # type: ignore[arg-type]
        if policy is None or policy.condition is None:
            continue  # kept as it was, or FSDP1's call shape already (``size_based_policy``)
        if name is not None:
            text = f"fsdp2_port.auto_wrap_policy({name.id})"
            out.append(Written(name, POLICY, text, needed, returned=True))
        else:
            text = f"fsdp2_port.auto_wrap_policy({policy.text})"
            out[out.index(policy)] = dataclasses.replace(
                policy, text=text, imports=policy.imports + needed, returned=True
            )
    return out


def _top_import(module: ast.Module) -> ast.stmt | None:
    """The last import of a module's first block of imports (after its docstring and
    ``from __future__``), or None."""
    last = None
    for statement in module.body:
        if isinstance(statement, (ast.Import, ast.ImportFrom)):
            last = statement
        elif not (last is None and isinstance(statement, ast.Expr)):
            break
    return last


def _grouped(names: Names, written: Written) -> Written:
    """A lambda written inside an expression that would otherwise end up in its body (a
    branch of a conditional expression, an operand) in parentheses."""
    parent = names.parent.get(written.node)
    if written.text.startswith("lambda ") and isinstance(
        parent, (ast.IfExp, ast.BoolOp, ast.BinOp, ast.UnaryOp, ast.Compare)
    ):
        return dataclasses.replace(written, text=f"({written.text})")
    return written


def edit(lines: LineIndex, written: Written) -> Edit:
    start, end = lines.span(written.node)
    return Edit(start, end, written.text)


def annotation_edits(names: Names, lines: LineIndex, written: list[Written]) -> list[Edit]:
    """``x: ShardingStrategy = <value>`` (an FSDP1 enum or config class as the annotation)
    where every value the statement binds is written: the annotation says what it now holds,
    ``str`` or ``dict`` (``... | None`` in a function, where annotations are never evaluated,
    when a branch binds None)."""
    chosen = {w.node for w in written}
    out = []
    for statement in names.by_type[ast.AnnAssign]:
        assert isinstance(statement, ast.AnnAssign)
        annotated = fsdp1.first(names.qualified(statement.annotation)) or ""
        if annotated in _ENUMS:
            spelled = "str"
        elif annotated in _CONFIGS:
            spelled = "dict"
        else:
            continue
        if statement.value is None:
            continue
        leaves = list(_branches(statement.value))
        if not all(leaf in chosen or calls.is_none(leaf) for leaf in leaves):
            continue
        if any(calls.is_none(leaf) for leaf in leaves):
            if not names.scope_of(statement).is_function:
                continue
            spelled += " | None"
        start, end = lines.span(statement.annotation)
        out.append(Edit(start, end, spelled))
    kinds = {w.node: w.kind for w in written}
    return [
        *out,
        *_parameter_annotations(names, lines, chosen),
        *_return_annotations(names, lines, kinds),
    ]


def _parameter_annotations(names: Names, lines: LineIndex, chosen: set[ast.expr]) -> list[Edit]:
    """``p: StateDictType = <a written default>``: callers may still pass FSDP1's value, so
    the annotation names both, as a string (never evaluated: no import needed at run time,
    nor ``|`` before Python 3.10): ``p: "StateDictType | str" = "FULL_STATE_DICT"``. In a whole
    program where no other file spells the class, no caller passes its members: ``str``."""
    out = []
    for default in chosen:
        arguments = names.parent.get(default)
        argument = _defaulted(arguments, default) if isinstance(arguments, ast.arguments) else None
        if argument is None or argument.annotation is None:
            continue
        annotated = fsdp1.first(names.qualified(argument.annotation)) or ""
        spelled = "str" if annotated in _ENUMS else "dict" if annotated in _CONFIGS else None
        if spelled is None:
            continue
        if not names.seen.spelled_only_here(annotated.rsplit(".", 1)[-1]):
            spelled = f'"{lines.source(argument.annotation)} | {spelled}"'
        out.append(Edit(*lines.span(argument.annotation), spelled))
    return out


def _return_annotations(names: Names, lines: LineIndex, kinds: dict[ast.expr, str]) -> list[Edit]:
    """``def f() -> MixedPrecision:`` that returns written values: annotated with what it
    returns now, a union as a string (evaluated at ``def`` otherwise), ``-> "dict |
    MixedPrecisionPolicy"`` for dolomite's helper of both versions. Each value it returns (a
    conditional's, or a binding's in ``f`` of a name returned) must be written, None or an
    FSDP2 object built there; else the annotation stays."""
    out = []
    for function in [*names.by_type[ast.FunctionDef], *names.by_type[ast.AsyncFunctionDef]]:
        assert isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
        if function.returns is None:
            continue
        annotated = fsdp1.first(names.qualified(function.returns)) or ""
        if annotated not in _ENUMS and annotated not in _CONFIGS:
            continue
        leaves = list(_returned(names, function))
        if not any(v in kinds for leaf in leaves for v in [leaf, *_looked_up(names, leaf)]):
            continue
        spelled = [_returned_type(names, lines, leaf, kinds) for leaf in leaves]
        if None not in spelled:
            text = " | ".join(dict.fromkeys(t for t in spelled if t is not None))
            quoted = text if text in ("str", "dict") else f'"{text}"'
            out.append(Edit(*lines.span(function.returns), quoted))
    return out


def _returned(names: Names, function: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[ast.expr]:
    """The values ``function`` returns: through conditionals, and a returned name's bindings
    in it (the name itself for a binding of another kind: not known)."""
    scope = names.scopes[function]
    for node in ast.walk(function):
        if not isinstance(node, ast.Return) or names.function_of(node) is not function:
            continue
        if node.value is None:
            yield ast.Constant(None)
            continue
        for leaf in _branches(node.value):
            bindings = scope.bindings.get(leaf.id, []) if isinstance(leaf, ast.Name) else []
            if not bindings:
                yield leaf
            for binding in bindings:
                yield from [leaf] if binding.value is None else _branches(binding.value)


def _returned_type(
    names: Names, lines: LineIndex, leaf: ast.expr, kinds: dict[ast.expr, str]
) -> str | None:
    """A returned value's type, spelled for an annotation: ``str`` / ``dict`` when written,
    ``None``, an FSDP2 class built there; None when not known."""
    if leaf in kinds:
        if kinds[leaf] in _ENUMS.values():
            return "str"
        return "dict" if any(kinds[leaf] == kind for kind, _ in _CONFIGS.values()) else None
    if calls.is_none(leaf):
        return "None"
    if isinstance(leaf, ast.Call) and any(fsdp1.fsdp2(q) for q in names.qualified(leaf.func)):
        return lines.source(leaf.func)
    looked_up = _looked_up(names, leaf)
    spelled = {_returned_type(names, lines, value, kinds) for value in looked_up}
    return spelled.pop() if len(spelled) == 1 else None


def _looked_up(names: Names, leaf: ast.expr) -> list[ast.expr]:
    """The values ``d[key]`` may read, ``d`` a name bound once to a dict written out
    (minllm's ``strategy_map[config_strategy]``); none for anything else."""
    if not (isinstance(leaf, ast.Subscript) and isinstance(leaf.value, ast.Name)):
        return []
    bound = names.bindings_of(leaf.value)
    mapping = bound[0].value if len(bound) == 1 else None
    if not isinstance(mapping, ast.Dict) or None in mapping.keys:
        return []  # not a dict written out, or one that spreads another (**d)
    return [value for value in mapping.values if value is not None]


def _branches(value: ast.expr) -> Iterator[ast.expr]:
    """The values a conditional expression may give (itself for any other expression)."""
    if isinstance(value, ast.IfExp):
        yield from _branches(value.body)
        yield from _branches(value.orelse)
    else:
        yield value


# -- the values ------------------------------------------------------------------------------


def _members(names: Names, lines: LineIndex) -> Iterator[Written]:
    """``ShardingStrategy.X`` (and the other enums the readers take by name; any spelling
    FSDP1's names resolve to), and ``getattr`` / subscript of such an enum by a name."""
    for node in names.by_type[ast.Attribute]:
        assert isinstance(node, ast.Attribute)
        if (kind := _member_kind(names, node)) is not None:
            yield Written(node, kind, f'"{node.attr}"')
    for node in names.by_type[ast.Call]:
        assert isinstance(node, ast.Call)
        if (
            names.qualified(node.func) == {"builtins.getattr"}
            and len(node.args) == 2
            and not node.keywords
            and (kind := _enum(names, node.args[0])) is not None
        ):
            yield Written(node, kind, lines.source(node.args[1]))
    for node in names.by_type[ast.Subscript]:
        assert isinstance(node, ast.Subscript)
        if isinstance(node.ctx, ast.Load) and (kind := _enum(names, node.value)) is not None:
            yield Written(node, kind, lines.source(node.slice))


def _field_read(names: Names, lines: LineIndex, read: ast.Attribute, kind: str) -> bool:
    """``v.<field>`` (a load) of a name every binding of which is built here as a config of
    ``kind`` that writes the field out, or is a member of an enum of ``kind`` (the field
    ``name``): as a dict (F2P013) the field is ``v["<field>"]``, as a name the name is ``v``,
    the same value."""
    name = read.value
    if not (
        isinstance(name, ast.Name)
        and isinstance(read.ctx, ast.Load)
        and lines.source(read) == f"{name.id}.{read.attr}"  # its place in an f-string
    ):
        return False
    bindings = names.bindings_of(name)
    return bool(bindings) and all(
        b.value is not None
        and all(_writes_field(names, v, kind, read.attr) for v in _branches(b.value))
        for b in bindings
    )


def _writes_field(names: Names, value: ast.expr, kind: str, field: str) -> bool:
    """``value`` is a config of ``kind`` built with ``field`` written out, or a member of an
    enum of ``kind`` and ``field`` is its ``name``."""
    if field == "name" and _member_kind(names, value) == kind:
        return True
    if not isinstance(value, ast.Call):
        return False
    config = _CONFIGS.get(fsdp1.first(names.qualified(value.func)) or "")
    if config is None or config[0] != kind:
        return False
    given = {k.arg for k in value.keywords} | set(config[1][: len(value.args)])
    return field in given


def _field_reads(
    names: Names, lines: LineIndex, chosen: list[Written]
) -> tuple[list[Written], set[ast.expr]]:
    """Each field read (``_field_read``) of configs written as dicts, as ``v["<field>"]``, and of
    members written as names, as ``v``; and the values behind a read that only some of them
    reach written (those stay too)."""
    written = {w.node for w in chosen}
    kinds = {w.kind for w in chosen if w.kind != POLICY}
    out: list[Written] = []
    mixed: set[ast.expr] = set()
    for read in names.by_type[ast.Attribute]:
        assert isinstance(read, ast.Attribute)
        kind = next((k for k in sorted(kinds) if _field_read(names, lines, read, k)), None)
        if kind is None:
            continue
        assert isinstance(read.value, ast.Name)
        built = [v for b in names.bindings_of(read.value) for v in _branches(b.value)]  # type: ignore[arg-type]
        if all(v in written for v in built):
            if kind in _ENUMS.values():
                out.append(Written(read, kind, read.value.id, why="name (written as one now)"))
                continue
            quote = "'" if _in_double_quoted_fstring(names, lines, read) else '"'
            text = f"{read.value.id}[{quote}{read.attr}{quote}]"
            out.append(Written(read, kind, text, why="field (its config is a dict now)"))
        else:
            mixed.update(v for v in built if v in written)
    return out, mixed


def _in_double_quoted_fstring(names: Names, lines: LineIndex, node: ast.AST) -> bool:
    """``node`` sits in an f-string piece quoted with ``"`` (before Python 3.12 its expression
    may not use that quote)."""
    if not any(isinstance(a, ast.JoinedStr) for a in names.ancestors(node)):
        return False
    opened = _FSTRING_OPENING.findall(lines.text[: lines.start(node)])
    return bool(opened) and opened[-1].startswith('"')


def _member_test(names: Names, compare: ast.Compare) -> tuple[str, ast.expr] | None:
    """The kind of member ``compare`` tests a value against and that value (``x ==
    ShardingStrategy.X``, ``!=``, the member on either side; ``x in (A, B)``, ``not in``), or
    None. Such a test is written by name, ``fsdp2_port.member_name(x) == "X"``, which holds
    for a member and for its name alike (``_compared``)."""
    if len(compare.ops) != 1:
        return None
    left, right, op = compare.left, compare.comparators[0], compare.ops[0]
    if isinstance(op, (ast.In, ast.NotIn)):
        if not isinstance(right, (ast.Tuple, ast.List, ast.Set)) or not right.elts:
            return None
        kinds = {_member_kind(names, e) for e in right.elts}
        operand = left
    elif isinstance(op, (ast.Eq, ast.NotEq)):
        kinds = {_member_kind(names, left), _member_kind(names, right)} - {None}
        operand = right if _member_kind(names, left) else left
    else:
        return None  # ``is``: by name it would need ``==``
    if len(kinds) != 1 or None in kinds or _member_kind(names, operand) is not None:
        return None
    return kinds.pop(), operand  # type: ignore[return-value]


def _tested_kind(names: Names, compare: ast.AST | None) -> str | None:
    """The kind of member a member test (``_member_test``) compares with, or None."""
    test = _member_test(names, compare) if isinstance(compare, ast.Compare) else None
    return test[0] if test else None


def _member_kind(names: Names, node: ast.expr) -> str | None:
    """The kind of an FSDP1 enum member ``node`` is (``ShardingStrategy.X``), or None."""
    return _ENUMS.get(fsdp1.enum_of_member(fsdp1.first(names.qualified(node))) or "")


def _enum(names: Names, node: ast.expr) -> str | None:
    """The kind of value an FSDP1 enum ``node`` names holds, or None."""
    return _ENUMS.get(fsdp1.first(names.qualified(node)) or "")


def _configs(names: Names, lines: LineIndex) -> Iterator[Written]:
    """An FSDP1 config dataclass built here (``MixedPrecision(...)``) as the dict of its
    fields: the call's own text where it passes them by keyword."""
    for node in names.by_type[ast.Call]:
        assert isinstance(node, ast.Call)
        config = _CONFIGS.get(fsdp1.first(names.qualified(node.func)) or "")
        if config is None or any(k.arg is None for k in node.keywords):
            continue
        kind, fields = config
        if any(isinstance(a, ast.Starred) for a in node.args) or len(node.args) > len(fields):
            continue
        if node.args:
            given = [f"{f}={lines.source(a)}" for f, a in zip(fields, node.args)]
            given += [f"{k.arg}={lines.source(k.value)}" for k in node.keywords]
            yield Written(node, kind, f"dict({', '.join(given)})")
        else:
            yield Written(node, kind, "dict" + lines.source(node)[len(lines.source(node.func)) :])


def _policies(names: Names, lines: LineIndex) -> Iterator[Written]:
    """``functools.partial`` of FSDP1's lambda or transformer policy with its one argument by
    keyword, and ``ModuleWrapPolicy`` of classes written out, as the predicate it means."""
    yield from _forwarding(names, lines)
    for node in names.by_type[ast.Call]:
        assert isinstance(node, ast.Call)
        if fsdp1.first(names.qualified(node.func)) == "ModuleWrapPolicy":
            given = _module_classes(node)
            if given is not None:
                # it copies its classes when built: only classes written out read the same later
                yield _of_classes(names, lines, node, given, copied=True)
            continue
        if not ("functools.partial" in names.qualified(node.func) and len(node.args) == 1):
            continue
        policy = fsdp1.first(names.qualified(node.args[0]))
        keywords = _own_keywords(node)
        if keywords is None:
            continue
        if policy == "_or_policy":
            either = _either(names, lines, node, keywords)
            if either is not None:
                yield either
            continue
        if policy == "size_based_auto_wrap_policy":
            size_based = _size_based(names, lines, node, keywords)
            if size_based is not None:
                yield size_based
            continue
        if policy == "always_wrap_policy" and not keywords:
            yield _selecting(node, "True")
            continue
        if policy in fsdp1.REQUIRED_POLICY_ARGUMENT and not keywords:
            yield _unbound(node, policy)
            continue
        if len(keywords) != 1:
            continue
        keyword = keywords[0]
        if policy == "lambda_auto_wrap_policy" and keyword.arg == "lambda_fn":
            function = lines.source(keyword.value)
            tested = calls.condition(lines, keyword.value, "module") or f"({function})(module)"
            yield Written(node, POLICY, function, condition=tested)
        elif policy == "transformer_auto_wrap_policy" and keyword.arg == "transformer_layer_cls":
            yield _of_classes(names, lines, node, keyword.value, copied=False)


def _module_classes(policy: ast.Call) -> ast.expr | None:
    """``ModuleWrapPolicy``'s one argument, by position or as ``module_classes=``."""
    if len(policy.args) == 1 and not policy.keywords:
        return policy.args[0]
    if not policy.args and len(policy.keywords) == 1:
        if policy.keywords[0].arg == "module_classes":
            return policy.keywords[0].value
    return None


def _of_classes(
    names: Names, lines: LineIndex, node: ast.expr, classes: ast.expr, copied: bool
) -> Written:
    """A policy selecting ``classes`` as a predicate. Read in its body when the predicate reads
    the same later (``_fixed``, no call, not the predicate's own names; written out when the
    policy ``copied`` its collection); else taken as its default, evaluated once where the
    policy was built, as the policy took them (falcon's ``{get_module_class_from_name(model,
    ...)}``): no condition of its own then, so an or-policy does not join it into one (its
    default would be evaluated on every call)."""
    if (
        (_written_out(classes) or not copied)
        and _fixed(names, classes)
        and _free_of_module(classes)
        and _calls_nothing(classes)
    ):
        return _selecting(node, f"isinstance(module, {_as_tuple(lines, classes)})")
    text = f"lambda module, classes={_as_tuple(lines, classes)}: isinstance(module, classes)"
    return Written(node, POLICY, text)


def _forwarding(names: Names, lines: LineIndex) -> Iterator[Written]:
    """``lambda module, recurse, nonwrapped_numel: transformer_auto_wrap_policy(module,
    recurse, nonwrapped_numel, S)`` (S by position or as ``transformer_layer_cls=``, the
    three passed on in order or by keyword): TKGQA's spelling of the partial. As the
    predicate ``lambda module: isinstance(module, tuple(S))``, which reads S on each call as
    the lambda did."""
    for node in names.by_type[ast.Lambda]:
        assert isinstance(node, ast.Lambda)
        arguments = node.args
        own = [a.arg for a in [*arguments.posonlyargs, *arguments.args]]
        call = node.body
        if (
            len(own) != 3
            or arguments.vararg
            or arguments.kwarg
            or arguments.kwonlyargs
            or arguments.defaults
            or not isinstance(call, ast.Call)
            or fsdp1.first(names.qualified(call.func)) != "transformer_auto_wrap_policy"
        ):
            continue
        passed = _passed(call, (*_CALL_ARGUMENTS_IN_ORDER, "transformer_layer_cls"))
        if passed is None or len(passed) != 4:
            continue
        forwarded = [passed[n] for n in _CALL_ARGUMENTS_IN_ORDER]
        classes = passed["transformer_layer_cls"]
        if not all(isinstance(f, ast.Name) and f.id == n for f, n in zip(forwarded, own)) or any(
            isinstance(n, ast.Name) and n.id in own for n in ast.walk(classes)
        ):
            continue
        tested = f"isinstance({own[0]}, {_as_tuple(lines, classes)})"
        condition = tested if own[0] == "module" else None
        yield Written(node, POLICY, f"lambda {own[0]}: {tested}", condition=condition)


def _own_keywords(partial: ast.Call) -> list[ast.keyword] | None:
    """A policy ``partial``'s keywords but those every call replaces (``_CALL_ARGUMENTS``,
    when dropping them drops no side effect); None for ``**`` keywords."""
    if any(k.arg is None for k in partial.keywords):
        return None
    replaced = [k for k in partial.keywords if k.arg in _CALL_ARGUMENTS]
    if not all(calls.is_simple(k.value) for k in replaced):
        return None
    return [k for k in partial.keywords if k.arg not in _CALL_ARGUMENTS]


def _either(
    names: Names, lines: LineIndex, node: ast.Call, keywords: list[ast.keyword]
) -> Written | None:
    """``partial(_or_policy, policies=P)`` as ``lambda module: any(policy(module) for policy in
    P)``: P a list or tuple written here, or a name bound once to one and otherwise only
    extended (``.extend([...])``, ``.append(p)``), each policy a name bound once to a policy
    or one written in place. FSDP1 asks an or of predicates nothing but each predicate."""
    if len(keywords) != 1 or keywords[0].arg != "policies":
        return None
    given = keywords[0].value
    if not (_fixed(names, given) and _free_of_module(given)):
        return None
    members = _or_members(names, given)
    if members is None:
        return None
    condition = _either_condition(lines, given, {})
    return Written(node, POLICY, f"lambda module: {condition}", (), condition, tuple(members))


def _selecting(node: ast.expr, condition: str) -> Written:
    return Written(node, POLICY, f"lambda module: {condition}", condition=condition)


def _either_condition(lines: LineIndex, given: ast.expr, inline: dict[ast.expr, str]) -> str:
    """An or-policy's condition on ``module``: the conditions of the policies written in
    its list (``inline``) joined by ``or``, else each policy called in turn."""
    elements = given.elts if _written_out(given) else []  # type: ignore[attr-defined]
    if elements and all(e in inline for e in elements):
        return " or ".join(inline[e] for e in elements)
    return f"any(policy(module) for policy in {lines.source(given)})"


def _nested_in_place(lines: LineIndex, chosen: list[Written]) -> list[Written]:
    """An or-policy written with the policies written inside its own list (one edit)."""
    inline = {
        m: w
        for w in chosen
        for m in w.members
        if isinstance(w.node, ast.Call) and _within(m, w.node)
    }
    if not inline:
        return chosen
    by_node = {w.node: w for w in chosen}

    def condition_of(written: Written) -> str:
        assert written.condition is not None
        if not written.members:
            return written.condition
        nested = {
            m: _operand(by_node[m], condition_of(by_node[m]))
            for m in written.members
            if m in inline
        }
        given = next(k.value for k in written.node.keywords if k.arg == "policies")  # type: ignore[attr-defined]
        return _either_condition(lines, given, nested)

    return [
        dataclasses.replace(w, text=f"lambda module: {condition_of(w)}") if w.members else w
        for w in chosen
        if w.node not in inline
    ]


def _operand(written: Written, condition: str) -> str:
    """A policy's condition as one operand of ``or`` (an or-policy's own is grouped)."""
    return f"({condition})" if written.members else condition


def _within(node: ast.AST, outer: ast.AST) -> bool:
    return any(node is n for n in ast.walk(outer)) and node is not outer


def _or_members(names: Names, given: ast.expr) -> list[ast.expr] | None:
    """The policies an or-policy's list holds, or None if not all are known here."""
    if _written_out(given):
        elements = list(given.elts)  # type: ignore[attr-defined]
    elif isinstance(given, ast.Name):
        bound = names.bindings_of(given)
        listed = bound[0].value if len(bound) == 1 else None
        if not isinstance(listed, (ast.List, ast.Tuple)) or not _written_out(listed):
            return None
        elements = list(listed.elts)
        scope = names.lookup(given.id, names.scope_of(given))[0]
        for read in _reads(names, scope, given.id) if scope is not None else ():
            added = _added(names, read)
            if added is None:
                return None
            elements += added
    else:
        return None
    members = []
    for element in elements:
        if isinstance(element, ast.Name):
            bound = names.bindings_of(element)
            if len(bound) != 1 or bound[0].value is None:
                return None
            members.append(bound[0].value)
        else:
            members.append(element)
    return members


def _added(names: Names, read: ast.Name) -> list[ast.expr] | None:
    """What a read of a list's name adds to it: ``name.extend([...])`` its elements,
    ``name.append(p)`` ``p``, any other read nothing; None when the elements are unknown."""
    growing = _growing(names, read)
    if growing is None:
        return []
    if len(growing.args) != 1 or growing.keywords:
        return None
    if _called_on(growing, "append") is not None:
        return [growing.args[0]]
    return list(growing.args[0].elts) if _written_out(growing.args[0]) else None  # type: ignore[attr-defined]


def _growing(names: Names, read: ast.Name) -> ast.Call | None:
    """The ``read.extend(...)`` / ``read.append(...)`` call a read of a list's name makes."""
    call = names.parent.get(names.parent.get(read, read))
    if isinstance(call, ast.Call) and _called_on(call, "extend", "append") is read:
        return call
    return None


def _free_of_module(value: ast.expr) -> bool:
    """``value`` reads no name ``module`` or ``policy``, the written lambda's own names."""
    return not any(
        isinstance(n, ast.Name) and n.id in ("module", "policy") for n in ast.walk(value)
    )


def _bare_policies(names: Names, lines: LineIndex) -> Iterator[Written]:
    """FSDP1's policy functions themselves as policies (not in a ``partial``)."""
    for node in [*names.by_type[ast.Name], *names.by_type[ast.Attribute]]:
        assert isinstance(node, (ast.Name, ast.Attribute))
        if not isinstance(node.ctx, ast.Load):
            continue
        policy = fsdp1.first(names.qualified(node))
        if policy not in fsdp1.WRAP_POLICY_FUNCTIONS or not _import_bindings(names, node):
            continue  # not FSDP1's function, or a name bound to it (its value is written)
        parent = names.parent.get(node)
        if isinstance(parent, ast.Attribute) or (
            isinstance(parent, ast.Call) and (parent.func is node or node in parent.args[:1])
        ):
            continue  # a part of a longer name, called, or bound by a partial
        if policy == "always_wrap_policy":
            yield _selecting(node, "True")
            continue
        if policy in fsdp1.REQUIRED_POLICY_ARGUMENT:
            yield _unbound(node, policy)
            continue
        written = _size_based(names, lines, node, [])
        if written is not None:
            yield written


def _import_bindings(names: Names, node: ast.expr) -> list[Binding]:
    """The bindings of the name ``node`` (a name or a dotted one) starts with, when imports
    bound it, not a local alias; else none."""
    while isinstance(node, ast.Attribute):
        node = node.value
    bound = names.bindings_of(node) if isinstance(node, ast.Name) else []
    return bound if all(b.kind == "import" for b in bound) else []


#: What FSDP1's policies that take an argument of their own return, on it.
_UNBOUND_RESULTS = {
    "transformer_auto_wrap_policy": "isinstance(module, tuple(transformer_layer_cls))",
    "lambda_auto_wrap_policy": "lambda_fn(module)",
}


def _unbound(node: ast.expr, policy: str) -> Written:
    """``transformer_auto_wrap_policy`` / ``lambda_auto_wrap_policy`` without their own
    argument (OpenRLHF's), FSDP1's function written out: a lambda in its call shape that
    still lacks that argument, so that every call raises ``TypeError`` as FSDP1's does (F2P003
    marks it), and a ``partial`` that gives it the argument selects as FSDP1's would."""
    argument = fsdp1.REQUIRED_POLICY_ARGUMENT[policy]
    given = ", ".join((*_CALL_ARGUMENTS_IN_ORDER, argument))
    text = f"lambda {given}: recurse or {_UNBOUND_RESULTS[policy]}"
    return Written(node, POLICY, text, call_shape=True)


def _size_based(
    names: Names, lines: LineIndex, node: ast.expr, keywords: list[ast.keyword]
) -> Written | None:
    """``size_based_auto_wrap_policy``, or a ``partial`` of it that passes ``keywords``, as
    ``size_based_policy(...)`` imported from ``fsdp2_port`` right after the statement that
    imported FSDP1's function (the last before the policy, where each branch of a
    ``try``/``except`` imports it)."""
    if not all(k.arg in _SIZE_BASED_ARGUMENTS for k in keywords):
        return None
    bound = _import_bindings(names, node.args[0] if isinstance(node, ast.Call) else node)
    # imported once, or once in each branch that needs it (harold's try/except)
    if not bound or any(b.qualified != bound[0].qualified for b in bound):
        return None
    before = [b.statement for b in bound if b.statement and _at(b.statement) < _at(node)]
    if not before:
        return None
    # the new import goes where the last of them that comes before the policy is
    needed = imports.after(lines, max(before, key=_at), "fsdp2_port", "size_based_policy")
    given = ", ".join(f"{k.arg}={lines.source(k.value)}" for k in keywords)
    return Written(node, POLICY, f"size_based_policy({given})", (needed,), call_shape=True)


def _at(node: ast.AST) -> tuple[int, int]:
    return getattr(node, "lineno", 0), getattr(node, "col_offset", 0)


def _fixed(names: Names, value: ast.expr) -> bool:
    """Every name ``value`` reads is bound only above it: the predicate reads them when the
    reader calls it, later than the policy read them, and that is the same value only if
    nothing binds them again in between."""
    at = (value.lineno, value.col_offset)
    inside = set(ast.walk(value))  # a lambda's own parameters are bound when it runs
    return all(
        (getattr(b.node, "lineno", 0), getattr(b.node, "col_offset", 0)) < at
        for node in inside
        if isinstance(node, ast.Name)
        for b in names.bindings_of(node)
        if b.node not in inside
    )


def _calls_nothing(classes: ast.expr) -> bool:
    """No call among the classes: a predicate would make it again on every module it asks
    about (``layer_class(model)``), where the policy made it once."""
    return not any(isinstance(n, ast.Call) for n in ast.walk(classes))


def _written_out(classes: ast.expr) -> bool:
    return isinstance(classes, (ast.Set, ast.List, ast.Tuple)) and not any(
        isinstance(e, ast.Starred) for e in classes.elts
    )


def _as_tuple(lines: LineIndex, classes: ast.expr) -> str:
    """A tuple's text for a collection of classes: written out when it is a literal."""
    if _written_out(classes):
        items = [lines.source(e) for e in classes.elts]  # type: ignore[attr-defined]
        return f"({', '.join(items)}{',' if len(items) == 1 else ''})"
    return f"tuple({lines.source(classes)})"


# -- where values go ---------------------------------------------------------------------------


def _reader_kind(
    names: Names, call: ast.AST | None, alike: bool = True
) -> tuple[tuple[str, int, str], ...] | None:
    """The slots of a reader call (with ``alike``, also of an FSDP2 call that takes either
    spelling alike), or None for any other call."""
    if not isinstance(call, ast.Call):
        return None
    for qualified in names.qualified(call.func):
        head, _, last = qualified.rpartition(".")
        if head.split(".")[0] == "fsdp2_port" and last in _READERS:
            return _READERS[last]
        if alike and fsdp1.fsdp2(qualified) in _FSDP2_SLOTS:
            return _FSDP2_SLOTS[last]
    return None


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
            isinstance(func, ast.Attribute) and func.attr in _LOG_METHODS
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


def _reads(names: Names, scope: Scope, name: str) -> Iterator[ast.Name]:
    """Every load of ``name`` that resolves to ``scope``'s binding; a string reference
    (``__all__``, an annotation) counts as a read that goes elsewhere."""
    for node in names.loads(name):
        if names.lookup(name, names.scope_of(node))[0] is scope:
            yield node
    for other, where in names.string_references():
        if other == name and names.lookup(name, where)[0] is scope:
            yield ast.Name(id=name, ctx=ast.Load())  # has no parent: reaches no reader


def _in_fsdp1_call_shape(call: ast.Call) -> bool:
    """``policy(module, recurse, nonwrapped_numel)``, by position or FSDP1's keywords."""
    passed = _passed(call, _CALL_ARGUMENTS_IN_ORDER)
    return passed is not None and len(passed) == len(_CALL_ARGUMENTS_IN_ORDER)


def _passed(call: ast.Call, parameters: tuple[str, ...]) -> dict[str, ast.expr] | None:
    """``call``'s arguments by the parameter each fills (``parameters`` in order), or None when
    one is starred, names another parameter or fills one twice."""
    if any(isinstance(a, ast.Starred) for a in call.args) or len(call.args) > len(parameters):
        return None
    passed = dict(zip(parameters, call.args))
    for keyword in call.keywords:
        if keyword.arg not in parameters or keyword.arg in passed:
            return None
        passed[keyword.arg] = keyword.value
    return passed


def _tested_for_none(node: ast.expr, parent: ast.AST | None) -> bool:
    """``node is None`` / ``node is not None``."""
    if not (
        isinstance(parent, ast.Compare)
        and len(parent.ops) == 1
        and isinstance(parent.ops[0], (ast.Is, ast.IsNot))
    ):
        return False
    sides = (parent.left, parent.comparators[0])
    return any(side is node for side in sides) and any(calls.is_none(side) for side in sides)


def _text_key(node: ast.AST | None) -> str | None:
    """A dict key written as a string constant, or None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _called_on(call: ast.Call, *methods: str) -> ast.Name | None:
    """``n`` of an ``n.<method>(...)`` call, for one of ``methods`` (``l.append(p)``,
    ``d.update(k=v)``)."""
    func = call.func
    if (
        isinstance(func, ast.Attribute)
        and func.attr in methods
        and isinstance(func.value, ast.Name)
    ):
        return func.value
    return None


def _defaulted(arguments: ast.arguments, default: ast.expr) -> ast.arg | None:
    """The parameter whose default ``default`` is."""
    positional = [*arguments.posonlyargs, *arguments.args]
    for argument, value in zip(
        positional[len(positional) - len(arguments.defaults) :], arguments.defaults
    ):
        if value is default:
            return argument
    for argument, keyword_default in zip(arguments.kwonlyargs, arguments.kw_defaults):
        if keyword_default is default:
            return argument
    return None
