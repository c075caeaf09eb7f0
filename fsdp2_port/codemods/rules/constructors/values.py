"""The arguments of one FSDP1 constructor call, followed to where they are written, into the
``Pure`` record the other modules fill in; and the shared ways to read and reuse a value.

Values are followed to where they are written: the call itself, a name bound once in the same
scope (or a script's module constant), a ``dict(...)``/``{...}`` spread with ``**``; a spread
whose keys are known but not its values (another module's dict, a class attribute, a dict
other code reads or extends) is read at run time, through ``kwargs_as_migrated``. A binding
is removable when every read of it is a constructor's (``Removable.users``); the rule removes
it only when all those constructors take the plain form. Only values that evaluate to the same
thing twice (names, attribute chains, constants) are inlined into more than one place.
"""

from __future__ import annotations

import ast
import bisect
from dataclasses import dataclass, field

from fsdp2_port.codemods import calls, fsdp1, spreads
from fsdp2_port.codemods.analysis import FileAnalysis
from fsdp2_port.codemods.assumptions import DEVICE_FUNCTIONS, FSDP1_PARAMETERS
from fsdp2_port.codemods.names import Binding
from fsdp2_port.codemods.rules.constructors.grown import grown
from fsdp2_port.codemods.text import Edit

SPREAD = "FSDP1 keyword arguments"
#: Stands for the unit in ``Pure.selects``.
UNIT = "\x00unit\x00"
#: Stands for the root module's name in ``Pure.bound_first`` (the rule names it later).
ROOT = "\x00root\x00"


@dataclass(frozen=True)
class Removable:
    """A binding the plain form inlines (``what`` it held), read only by ``users``."""

    what: str
    statement: ast.stmt
    users: frozenset[ast.Call]


@dataclass
class Pure:
    """A plain FSDP2 rewrite in the making, or why there is none."""

    blockers: list[str] = field(default_factory=list)
    #: the module, and the values of the other arguments, wherever they are written
    module: ast.expr | None = None
    values: dict[str, ast.expr] = field(default_factory=dict)
    #: the test's text for an argument a grown dict holds only under an ``if`` (``grown``)
    when: dict[str, str] = field(default_factory=dict)
    #: keyword texts for fully_shard on the root and on the units the policy selects
    root: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    #: the condition a unit meets, ``UNIT`` standing for it (``isinstance(UNIT, (Block,))``,
    #: ``UNIT in list(model.layers)``): FSDP1's wrap policy as code; the test under which a
    #: grown dict holds the policy (no units when it fails)
    selects: str | None = None
    selects_when: str | None = None
    #: the name of the set of modules in ignored subtrees, when units or buffer casts read it
    ignored_modules: str | None = None
    removable: list[Removable] = field(default_factory=list)
    #: FSDP2 names the rewrite imports; modules the units' keywords read (``dataclasses``)
    names: set[str] = field(default_factory=set)
    child_modules: set[str] = field(default_factory=set)
    #: the rewrite reads ``torch`` (a mesh built with ``init_device_mesh``)
    uses_torch: bool = False
    #: ``sync_module_states``: None (off), "" (on), or the run-time flag's text
    sync: str | None = None
    #: ``device_id``'s text (``fully_shard`` moves each unit there; see ``moves_per_unit``)
    device: str | None = None
    #: the mesh's text when the rewrite binds or is given one (a process group's, a reader's,
    #: ``init_device_mesh``'s, the caller's ``device_mesh``): ``sync_module_states``
    #: broadcasts within its groups
    group_mesh: str | None = None
    #: ``param_init_fn``'s text: ``fsdp2_port.materialize_like_fsdp1`` runs it as FSDP1 did
    init_fn: str | None = None
    #: when the BatchNorm exception applies only at run time (mixed precision chosen there)
    norms_when: str | None = None
    #: the classes FSDP1 keeps in full precision under a wrap policy (units of their own, their
    #: inputs cast up and their outputs back), for ``isinstance``: FSDP1's default
    #: ``MixedPrecision._module_classes_to_ignore``, or a reader of the mixed precision the run
    #: builds (its own classes)
    norms: str = "torch.nn.modules.batchnorm._BatchNorm"
    #: edits where the values are written (a binding that now holds the FSDP2 value)
    edits: list[Edit] = field(default_factory=list)
    #: the arguments only the run knows (a policy a library returns, a strategy read from a
    #: config): each is read by an ``fsdp2_port.*_like_fsdp1`` reader in the emitted code
    read_at_run_time: list[str] = field(default_factory=list)
    #: the mesh is ``fsdp2_port.mesh_like_fsdp1``'s or the caller's ``device_mesh``: it may
    #: have two dimensions (HSDP, NO_SHARD), so ``sync_module_states`` broadcasts over each
    mesh_any_dims: bool = False
    #: what tells the unit reader that FSDP1 ran under mixed precision (its BatchNorm units)
    mixed_precision: str | None = None
    #: when ``buffer_dtype`` applies only at run time (mixed precision chosen there)
    buffer_when: str | None = None
    #: ``buffer_dtype``'s text: floating buffers are cast to it
    buffer_dtype: str | None = None
    #: the param dtype's text when FSDP1 keeps BatchNorm units in full precision (a policy
    #: with mixed precision: ``MixedPrecision._module_classes_to_ignore``'s default)
    full_precision_norms: str | None = None
    #: the module is an expression read more than once (``FSDP(Net(), ...)`` with a policy):
    #: it is bound to a name first, once
    hoisted: bool = False
    #: ``(name, expression)`` evaluated once before anything else, as FSDP1 evaluated its
    #: arguments (a dtype computed at run time; then what is built from them: a mesh, units).
    #: The first ``len(evaluated_at)`` are the arguments' values, in the order of their
    #: positions in the source (``evaluated_at``), as FSDP1's call evaluated them
    bound_first: list[tuple[str, str]] = field(default_factory=list)
    evaluated_at: list[tuple[int, int]] = field(default_factory=list)

    @property
    def reads_module_before(self) -> bool:
        """Code before the root's ``fully_shard`` reads the module (init, move, broadcast,
        buffer casts, the unit loop)."""
        return (
            self.init_fn is not None
            or self.selects is not None
            or self.buffer_dtype is not None
            or self.sync is not None
        )

    @property
    def moves_per_unit(self) -> bool:
        """The emitted code moves states to ``device_id`` itself, unit by unit, to broadcast
        them there (``fully_shard`` moves them otherwise, unit by unit too)."""
        return self.device is not None and self.sync is not None and self.selects is not None

    @property
    def writes_lines_before(self) -> bool:
        """Lines go before the call's statement: it must stand alone and hold the call."""
        return self.reads_module_before or bool(self.bound_first)


def read_arguments(analysis: FileAnalysis, call: ast.Call, out: Pure) -> bool:
    """``out.module`` and ``out.values`` from the call and what it spreads; False if blocked."""
    position = 0
    for argument in calls.arguments(call):
        if isinstance(argument.node, ast.keyword) and argument.keyword is None:
            spread = _spread(analysis, argument.value, out)
            if spread is None:
                return False
            entries = spread
        elif argument.star:
            out.blockers.append("*args: spell the arguments out")
            return False
        elif argument.keyword is None:
            if position:
                out.blockers.append("arguments by position: pass them by keyword")
                return False
            entries = {"module": argument.value}
            position += 1
        else:
            entries = {argument.keyword: argument.value}
        for name, value in entries.items():
            if (
                name not in FSDP1_PARAMETERS
                or name in out.values
                or (name == "module" and out.module)
            ):
                out.blockers.append(f"{name}: an unknown or repeated argument")
                return False
            if name == "module":
                out.module = value
            else:
                out.values[name] = value
    if out.module is None:
        out.blockers.append("no module argument")
        return False
    return True


def _spread(analysis: FileAnalysis, value: ast.expr, out: Pure) -> dict[str, ast.expr] | None:
    """The entries of ``**name``: when ``name`` is a ``dict(...)``/``{...}`` of literal keys
    bound once and read only by constructors' ``**`` (or grown right before its one
    constructor: ``grown``), its values where they are written; else, when its keys are known
    (``_known_keys``), each value read at run time."""
    binding = _binding(analysis, value)
    entries_of = binding.value if binding is not None else None
    entries = spreads.dict_entries(analysis.names, entries_of) if entries_of is not None else None
    if binding is None or entries_of is None or entries is None:
        return _read_at_run_time(analysis, value, out, "not a dict of literal keys bound here")
    users = _spread_users(analysis, binding)
    found = grown(analysis, binding) if users is None else None
    if found is not None:
        users, entries = found.users, found.entries
    if users is None:
        return _read_at_run_time(analysis, value, out, "read by other code than FSDP(...) calls")
    statement = analysis.names.statement(binding.node)
    if rebound_before_use(analysis, entries_of, statement, analysis.uses_of(binding)):
        return _read_at_run_time(analysis, value, out, "read a name bound again before the call")
    out.removable.append(Removable(SPREAD, statement, users))
    if found is not None:
        out.removable += [Removable(SPREAD, s, users) for s in found.statements]
        out.when.update({key: analysis.source(test) for key, test in found.when.items()})
    return entries


def _read_at_run_time(
    analysis: FileAnalysis, value: ast.expr, out: Pure, why: str
) -> dict[str, ast.expr] | None:
    """``**kwargs`` whose keys are known: bound first, where FSDP1 evaluated it, to
    ``fsdp2_port.kwargs_as_migrated(kwargs, <keys>, optional=(...))`` (which checks the keys
    are still these, and gives an absent optional one as None, FSDP1's default for all the
    plain form reads), each entry read from that name."""
    keys = _known_keys(analysis, value)
    given_module = keys is not None and "module" in (*keys.required, *keys.optional)
    if keys is None or given_module or not analysis.options.runtime_dependency:
        out.blockers.append(f"**kwargs {why}")
        return None
    call = analysis.names.parent[analysis.names.parent[value]]
    assert isinstance(call, ast.Call)
    arguments = [analysis.source(value), *(f'"{key}"' for key in keys.required)]
    if keys.optional:
        listed = ", ".join(f'"{key}"' for key in keys.optional)
        arguments.append(f"optional=({listed}{',' if len(keys.optional) == 1 else ''})")
    name = fresh(analysis, call, out, "fsdp1_kwargs")
    _bound_where_evaluated(
        out, value, name, f"fsdp2_port.kwargs_as_migrated({', '.join(arguments)})"
    )
    out.read_at_run_time.append("**kwargs")
    keyword = analysis.names.parent[value]
    return {
        key: analysis.written(f'{name}["{key}"]', value, keyword)
        for key in (*keys.required, *keys.optional)
    }


def _known_keys(analysis: FileAnalysis, value: ast.expr) -> spreads.Keys | None:
    """The keys of ``**kwargs`` written out where it is bound: a name bound once in this
    file, or imported from a module of the run, or a class attribute (``self.defaults``),
    to a dict of literal keys, or to what a function of the file builds and returns; keys
    stored later by literal are optional (``spreads``)."""
    if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name):
        key = spreads.ATTRIBUTE + value.attr
    elif isinstance(value, ast.Name):
        scope, bindings = analysis.names.lookup(value.id, analysis.names.scope_of(value))
        if scope is not None and any(b.kind != "import" for b in bindings):
            return spreads.written_keys(analysis.names, scope, value.id, bindings)
        key = next(iter(sorted(analysis.names.qualified(value))), "")
    else:
        return None
    if key in analysis.spreads:
        return analysis.spreads[key]
    wanted = key.rpartition(".")[2]
    return dict(spreads.in_module(analysis.names, wanted)).get(key)


def _binding(analysis: FileAnalysis, value: ast.expr) -> Binding | None:
    """The single ``name = ...`` binding ``value`` reads, in its own scope (or a script's
    module constant)."""
    if not isinstance(value, ast.Name):
        return None
    binding = analysis.sole_binding(value)
    if binding is None:
        return None
    statement = analysis.names.statement(binding.node)
    if not isinstance(statement, (ast.Assign, ast.AnnAssign)):
        return None
    same_scope = analysis.names.scope_of(statement) is analysis.names.scope_of(value)
    if same_scope or _private_constant(analysis, statement, value.id):
        return binding
    return None


def _spread_users(analysis: FileAnalysis, binding: Binding) -> frozenset[ast.Call] | None:
    """The constructor calls that spread ``binding`` (None if anything else reads it)."""
    users = set()
    for use in analysis.uses_of(binding):
        keyword = analysis.names.parent.get(use)
        call = analysis.names.parent.get(keyword) if keyword is not None else None
        if not (
            isinstance(keyword, ast.keyword)
            and keyword.arg is None
            and isinstance(call, ast.Call)
            and call in analysis.ties.constructors
            and call not in analysis.ties.factories
        ):
            return None
        users.add(call)
    return frozenset(users)


def resolved(
    analysis: FileAnalysis, out: Pure, what: str
) -> tuple[ast.expr | None, Removable | None, str | None]:
    """An argument's value where it is written, looking through a name bound once whose every
    read is a constructor's ``what`` (directly, or in a spread dict), with that binding; or
    why it cannot be read here. ``(None, None, None)``: the argument is absent or None."""
    value = out.values.get(what)
    if value is None or calls.is_none(value):
        return None, None, None
    if not isinstance(value, ast.Name):
        return value, None, None
    binding = _binding(analysis, value)
    if binding is None or binding.value is None:
        return None, None, f"{what} is not written at the call"
    users: set[ast.Call] = set()
    uses = analysis.uses_of(binding)
    statement = analysis.names.statement(binding.node)
    if rebound_before_use(analysis, binding.value, statement, uses):
        return None, None, f"{what} reads a name bound again before the call"
    for use in uses:
        found = _reader(analysis, use, what)
        if found is None:
            if _enum_member(analysis, binding.value):
                return binding.value, None, None  # a constant: the binding stays for the rest
            return None, None, f"{what} is read by other code than FSDP(...) calls"
        users |= found
    return binding.value, Removable(what, statement, frozenset(users)), None


def _enum_member(analysis: FileAnalysis, value: ast.expr) -> bool:
    """``value`` is a member of one of FSDP1's enums (``ShardingStrategy.FULL_SHARD``): the same
    object wherever it is written."""
    return fsdp1.enum_of_member(analysis.fsdp1_name(value)) is not None


def rebound_before_use(
    analysis: FileAnalysis, value: ast.expr, statement: ast.stmt, uses: list[ast.Name]
) -> bool:
    """Whether a name ``value`` reads when evaluated (lambda bodies read theirs later, in
    either place) is bound again between ``statement`` and a read of what it bound: moved to
    that read, ``value`` would see the new binding."""
    after = (statement.end_lineno or statement.lineno, statement.end_col_offset or 0)
    for node in _evaluated(value):
        for binding in analysis.names.bindings_of(node):
            where = (getattr(binding.node, "lineno", 0), getattr(binding.node, "col_offset", 0))
            if any(after < where < (use.lineno, use.col_offset) for use in uses):
                return True
    return False


def _evaluated(value: ast.expr) -> list[ast.Name]:
    """The names an expression reads when it is evaluated (not those of its lambdas' bodies)."""
    found: list[ast.Name] = []
    stack: list[ast.AST] = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            found.append(node)
        elif isinstance(node, ast.Lambda):
            stack.extend([*node.args.defaults, *(d for d in node.args.kw_defaults if d)])
        else:
            stack.extend(ast.iter_child_nodes(node))
    return found


def inlined_once(removable: Removable | None, value: ast.expr) -> bool:
    """Whether inlining ``value`` evaluates what FSDP1 evaluated once only once: it is written
    at this call, or bound for this call alone, or holds nothing but simple values (a binding
    several constructors share would otherwise run its calls once per constructor)."""
    if removable is None or len(removable.users) < 2:
        return True
    return all(
        calls.is_simple(node) or not isinstance(node, ast.Call)
        for node in ast.walk(value)
        if node is not value and isinstance(node, ast.expr)
    )


def at_run_time(
    analysis: FileAnalysis, call: ast.Call, out: Pure, what: str, why: str
) -> str | None:
    """The call's own text for ``what`` (bound first when it must be evaluated once), for an
    ``fsdp2_port`` reader to turn into its FSDP2 value at run time; without the runtime
    dependency None, and ``why`` (what stops the value being written out) blocks the plain
    form."""
    if not analysis.options.runtime_dependency:
        out.blockers.append(why)
        return None
    out.read_at_run_time.append(what)
    return once(analysis, call, out, what, out.values[what])


def _reader(analysis: FileAnalysis, use: ast.Name, what: str) -> frozenset[ast.Call] | None:
    """The constructors a read of a binding feeds as ``what``: a keyword of the call, or an
    entry of a dict they spread."""
    keyword = analysis.names.parent.get(use)
    holder = analysis.names.parent.get(keyword) if keyword is not None else None
    if isinstance(keyword, ast.keyword) and keyword.arg == what and isinstance(holder, ast.Call):
        if holder in analysis.ties.constructors and holder not in analysis.ties.factories:
            return frozenset({holder})
        if analysis.resolves_to(holder.func, "builtins.dict"):
            return _dict_readers(analysis, holder)
        return None
    if isinstance(keyword, ast.Dict):
        index = keyword.values.index(use) if use in keyword.values else -1
        key = keyword.keys[index] if index >= 0 else None
        if isinstance(key, ast.Constant) and key.value == what:
            return _dict_readers(analysis, keyword)
    return None


def _dict_readers(analysis: FileAnalysis, literal: ast.expr) -> frozenset[ast.Call] | None:
    statement = analysis.names.statement(literal)
    if not (isinstance(statement, ast.Assign) and statement.value is literal):
        return None
    target = statement.targets[0]
    if len(statement.targets) != 1 or not isinstance(target, ast.Name):
        return None
    binding = next(
        (b for b in analysis.names.bindings_of(target) if b.node is target),
        None,
    )
    if binding is None:
        return None
    users = _spread_users(analysis, binding)
    if users is None and (found := grown(analysis, binding)) is not None:
        return found.users
    return users


def _private_constant(analysis: FileAnalysis, statement: ast.stmt, name: str) -> bool:
    """A module-level constant no other module reads (``visibility``): inlining it and
    removing it is safe."""
    if not isinstance(analysis.names.parent.get(statement), ast.Module):
        return False
    return analysis.names.seen.own(name)


def chosen(
    analysis: FileAnalysis, call: ast.Call, name: ast.expr | None, what: str
) -> list[Binding] | None:
    """The bindings of a value chosen at run time: ``name`` bound more than once, every time
    by ``name = value`` in the call's scope, and read only as this call's ``what``; None
    otherwise."""
    if not isinstance(name, ast.Name):
        return None
    bindings = analysis.names.bindings_of(name)
    scope = analysis.names.scope_of(call)
    if len(bindings) < 2 or any(
        b.kind != "assign" or b.value is None or analysis.names.scope_of(b.node) is not scope
        for b in bindings
    ):
        return None
    if any(_reader(analysis, use, what) != {call} for b in bindings for use in analysis.uses_of(b)):
        return None
    return bindings


def once(analysis: FileAnalysis, call: ast.Call, out: Pure, base: str, value: ast.expr) -> str:
    """A value's text where the rewrite may read it several times: its own when it reads the
    same every time, else a name it is bound to first (evaluated once, as FSDP1 did)."""
    if calls.is_simple(value):
        return analysis.source(value)
    name = fresh(analysis, call, out, base)
    _bound_where_evaluated(out, value, name, _dedented(analysis, value))
    return name


def _bound_where_evaluated(out: Pure, value: ast.expr, name: str, text: str) -> None:
    """``name = text`` among the arguments bound first, in the order FSDP1 evaluated them
    (``value``'s position in the source)."""
    at = (value.lineno, value.col_offset)
    index = bisect.bisect(out.evaluated_at, at)
    out.evaluated_at.insert(index, at)
    out.bound_first.insert(index, (name, text))


def _dedented(analysis: FileAnalysis, value: ast.expr) -> str:
    """A value's source with its continuation lines moved left as far as its first line's
    indentation allows (it moves to a statement of its own, less indented)."""
    lines = analysis.source(value).splitlines()
    indent = len(analysis.lines.indent_at(analysis.lines.start(value)))
    rest = [line[indent:] if line[:indent].isspace() else line for line in lines[1:]]
    if rest and not isinstance(
        value, (ast.Dict, ast.List, ast.Set, ast.Tuple, ast.Call, ast.Subscript)
    ):
        inner = [f"    {line}" for line in rest]  # continued in brackets
        return "\n".join([f"({lines[0]}", *inner[:-1], inner[-1] + ")"])
    return "\n".join([lines[0], *rest])


def fresh(analysis: FileAnalysis, call: ast.Call, out: Pure, base: str) -> str:
    """A name free in the call's scope (and not taken by this rewrite)."""
    scope = analysis.names.scope_of(call)
    taken = {name for name, _ in out.bound_first}
    for name in (base, f"fsdp_{base}", f"fsdp2_{base}"):
        if name not in taken and analysis.names.lookup(name, scope)[0] is None:
            return name
    return f"fsdp2_{base}_{len(taken)}"


def is_flag(node: ast.expr) -> bool:
    """A value read without side effects: a name, an attribute chain, ``x["key"]``."""
    if isinstance(node, ast.Subscript):
        return is_flag(node.value) and isinstance(node.slice, ast.Constant)
    return calls.is_simple(node)


def is_fsdp1(analysis: FileAnalysis, node: ast.expr) -> bool:
    return isinstance(node, (ast.Name, ast.Attribute)) and analysis.fsdp1_name(node) is not None


def device_call(analysis: FileAnalysis, node: ast.AST) -> bool:
    """``torch.device("cuda", 0)``, ``torch.cuda.current_device()``: a value with no side
    effect, safe to evaluate earlier."""
    return (
        isinstance(node, ast.Call)
        and analysis.resolves_to(node.func, *DEVICE_FUNCTIONS)
        and all(calls.is_simple(x) for x in node.args)
        and not node.keywords
    )


def device_type_of(analysis: FileAnalysis, device: ast.expr | None) -> str | None:
    """The device type a ``device_id`` written here names: ``"cuda"`` for
    ``torch.cuda.current_device()`` or ``torch.device("cuda", ...)``."""
    if not isinstance(device, ast.Call):
        return None
    if analysis.resolves_to(device.func, "torch.cuda.current_device"):
        return "cuda"
    if analysis.resolves_to(device.func, "torch.device") and device.args:
        first = device.args[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            return first.value.split(":")[0]
    return None
