"""The plain FSDP2 form of one FSDP1 constructor call, or what blocks it.

Values are followed to where they are written: the call itself, a name bound once in the same
scope (or a script's module constant), a ``dict(...)``/``{...}`` spread with ``**``. A binding
is removable when every read of it is a constructor's (``Removable.users``); the rule removes
it only when all those constructors take the plain form. Only values that evaluate to the same
thing twice (names, attribute chains, constants) are inlined into more than one place.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from codemods import calls
from codemods.analysis import FileAnalysis
from codemods.names import Binding
from codemods.text import Edit

#: ``FullyShardedDataParallel.__init__`` parameters, in positional order.
PARAMETERS = (
    "module",
    "process_group",
    "sharding_strategy",
    "cpu_offload",
    "auto_wrap_policy",
    "backward_prefetch",
    "mixed_precision",
    "ignored_modules",
    "param_init_fn",
    "device_id",
    "sync_module_states",
    "forward_prefetch",
    "limit_all_gathers",
    "use_orig_params",
    "ignored_states",
    "device_mesh",
)
_RESHARD = {
    "FULL_SHARD": True,
    "SHARD_GRAD_OP": False,
    "HYBRID_SHARD": True,
    "_HYBRID_SHARD_ZERO2": False,
}
#: Strategies whose mesh is not the default one: their ``reshard_after_forward``.
_MESH_OF_ITS_OWN = {"HYBRID_SHARD": True, "_HYBRID_SHARD_ZERO2": False, "NO_SHARD": False}
#: Strategies whose mesh plain torch builds as FSDP1 did (``_mesh_of``). The hybrids' default
#: groups are one node's devices, and with one device a node FSDP1 trains each rank alone:
#: ``fsdp2_port.mesh_like_fsdp1`` refuses that, so they are read at run time.
_MESH_IN_TORCH = {"FULL_SHARD": True, "SHARD_GRAD_OP": False, "NO_SHARD": False}
_DTYPES = ("float32", "float16", "bfloat16", "float64", "float", "half", "double")
_MIXED = (
    "param_dtype",
    "reduce_dtype",
    "buffer_dtype",
    "keep_low_precision_grads",
    "cast_forward_inputs",
    "cast_root_forward_inputs",
    "_module_classes_to_ignore",
)
#: Accepted by FSDP1 with no effect on the numbers; FSDP2 has no such argument.
_NO_EFFECT = ("limit_all_gathers", "use_orig_params", "forward_prefetch", "backward_prefetch")
_DEVICE_FUNCTIONS = (
    "torch.device",
    "torch.cuda.current_device",
    "torch.accelerator.current_device_index",
)
SPREAD = "FSDP1 keyword arguments"
#: Where ``fully_shard`` lives from torch 2.6, which also broadcasts by ``group_src``.
FSDP2_PUBLIC_MODULE = "torch.distributed.fsdp"
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
    #: keyword texts for fully_shard on the root and on the units the policy selects
    root: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    #: the condition a unit meets, ``UNIT`` standing for it (``isinstance(UNIT, (Block,))``,
    #: ``UNIT in list(model.layers)``): FSDP1's wrap policy as code
    selects: str | None = None
    removable: list[Removable] = field(default_factory=list)
    #: FSDP2 names the rewrite imports; modules the units' keywords read (``dataclasses``)
    names: set[str] = field(default_factory=set)
    child_modules: set[str] = field(default_factory=set)
    #: the rewrite reads ``torch`` (a mesh built with ``init_device_mesh``)
    uses_torch: bool = False
    #: ``sync_module_states``: None (off), "" (on), or the run-time flag's text
    sync: str | None = None
    #: ``device_id``'s text, when the module moves there first
    device: str | None = None
    #: the mesh a process group became: ``sync_module_states`` broadcasts within its group
    group_mesh: str | None = None
    #: ``param_init_fn``'s text: ``fsdp2_port.materialize_like_fsdp1`` runs it as FSDP1 did
    init_fn: str | None = None
    #: when the BatchNorm exception applies only at run time (mixed precision chosen there)
    norms_when: str | None = None
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

    @property
    def reads_module_before(self) -> bool:
        """Code before the root's ``fully_shard`` reads the module (init, move, broadcast,
        buffer casts, the unit loop)."""
        return (
            self.init_fn is not None
            or self.selects is not None
            or self.device is not None
            or self.buffer_dtype is not None
            or self.sync is not None
        )

    @property
    def writes_lines_before(self) -> bool:
        """Lines go before the call's statement: it must stand alone and hold the call."""
        return self.reads_module_before or bool(self.bound_first)

    #: ``buffer_dtype``'s text: floating buffers are cast to it
    buffer_dtype: str | None = None
    #: the param dtype's text when FSDP1 keeps BatchNorm units in full precision (a policy
    #: with mixed precision: ``MixedPrecision._module_classes_to_ignore``'s default)
    full_precision_norms: str | None = None
    #: the module is an expression read more than once (``FSDP(Net(), ...)`` with a policy):
    #: it is bound to a name first, once
    hoisted: bool = False
    #: ``(name, expression)`` evaluated once before anything else, as FSDP1 evaluated its
    #: arguments (a mesh from a process group, a dtype computed at run time)
    bound_first: list[tuple[str, str]] = field(default_factory=list)


def pure(analysis: FileAnalysis, call: ast.Call) -> Pure:
    """The plain FSDP2 conversion of a constructor call, or what blocks it."""
    out = Pure()
    if not _read_arguments(analysis, call, out):
        return out
    values = out.values
    out.names.add("fully_shard")
    device = values.get("device_id")
    if device is not None and not calls.is_none(device):
        # read more than once below: a call with effects is evaluated once, first
        simple = calls.is_simple(device) or _device_call(analysis, device)
        out.device = (
            analysis.source(device) if simple else _once(analysis, call, out, "device_id", device)
        )
    _strategy_and_mesh(analysis, call, out)
    _process_group(analysis, call, out)
    _mixed_precision(analysis, call, out)
    _offload(analysis, call, out)
    _wrap_policy(analysis, call, out)
    for name in ("ignored_modules", "ignored_states"):
        if name in values and not calls.is_none(values[name]):
            out.blockers.append(f"{name} is set")
    init = values.get("param_init_fn")
    if init is not None and not calls.is_none(init):
        if analysis.options.runtime_dependency:
            source = analysis.source(init)
            out.init_fn = (
                _once(analysis, call, out, "param_init_fn", init) if "\n" in source else source
            )
        else:
            out.blockers.append("param_init_fn is set (fsdp2_port.materialize_like_fsdp1 runs it)")
    _sync(analysis, out)
    for name in _NO_EFFECT:
        value = values.get(name)
        if value is not None and not (calls.is_simple(value) or _is_fsdp1(analysis, value)):
            out.blockers.append(f"{name} is computed by a call: assign it to a name first")
    out.hoisted = out.reads_module_before and not calls.is_simple(out.module)  # type: ignore[arg-type]
    if out.full_precision_norms is not None:
        out.names.add("MixedPrecisionPolicy")
    return out


# -- arguments -----------------------------------------------------------------------------------


def _read_arguments(analysis: FileAnalysis, call: ast.Call, out: Pure) -> bool:
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
            if name not in PARAMETERS or name in out.values or (name == "module" and out.module):
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
    """The entries of ``**name`` when ``name`` is a ``dict(...)``/``{...}`` of literal keys
    bound once and read only by constructors' ``**``."""
    binding = _binding(analysis, value)
    entries = _dict_entries(analysis, binding.value) if binding and binding.value else None
    if binding is None or entries is None:
        out.blockers.append("**kwargs that are not a dict of literal keys bound here")
        return None
    users = _spread_users(analysis, binding)
    if users is None:
        out.blockers.append("**kwargs read by other code than FSDP(...) calls")
        return None
    out.removable.append(Removable(SPREAD, analysis.names.statement(binding.node), users))
    return entries


def _dict_entries(analysis: FileAnalysis, value: ast.expr) -> dict[str, ast.expr] | None:
    if isinstance(value, ast.Dict):
        if not all(isinstance(k, ast.Constant) and isinstance(k.value, str) for k in value.keys):
            return None
        return {k.value: v for k, v in zip(value.keys, value.values)}  # type: ignore[union-attr]
    if (
        isinstance(value, ast.Call)
        and analysis.resolves_to(value.func, "builtins.dict")
        and not value.args
        and all(k.arg is not None for k in value.keywords)
    ):
        return {k.arg: k.value for k in value.keywords}  # type: ignore[misc]
    return None


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


def _resolved(
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
    for use in analysis.uses_of(binding):
        found = _reader(analysis, use, what)
        if found is None:
            return None, None, f"{what} is read by other code than FSDP(...) calls"
        users |= found
    statement = analysis.names.statement(binding.node)
    return binding.value, Removable(what, statement, frozenset(users)), None


def _inlined_once(removable: Removable | None, value: ast.expr) -> bool:
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


def _at_run_time(analysis: FileAnalysis, call: ast.Call, out: Pure, what: str) -> str | None:
    """The call's own text for ``what`` (bound first when it must be evaluated once), for an
    ``fsdp2_port`` reader to turn into its FSDP2 value at run time; None without the runtime
    dependency."""
    if not analysis.options.runtime_dependency:
        return None
    out.read_at_run_time.append(what)
    return _once(analysis, call, out, what, out.values[what])


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
    return _spread_users(analysis, binding) if binding is not None else None


def _private_constant(analysis: FileAnalysis, statement: ast.stmt, name: str) -> bool:
    """A module-level constant no other module can import: ``_NAME``, or any name of a script
    (a file that runs ``if __name__ == "__main__"``). Inlining it and removing it is safe."""
    if not isinstance(analysis.names.parent.get(statement), ast.Module):
        return False
    return name.startswith("_") or any(
        isinstance(node, ast.If)
        and isinstance(node.test, ast.Compare)
        and isinstance(node.test.left, ast.Name)
        and node.test.left.id == "__name__"
        for node in analysis.tree.body
    )


# -- what each argument becomes ------------------------------------------------------------------


def _strategy_and_mesh(analysis: FileAnalysis, call: ast.Call, out: Pure) -> None:
    """``sharding_strategy`` -> ``reshard_after_forward`` (and the mesh). A strategy written
    here that needs no mesh of its own becomes its value; any other (hybrid without a mesh,
    NO_SHARD, one only the run knows) goes to ``fsdp2_port``'s readers, which build the
    mesh FSDP1 would have used from the group, mesh and device it was given."""
    mesh = out.values.get("device_mesh")
    mesh = None if mesh is None or calls.is_none(mesh) else mesh
    given = out.values.get("sharding_strategy")
    if _chosen_strategy(analysis, call, out):
        given = None
    elif given is not None and not calls.is_none(given):
        strategy, removable, blocker = _resolved(analysis, out, "sharding_strategy")
        reshard = kind = None
        if strategy is not None:
            kind = (analysis.fsdp1_name(strategy) or "").removeprefix("ShardingStrategy.")
            if kind.startswith(("HYBRID", "_HYBRID")) and mesh is not None:
                reshard = str(_RESHARD[kind])
            elif not kind.startswith(("HYBRID", "_HYBRID")):
                reshard = _reshard(analysis, strategy)
        device_type = _device_type(analysis, out.values.get("device_id"))
        if (
            reshard is None
            and kind == "NO_SHARD"
            and device_type is not None
            and not any(
                n in out.values and not calls.is_none(out.values[n])
                for n in ("process_group", "device_mesh")
            )
        ):
            # FSDP1's replicas, as plain torch
            out.removable += [removable] if removable else []
            name = _fresh(analysis, call, out, "mesh")
            out.bound_first.append((name, _mesh_of(kind, device_type)))
            out.names.add("init_device_mesh")
            out.uses_torch = True
            out.group_mesh, out.mesh_any_dims = name, True
            out.root += [f"mesh={name}", f"reshard_after_forward={_MESH_OF_ITS_OWN[kind]}"]
            out.children += [f"mesh={name}", f"reshard_after_forward={_MESH_OF_ITS_OWN[kind]}"]
        elif reshard is None and kind in _MESH_OF_ITS_OWN and analysis.options.runtime_dependency:
            # the value is known, the mesh (FSDP1's default groups) only at run time
            out.removable += [removable] if removable else []
            out.read_at_run_time.append("sharding_strategy")
            _mesh_at_run_time(analysis, call, out, analysis.source(strategy))  # type: ignore[arg-type]
            text = f"reshard_after_forward={_MESH_OF_ITS_OWN[kind]}"
            out.root.append(text)
            out.children.append(text)
        elif reshard is not None:
            out.removable += [removable] if removable else []
            text = f"reshard_after_forward={reshard}"
            out.root.append(text)
            out.children.append(text)
        else:
            strategy_text = _at_run_time(analysis, call, out, "sharding_strategy")
            if strategy_text is None:
                out.blockers.append(
                    blocker
                    or "sharding_strategy is not FULL_SHARD/SHARD_GRAD_OP (or a choice between "
                    "them written here)"
                )
                return
            _mesh_at_run_time(analysis, call, out, strategy_text)
            reshard = _fresh(analysis, call, out, "reshard_after_forward")
            reader = f"fsdp2_port.reshard_after_forward_like_fsdp1({strategy_text})"
            out.bound_first.append((reshard, reader))
            text = f"reshard_after_forward={reshard}"
            out.root.append(text)
            out.children.append(text)
            return
    if mesh is not None:
        out.group_mesh = _once(analysis, call, out, "device_mesh", mesh)
        out.mesh_any_dims = True
        text = f"mesh={out.group_mesh}"
        out.root.insert(0, text)
        out.children.insert(0, text)


def _mesh_at_run_time(
    analysis: FileAnalysis, call: ast.Call, out: Pure, strategy: str | None
) -> None:
    """``mesh = fsdp2_port.mesh_like_fsdp1(...)``, bound once, first: the mesh FSDP1 would
    have used for the strategy, group, mesh and device it was given."""
    arguments = [strategy] if strategy is not None else []
    for name in ("process_group", "device_mesh"):
        value = out.values.get(name)
        if value is not None and not calls.is_none(value):
            source = analysis.source(value)
            text = _once(analysis, call, out, name, value) if "\n" in source else source
            arguments.append(f"{name}={text}")
    if out.device is not None:
        arguments.append(f"device_id={out.device}")
    mesh = _fresh(analysis, call, out, "mesh")
    out.bound_first.append((mesh, f"fsdp2_port.mesh_like_fsdp1({', '.join(arguments)})"))
    out.group_mesh = mesh
    out.mesh_any_dims = True
    out.root.insert(0, f"mesh={mesh}")
    out.children.insert(0, f"mesh={mesh}")


def _chosen(
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


def _chosen_strategy(analysis: FileAnalysis, call: ast.Call, out: Pure) -> bool:
    """A strategy chosen in branches: a name bound in the call's scope more than once, each
    time to FULL_SHARD or SHARD_GRAD_OP (or a choice between them), read by this call only.
    Each binding is rewritten to the ``reshard_after_forward`` it means, under that name
    (when it is free), and the call reads it."""
    name = out.values.get("sharding_strategy")
    bindings = _chosen(analysis, call, name, "sharding_strategy")
    if bindings is None or not all(
        isinstance(analysis.names.statement(b.node), ast.Assign) for b in bindings
    ):
        return False  # (an annotated binding would keep its FSDP1 annotation)
    assert isinstance(name, ast.Name)
    scope = analysis.names.scope_of(call)
    values = [_reshard(analysis, b.value) for b in bindings]  # type: ignore[arg-type]
    if any(v is None for v in values):
        return _chosen_strategy_and_mesh(analysis, call, out, bindings)
    free = analysis.names.lookup("reshard_after_forward", scope)[0] is None
    renamed = "reshard_after_forward" if free else name.id
    for binding, value in zip(bindings, values):
        out.edits.append(analysis.replace(binding.value, value))  # type: ignore[arg-type]
        if free:
            out.edits.append(analysis.replace(binding.node, renamed))
    text = f"reshard_after_forward={renamed}"
    out.root.append(text)
    out.children.append(text)
    return True


def _chosen_strategy_and_mesh(
    analysis: FileAnalysis, call: ast.Call, out: Pure, bindings: list[Binding]
) -> bool:
    """A strategy chosen in branches between FULL_SHARD, SHARD_GRAD_OP and NO_SHARD, the
    device type written at the call, no group or mesh given: each binding becomes the pair it
    means, ``reshard_after_forward, mesh = <bool>, init_device_mesh(...)``, the mesh FSDP1
    would have sharded over (``_mesh_of``)."""
    device_type = _device_type(analysis, out.values.get("device_id"))
    if device_type is None or any(
        name in out.values and not calls.is_none(out.values[name])
        for name in ("process_group", "device_mesh")
    ):
        return False
    kinds = [
        (analysis.fsdp1_name(b.value) or "").removeprefix("ShardingStrategy.")  # type: ignore[arg-type]
        for b in bindings
    ]
    if not all(kind in _MESH_IN_TORCH for kind in kinds):
        return False
    reshard = _fresh(analysis, call, out, "reshard_after_forward")
    mesh = _fresh(analysis, call, out, "mesh")
    for binding, kind in zip(bindings, kinds):
        statement = analysis.names.statement(binding.node)
        assert isinstance(statement, ast.Assign) and binding.value is not None
        pair = f"{_MESH_IN_TORCH[kind]}, {_mesh_of(kind, device_type)}"
        out.edits.append(analysis.replace(statement.targets[0], f"{reshard}, {mesh}"))
        out.edits.append(analysis.replace(binding.value, pair))
    out.names.add("init_device_mesh")
    out.uses_torch = True
    out.group_mesh, out.mesh_any_dims = mesh, True
    out.root += [f"mesh={mesh}", f"reshard_after_forward={reshard}"]
    out.children += [f"mesh={mesh}", f"reshard_after_forward={reshard}"]
    return True


def _mesh_of(kind: str, device_type: str) -> str:
    """``init_device_mesh(...)`` for the mesh FSDP1 shards over with strategy ``kind`` and
    its default group: the world, or (NO_SHARD) the world's replicas of one rank each."""
    world = "torch.distributed.get_world_size()"
    if kind == "NO_SHARD":
        names = 'mesh_dim_names=("replicate", "shard")'
        return f'init_device_mesh("{device_type}", ({world}, 1), {names})'
    return f'init_device_mesh("{device_type}", ({world},))'


def _reshard(analysis: FileAnalysis, node: ast.expr) -> str | None:
    """``reshard_after_forward``'s text for a choice between non-hybrid strategies written
    here: ``{"fsdp": FULL_SHARD, "sdp": SHARD_GRAD_OP}[key]``, ``A if flag else B``."""
    kind = (analysis.fsdp1_name(node) or "").removeprefix("ShardingStrategy.")
    if kind in ("FULL_SHARD", "SHARD_GRAD_OP"):
        return str(_RESHARD[kind])
    if isinstance(node, ast.IfExp) and _is_flag(node.test):
        body, orelse = _reshard(analysis, node.body), _reshard(analysis, node.orelse)
        if body is not None and orelse is not None:
            return f"{body} if {analysis.source(node.test)} else {orelse}"
    if (
        isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Dict)
        and _is_flag(node.slice)
        and all(isinstance(k, ast.Constant) for k in node.value.keys)
    ):
        texts = [_reshard(analysis, v) for v in node.value.values]
        if all(x is not None for x in texts):
            keys = [analysis.source(k) for k in node.value.keys]  # type: ignore[arg-type]
            pairs = ", ".join(f"{k}: {x}" for k, x in zip(keys, texts))
            return f"{{{pairs}}}[{analysis.source(node.slice)}]"
    return None


def _process_group(analysis: FileAnalysis, call: ast.Call, out: Pure) -> None:
    """A process group other than WORLD: a 1-D mesh over it, built once; its device type is
    the one ``device_id`` names (FSDP1 took it from there), or, when nothing written here
    names it, the one ``fsdp2_port.mesh_like_fsdp1`` finds at run time."""
    group = out.values.get("process_group")
    if group is None or calls.is_none(group):
        return
    if out.mesh_any_dims and "device_mesh" not in out.values:
        return  # fsdp2_port.mesh_like_fsdp1 took it
    if analysis.resolves_to(group, "torch.distributed.group.WORLD"):
        return
    if isinstance(group, ast.Tuple) or "device_mesh" in out.values:
        out.blockers.append("process_group is a pair of groups (or comes with device_mesh)")
        return
    device_type = _device_type(analysis, out.values.get("device_id"))
    if device_type is None:
        if not analysis.options.runtime_dependency:
            out.blockers.append("process_group without a device_id naming the device type")
            return
        out.read_at_run_time.append("process_group")
        _mesh_at_run_time(analysis, call, out, None)
        return
    name = _fresh(analysis, call, out, "mesh")
    mesh = f'DeviceMesh.from_group({analysis.source(group)}, "{device_type}")'
    out.bound_first.append((name, mesh))
    out.names.add("DeviceMesh")
    out.group_mesh = name
    out.root.insert(0, f"mesh={name}")
    out.children.insert(0, f"mesh={name}")


def _device_type(analysis: FileAnalysis, device: ast.expr | None) -> str | None:
    """``"cuda"`` for ``torch.cuda.current_device()`` or ``torch.device("cuda", ...)``."""
    if not isinstance(device, ast.Call):
        return None
    if analysis.resolves_to(device.func, "torch.cuda.current_device"):
        return "cuda"
    if analysis.resolves_to(device.func, "torch.device") and device.args:
        first = device.args[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            return first.value.split(":")[0]
    return None


def _fresh(analysis: FileAnalysis, call: ast.Call, out: Pure, base: str) -> str:
    """A name free in the call's scope (and not taken by this rewrite)."""
    scope = analysis.names.scope_of(call)
    taken = {name for name, _ in out.bound_first}
    for name in (base, f"fsdp_{base}", f"fsdp2_{base}"):
        if name not in taken and analysis.names.lookup(name, scope)[0] is None:
            return name
    return f"fsdp2_{base}_{len(taken)}"


def _mixed_precision(analysis: FileAnalysis, call: ast.Call, out: Pure) -> None:
    """``MixedPrecision`` -> ``MixedPrecisionPolicy``: written here (or chosen here between
    None and one that only reduces in another dtype), or read by ``fsdp2_port`` at run time
    (a policy built elsewhere, flags only the run knows)."""
    if _chosen_mixed_precision(analysis, call, out):
        return
    value, removable, blocker = _resolved(analysis, out, "mixed_precision")
    if (
        value is not None
        and _inlined_once(removable, value)
        and _literal_mixed_precision(analysis, call, out, value)
    ):
        out.removable += [removable] if removable else []
        return
    if value is None and blocker is None:
        return
    name = _at_run_time(analysis, call, out, "mixed_precision")
    if name is None:
        out.blockers.append(blocker or "mixed_precision is not a literal MixedPrecision(...)")
        return
    reader = "fsdp2_port.mp_policy_like_fsdp1"
    out.root.append(f"mp_policy={reader}({name}, root=True)")
    out.children.append(f"mp_policy={reader}({name})")
    out.mixed_precision = name
    out.buffer_dtype, out.buffer_when = f"{name}.buffer_dtype", f"{name} is not None"
    out.full_precision_norms, out.norms_when = f"{name}.param_dtype", f"{name} is not None"


def _literal_mixed_precision(
    analysis: FileAnalysis, call: ast.Call, out: Pure, value: ast.expr
) -> bool:
    """A ``MixedPrecision(...)`` written here whose flags are literals, as FSDP2 values;
    False (``out`` untouched) for anything else."""
    if not (isinstance(value, ast.Call) and analysis.fsdp1_name(value.func) == "MixedPrecision"):
        return False
    bound = calls.bind(value, _MIXED)
    if bound is None or "_module_classes_to_ignore" in bound:
        return False
    flags = {n: calls.literal_bool(bound[n].value) for n in bound if n.startswith(("cast", "keep"))}
    if any(v is None for v in flags.values()) or flags.get("keep_low_precision_grads"):
        return False
    dtypes: dict[str, str] = {}
    for name in ("param_dtype", "reduce_dtype", "buffer_dtype"):
        if name in bound and not calls.is_none(bound[name].value):
            dtypes[name] = _once(analysis, call, out, name, bound[name].value)
    fields = [
        f"{name}={dtypes[name]}" for name in ("param_dtype", "reduce_dtype") if name in dtypes
    ]
    out.buffer_dtype = dtypes.get("buffer_dtype")
    # kept only with a policy (see _wrap_policy)
    out.full_precision_norms = dtypes.get("param_dtype", "None")
    root_cast = flags.get("cast_root_forward_inputs", True) or flags.get(
        "cast_forward_inputs", False
    )
    child_cast = flags.get("cast_forward_inputs", False)
    out.mixed_precision = "MixedPrecisionPolicy()"
    if not fields:
        return True
    out.names.add("MixedPrecisionPolicy")
    root = ", ".join(fields + ([] if root_cast else ["cast_forward_inputs=False"]))
    child = ", ".join(fields + ([] if child_cast else ["cast_forward_inputs=False"]))
    out.root.append(f"mp_policy=MixedPrecisionPolicy({root})")
    out.children.append(f"mp_policy=MixedPrecisionPolicy({child})")
    out.mixed_precision = f"MixedPrecisionPolicy({root})"
    return True


def _chosen_mixed_precision(analysis: FileAnalysis, call: ast.Call, out: Pure) -> bool:
    """Mixed precision chosen at run time (verl's ``mp = MixedPrecision(...)`` then
    ``if ref: mp = None``): a name bound in the call's scope more than once, each time to None
    or to a ``MixedPrecision`` of dtypes only, read by this call only. Each becomes the
    ``MixedPrecisionPolicy`` it means where it is written: FSDP1's root's (it casts its
    inputs), the units' a copy that does not (``cast_forward_inputs=False``). A
    ``buffer_dtype`` goes to the casts before sharding: it must be one value, written the
    same in every binding and not rebound after the first."""
    name = out.values.get("mixed_precision")
    bindings = _chosen(analysis, call, name, "mixed_precision")
    if bindings is None:
        return False
    assert isinstance(name, ast.Name)
    edits: list[Edit] = []
    casts = False
    buffers: set[str | None] = set()
    for binding in bindings:
        value = binding.value
        assert value is not None
        if calls.is_none(value):
            continue
        if not (
            isinstance(value, ast.Call) and analysis.fsdp1_name(value.func) == "MixedPrecision"
        ):
            return False
        bound = calls.bind(value, _MIXED)
        if bound is None or set(bound) - {"reduce_dtype", "param_dtype", "buffer_dtype"}:
            return False
        casts |= "param_dtype" in bound and not calls.is_none(bound["param_dtype"].value)
        buffer = bound.get("buffer_dtype")
        if buffer is not None and not calls.is_none(buffer.value):
            if not _written_before(analysis, buffer.value, bindings):
                return False
            buffers.add(analysis.source(buffer.value))
        else:
            buffers.add(None)
        edits.append(analysis.replace(value.func, "MixedPrecisionPolicy"))
        if buffer is not None:
            edits += calls.edit_arguments(analysis.lines, value, {buffer.node}, {})
    if len(buffers) > 1:
        return False
    out.edits += edits
    out.names.add("MixedPrecisionPolicy")
    mp = name.id
    out.root.append(f"mp_policy={mp} or MixedPrecisionPolicy()")
    if casts:
        out.child_modules.add("dataclasses")
        child = f"dataclasses.replace({mp}, cast_forward_inputs=False) if {mp} else "
        out.children.append(f"mp_policy={child}MixedPrecisionPolicy()")
    else:
        out.children.append(f"mp_policy={mp} or MixedPrecisionPolicy()")
    out.full_precision_norms = f"{mp}.param_dtype" if casts else "None"
    out.norms_when = f"{mp} is not None"
    buffer_dtype = next(iter(buffers), None)
    if buffer_dtype is not None:
        out.buffer_dtype, out.buffer_when = buffer_dtype, f"{mp} is not None"
    out.mixed_precision = mp
    return True


def _written_before(analysis: FileAnalysis, value: ast.expr, bindings: list[Binding]) -> bool:
    """Whether ``value`` reads later what it read at the first of ``bindings``: a dtype of
    ``torch``, or a name bound only in their scope and only before them."""
    if analysis.resolves_to(value, *(f"torch.{t}" for t in _DTYPES)):
        return True
    if not isinstance(value, ast.Name):
        return False
    scope = analysis.names.scope_of(value)
    first = min(b.node.lineno for b in bindings)  # type: ignore[attr-defined]
    own = analysis.names.bindings_of(value)
    return bool(own) and all(
        analysis.names.scope_of(b.node) is scope and b.node.lineno < first  # type: ignore[attr-defined]
        for b in own
    )


def _once(analysis: FileAnalysis, call: ast.Call, out: Pure, base: str, value: ast.expr) -> str:
    """A value's text where the rewrite may read it several times: its own when it reads the
    same every time, else a name it is bound to first (evaluated once, as FSDP1 did)."""
    if calls.is_simple(value):
        return analysis.source(value)
    name = _fresh(analysis, call, out, base)
    out.bound_first.append((name, _dedented(analysis, value)))
    return name


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


def _offload(analysis: FileAnalysis, call: ast.Call, out: Pure) -> None:
    """``CPUOffload`` -> ``CPUOffloadPolicy``: written here (or ``CPUOffload(...) if flag else
    None``, or a name bound to these in branches), or read by ``fsdp2_port`` at run time."""
    if _chosen_offload(analysis, call, out):
        return
    value, removable, blocker = _resolved(analysis, out, "cpu_offload")
    if value is None and blocker is None:
        return
    chosen = None
    if value is not None and _inlined_once(removable, value):
        chosen = _literal_offload(analysis, call, out, value)
    if chosen is not None:
        out.removable += [removable] if removable else []
        if chosen:
            out.names.update(re.findall(r"\b(CPUOffloadPolicy|OffloadPolicy)\(", chosen))
            out.root.append(f"offload_policy={chosen}")
            out.children.append(f"offload_policy={chosen}")
        return
    name = _at_run_time(analysis, call, out, "cpu_offload")
    if name is None:
        out.blockers.append(blocker or "cpu_offload is not a literal CPUOffload(...) (or a choice)")
        return
    mesh = f", {out.group_mesh}" if out.group_mesh is not None else ""
    text = f"offload_policy=fsdp2_port.offload_policy_like_fsdp1({name}{mesh})"
    out.root.append(text)
    out.children.append(text)


def _chosen_offload(analysis: FileAnalysis, call: ast.Call, out: Pure) -> bool:
    """Offload chosen in branches: a name bound in the call's scope more than once, each time
    to None or a ``CPUOffload(...)``, read by this call only. Each binding becomes the
    ``OffloadPolicy`` it means where it is written (its flag evaluated there, once, as
    before); the call reads the name."""
    name = out.values.get("cpu_offload")
    bindings = _chosen(analysis, call, name, "cpu_offload")
    if bindings is None or not all(
        isinstance(analysis.names.statement(b.node), ast.Assign) for b in bindings
    ):
        return False
    assert isinstance(name, ast.Name)
    edits = []
    for binding in bindings:
        assert binding.value is not None
        offloads = _offloads(analysis, binding.value)
        if offloads is None:
            return False
        if isinstance(offloads, ast.expr):
            text = f"CPUOffloadPolicy() if {analysis.source(offloads)} else OffloadPolicy()"
        else:
            text = "CPUOffloadPolicy()" if offloads else "OffloadPolicy()"
        out.names.update(re.findall(r"\b(CPUOffloadPolicy|OffloadPolicy)\(", text))
        edits.append(analysis.replace(binding.value, text))
    out.edits += edits
    out.root.append(f"offload_policy={name.id}")
    out.children.append(f"offload_policy={name.id}")
    return True


def _literal_offload(
    analysis: FileAnalysis, call: ast.Call, out: Pure, value: ast.expr
) -> str | None:
    """The ``offload_policy`` text of a ``CPUOffload`` written here ("" when it offloads
    nothing); None when it is not one."""
    if isinstance(value, ast.IfExp):  # CPUOffload(...) if flag else None
        if not _is_flag(value.test):
            return None
        branches = [_offloads(analysis, b) for b in (value.body, value.orelse)]
        if None in branches or any(isinstance(b, ast.expr) for b in branches):
            return None
        if branches[0] == branches[1]:
            return "CPUOffloadPolicy()" if branches[0] else ""
        policies = ["CPUOffloadPolicy()" if b else "OffloadPolicy()" for b in branches]
        return f"{policies[0]} if {analysis.source(value.test)} else {policies[1]}"
    offloads = _offloads(analysis, value)
    if isinstance(offloads, ast.expr):  # CPUOffload(offload_params=<a run-time flag>)
        flag = _once(analysis, call, out, "offload_params", offloads)
        return f"CPUOffloadPolicy() if {flag} else OffloadPolicy()"
    if offloads is None:
        return None
    return "CPUOffloadPolicy()" if offloads else ""


def _offloads(analysis: FileAnalysis, value: ast.expr) -> bool | ast.expr | None:
    """Whether a literal ``CPUOffload(...)`` (or None) offloads, or the run-time flag that
    decides it (FSDP1 tests its truth); None when it is not one."""
    if calls.is_none(value):
        return False
    if not (isinstance(value, ast.Call) and analysis.fsdp1_name(value.func) == "CPUOffload"):
        return None
    bound = calls.bind(value, ("offload_params",))
    if bound is None:
        return None
    if "offload_params" not in bound:
        return False
    flag = bound["offload_params"].value
    literal = calls.literal_bool(flag)
    return flag if literal is None else literal


def _wrap_policy(analysis: FileAnalysis, call: ast.Call, out: Pure) -> None:
    """``auto_wrap_policy`` -> the condition a unit meets: classes or a predicate written
    here, or membership in the units ``fsdp2_port.units_like_fsdp1`` selects at run time
    (any other policy: a library's, a size-based one, a user's callable)."""
    value, removable, blocker = _resolved(analysis, out, "auto_wrap_policy")
    if value is None and blocker is None:
        out.full_precision_norms = None  # FSDP1 overrides BatchNorm only under a policy
        return
    selects = _literal_policy(analysis, value) if value is not None else None
    if selects is not None:
        out.removable += [removable] if removable else []
        out.selects = selects
        return
    policy = _at_run_time(analysis, call, out, "auto_wrap_policy")
    if policy is None:
        out.blockers.append(
            blocker
            or "auto_wrap_policy is not transformer_auto_wrap_policy/ModuleWrapPolicy of "
            "classes or lambda_auto_wrap_policy"
        )
        return
    arguments = [ROOT, policy]
    if out.mixed_precision is not None:
        arguments.append(f"mixed_precision={out.mixed_precision}")
        if out.mixed_precision.startswith("MixedPrecisionPolicy("):
            out.names.add("MixedPrecisionPolicy")
    units = _fresh(analysis, call, out, "units")
    out.bound_first.append((units, f"fsdp2_port.units_like_fsdp1({', '.join(arguments)})"))
    out.selects = f"{UNIT} in {units}"


def _literal_policy(analysis: FileAnalysis, value: ast.expr) -> str | None:
    """The condition on ``UNIT`` of a policy written here, or None."""
    if not isinstance(value, ast.Call):
        return None
    policy = analysis.fsdp1_name(value.args[0]) if value.args else None
    keyword = value.keywords[0] if len(value.keywords) == 1 else None
    if (
        analysis.fsdp1_name(value.func) == "ModuleWrapPolicy"
        and len(value.args) == 1
        and not value.keywords
    ):
        return _classes(analysis, value.args[0])
    if (
        analysis.resolves_to(value.func, "functools.partial")
        and len(value.args) == 1
        and keyword is not None
    ):
        if policy == "transformer_auto_wrap_policy" and keyword.arg == "transformer_layer_cls":
            return _classes(analysis, keyword.value)
        if policy == "lambda_auto_wrap_policy" and keyword.arg == "lambda_fn":
            return _predicate(analysis, keyword.value)
    return None


def _predicate(analysis: FileAnalysis, fn: ast.expr) -> str | None:
    """``lambda_fn`` as a condition on ``UNIT``: a one-argument lambda's body with its
    argument replaced, or a call of a named function."""
    if calls.is_simple(fn) and not isinstance(fn, ast.Constant):
        return f"{analysis.source(fn)}({UNIT})"
    if not isinstance(fn, ast.Lambda) or len(fn.args.args) != 1 or _other_arguments(fn):
        return None
    argument = fn.args.args[0].arg
    rebinds = [
        n
        for n in ast.walk(fn.body)
        if isinstance(n, (ast.Lambda, ast.comprehension, ast.NamedExpr))
    ]
    if rebinds:
        return f"({analysis.source(fn)})({UNIT})"
    reads = sorted(
        (n for n in ast.walk(fn.body) if isinstance(n, ast.Name) and n.id == argument),
        key=lambda n: (n.lineno, n.col_offset),
    )
    text = analysis.source(fn.body)
    base = analysis.lines.start(fn.body)
    for read in reversed(reads):
        start, end = analysis.lines.start(read) - base, analysis.lines.end(read) - base
        text = text[:start] + UNIT + text[end:]
    if "\n" in text:
        return f"({analysis.source(fn)})({UNIT})"
    return f"({text})"


def _other_arguments(fn: ast.Lambda) -> bool:
    arguments = fn.args
    return bool(
        arguments.posonlyargs
        or arguments.kwonlyargs
        or arguments.vararg
        or arguments.kwarg
        or arguments.defaults
    )


def _classes(analysis: FileAnalysis, node: ast.expr) -> str | None:
    """The condition on ``UNIT`` for a policy's classes: a literal collection, or a name."""
    if isinstance(node, (ast.Set, ast.List, ast.Tuple)) and node.elts:
        if not all(calls.is_simple(e) and not isinstance(e, ast.Starred) for e in node.elts):
            return None
        kinds = [analysis.source(e) for e in node.elts]
        return f"isinstance({UNIT}, (" + ", ".join(kinds) + ("," if len(kinds) == 1 else "") + "))"
    if calls.is_simple(node) and not isinstance(node, ast.Constant):
        return f"isinstance({UNIT}, tuple({analysis.source(node)}))"
    return None


def _sync(analysis: FileAnalysis, out: Pure) -> None:
    sync = out.values.get("sync_module_states")
    if sync is None or calls.is_none(sync):
        return
    flag = calls.literal_bool(sync)
    if flag is None and not _is_flag(sync):
        out.blockers.append("sync_module_states is an expression: assign it to a name first")
    elif flag is not False:
        out.sync = "" if flag else analysis.source(sync)
        if out.group_mesh is not None and analysis.options.fsdp2_module != FSDP2_PUBLIC_MODULE:
            out.blockers.append("sync_module_states within a process group before torch 2.6")


def _is_flag(node: ast.expr) -> bool:
    """A value read without side effects: a name, an attribute chain, ``x["key"]``."""
    if isinstance(node, ast.Subscript):
        return _is_flag(node.value) and isinstance(node.slice, ast.Constant)
    return calls.is_simple(node)


def _is_fsdp1(analysis: FileAnalysis, node: ast.expr) -> bool:
    return isinstance(node, (ast.Name, ast.Attribute)) and analysis.fsdp1_name(node) is not None


def _device_call(analysis: FileAnalysis, node: ast.AST) -> bool:
    """``torch.device("cuda", 0)``, ``torch.cuda.current_device()``: a value with no side
    effect, safe to evaluate earlier."""
    return (
        isinstance(node, ast.Call)
        and analysis.resolves_to(node.func, *_DEVICE_FUNCTIONS)
        and all(calls.is_simple(x) for x in node.args)
        and not node.keywords
    )
