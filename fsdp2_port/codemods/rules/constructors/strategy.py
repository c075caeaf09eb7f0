"""``sharding_strategy``, ``device_mesh``, ``process_group`` and ``sync_module_states``: the
``reshard_after_forward`` and the mesh FSDP1's choice means, and the broadcast of the states.

Invariants: the root and every unit get the same ``mesh`` and ``reshard_after_forward``; a
mesh is evaluated once; ``sync_module_states`` broadcasts within the mesh a group became.
"""

from __future__ import annotations

import ast

from fsdp2_port.codemods import calls
from fsdp2_port.codemods.analysis import FileAnalysis
from fsdp2_port.codemods.assumptions import (
    FSDP1_OWN_MESH_STRATEGIES,
    FSDP1_RESHARD_AFTER_FORWARD,
    FSDP1_TORCH_MESH_STRATEGIES,
)
from fsdp2_port.codemods.names import Binding
from fsdp2_port.codemods.rules.constructors.values import (
    Pure,
    at_run_time,
    chosen,
    device_type_of,
    fresh,
    is_flag,
    once,
    resolved,
)

#: Where ``fully_shard`` lives from torch 2.6, which also broadcasts by ``group_src``.
FSDP2_PUBLIC_MODULE = "torch.distributed.fsdp"


def strategy_and_mesh(analysis: FileAnalysis, call: ast.Call, out: Pure) -> None:
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
        strategy, removable, blocker = resolved(analysis, out, "sharding_strategy")
        reshard = kind = None
        if strategy is not None:
            kind = (analysis.fsdp1_name(strategy) or "").removeprefix("ShardingStrategy.")
            if kind.startswith(("HYBRID", "_HYBRID")) and mesh is not None:
                reshard = str(FSDP1_RESHARD_AFTER_FORWARD[kind])
            elif not kind.startswith(("HYBRID", "_HYBRID")):
                reshard = _reshard(analysis, strategy)
        device_type = device_type_of(analysis, out.values.get("device_id"))
        if (
            reshard is None
            and kind == "NO_SHARD"
            and device_type is not None
            and not _group_or_mesh_given(out)
        ):
            # FSDP1's replicas, as plain torch
            out.removable += [removable] if removable else []
            name = fresh(analysis, call, out, "mesh")
            out.bound_first.append((name, _mesh_of(kind, device_type)))
            out.names.add("init_device_mesh")
            out.uses_torch = True
            out.group_mesh, out.mesh_any_dims = name, True
            out.root += [
                f"mesh={name}",
                f"reshard_after_forward={FSDP1_RESHARD_AFTER_FORWARD[kind]}",
            ]
            out.children += [
                f"mesh={name}",
                f"reshard_after_forward={FSDP1_RESHARD_AFTER_FORWARD[kind]}",
            ]
        elif (
            reshard is None
            and kind in FSDP1_OWN_MESH_STRATEGIES.members
            and analysis.options.runtime_dependency
        ):
            # the value is known, the mesh (FSDP1's default groups) only at run time
            out.removable += [removable] if removable else []
            out.read_at_run_time.append("sharding_strategy")
            _mesh_at_run_time(analysis, call, out, analysis.source(strategy))  # type: ignore[arg-type]
            text = f"reshard_after_forward={FSDP1_RESHARD_AFTER_FORWARD[kind]}"
            out.root.append(text)
            out.children.append(text)
        elif reshard is not None:
            out.removable += [removable] if removable else []
            text = f"reshard_after_forward={reshard}"
            out.root.append(text)
            out.children.append(text)
        else:
            why = blocker or (
                "sharding_strategy is not FULL_SHARD/SHARD_GRAD_OP (or a choice between them "
                "written here)"
            )
            strategy_text = at_run_time(analysis, call, out, "sharding_strategy", why)
            if strategy_text is None:
                return
            _mesh_at_run_time(analysis, call, out, strategy_text)
            reshard = fresh(analysis, call, out, "reshard_after_forward")
            reader = f"fsdp2_port.reshard_after_forward_like_fsdp1({strategy_text})"
            out.bound_first.append((reshard, reader))
            text = f"reshard_after_forward={reshard}"
            out.root.append(text)
            out.children.append(text)
            return
    if mesh is not None:
        out.group_mesh = once(analysis, call, out, "device_mesh", mesh)
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
            arguments.append(f"{name}={once(analysis, call, out, name, value)}")
    if out.device is not None:
        arguments.append(f"device_id={out.device}")
    mesh = fresh(analysis, call, out, "mesh")
    out.bound_first.append((mesh, f"fsdp2_port.mesh_like_fsdp1({', '.join(arguments)})"))
    out.group_mesh = mesh
    out.mesh_any_dims = True
    out.root.insert(0, f"mesh={mesh}")
    out.children.insert(0, f"mesh={mesh}")


def _chosen_strategy(analysis: FileAnalysis, call: ast.Call, out: Pure) -> bool:
    """A strategy chosen in branches: a name bound in the call's scope more than once, each
    time to FULL_SHARD or SHARD_GRAD_OP (or a choice between them), read by this call only.
    Each binding is rewritten to the ``reshard_after_forward`` it means, under that name
    (when it is free), and the call reads it."""
    name = out.values.get("sharding_strategy")
    bindings = chosen(analysis, call, name, "sharding_strategy")
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
    device_type = device_type_of(analysis, out.values.get("device_id"))
    if device_type is None or _group_or_mesh_given(out):
        return False
    kinds = [
        (analysis.fsdp1_name(b.value) or "").removeprefix("ShardingStrategy.")  # type: ignore[arg-type]
        for b in bindings
    ]
    if not all(kind in FSDP1_TORCH_MESH_STRATEGIES for kind in kinds):
        return False
    reshard = fresh(analysis, call, out, "reshard_after_forward")
    mesh = fresh(analysis, call, out, "mesh")
    for binding, kind in zip(bindings, kinds):
        statement = analysis.names.statement(binding.node)
        assert isinstance(statement, ast.Assign) and binding.value is not None
        pair = f"{FSDP1_RESHARD_AFTER_FORWARD[kind]}, {_mesh_of(kind, device_type)}"
        out.edits.append(analysis.replace(statement.targets[0], f"{reshard}, {mesh}"))
        out.edits.append(analysis.replace(binding.value, pair))
    out.names.add("init_device_mesh")
    out.uses_torch = True
    out.group_mesh, out.mesh_any_dims = mesh, True
    out.root += [f"mesh={mesh}", f"reshard_after_forward={reshard}"]
    out.children += [f"mesh={mesh}", f"reshard_after_forward={reshard}"]
    return True


def _group_or_mesh_given(out: Pure) -> bool:
    """The call names a process group or a device mesh (FSDP1's default group is not it)."""
    return any(
        name in out.values and not calls.is_none(out.values[name])
        for name in ("process_group", "device_mesh")
    )


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
        return str(FSDP1_RESHARD_AFTER_FORWARD[kind])
    if isinstance(node, ast.IfExp) and is_flag(node.test):
        body, orelse = _reshard(analysis, node.body), _reshard(analysis, node.orelse)
        if body is not None and orelse is not None:
            return f"{body} if {analysis.source(node.test)} else {orelse}"
    if (
        isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Dict)
        and is_flag(node.slice)
        and all(isinstance(k, ast.Constant) for k in node.value.keys)
    ):
        texts = [_reshard(analysis, v) for v in node.value.values]
        if all(x is not None for x in texts):
            keys = [analysis.source(k) for k in node.value.keys]  # type: ignore[arg-type]
            pairs = ", ".join(f"{k}: {x}" for k, x in zip(keys, texts))
            return f"{{{pairs}}}[{analysis.source(node.slice)}]"
    return None


def process_group(analysis: FileAnalysis, call: ast.Call, out: Pure) -> None:
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
    device_type = device_type_of(analysis, out.values.get("device_id"))
    if device_type is None:
        if not analysis.options.runtime_dependency:
            out.blockers.append("process_group without a device_id naming the device type")
            return
        out.read_at_run_time.append("process_group")
        _mesh_at_run_time(analysis, call, out, None)
        return
    name = fresh(analysis, call, out, "mesh")
    group_text = once(analysis, call, out, "process_group", group)
    mesh = f'DeviceMesh.from_group({group_text}, "{device_type}")'
    out.bound_first.append((name, mesh))
    out.names.add("DeviceMesh")
    out.group_mesh = name
    out.root.insert(0, f"mesh={name}")
    out.children.insert(0, f"mesh={name}")


def cpu_mesh(analysis: FileAnalysis, call: ast.Call, out: Pure) -> None:
    """``device_id`` names the CPU and no mesh is bound yet: the world's CPU mesh, bound once
    and given to every ``fully_shard``. FSDP1 computes where ``device_id`` says; without a
    mesh, ``fully_shard`` takes the machine's accelerator when it has one."""
    if out.group_mesh is not None or device_type_of(analysis, out.values.get("device_id")) != "cpu":
        return
    name = fresh(analysis, call, out, "mesh")
    out.bound_first.append((name, _mesh_of("FULL_SHARD", "cpu")))
    out.names.add("init_device_mesh")
    out.uses_torch = True
    out.group_mesh = name
    out.root.insert(0, f"mesh={name}")
    out.children.insert(0, f"mesh={name}")


def sync(analysis: FileAnalysis, out: Pure) -> None:
    sync = out.values.get("sync_module_states")
    if sync is None or calls.is_none(sync):
        return
    flag = calls.literal_bool(sync)
    if flag is None and not is_flag(sync):
        out.blockers.append("sync_module_states is an expression: assign it to a name first")
    elif flag is not False:
        out.sync = "" if flag else analysis.source(sync)
        if out.group_mesh is not None and analysis.options.fsdp2_module != FSDP2_PUBLIC_MODULE:
            out.blockers.append("sync_module_states within a process group before torch 2.6")
