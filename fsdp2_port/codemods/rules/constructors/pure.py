"""The plain FSDP2 form of one FSDP1 constructor call, or what blocks it.

The arguments are read (``values``; a grown dict key by key, ``grown``), then each becomes
its FSDP2 value (``strategy``, ``precision``, ``policy``, ``ignored``) in an order that
matters: the mesh is settled before offload and ``sync_module_states`` read it, mixed
precision before the wrap policy reads it, and the policy, the broadcast and the
initialisation before ``ignored_modules`` reads them.
"""

from __future__ import annotations

import ast

from fsdp2_port.codemods import calls
from fsdp2_port.codemods.analysis import FileAnalysis
from fsdp2_port.codemods.assumptions import FSDP1_NO_EFFECT_ARGUMENTS
from fsdp2_port.codemods.rules.constructors.ignored import ignored
from fsdp2_port.codemods.rules.constructors.policy import wrap_policy
from fsdp2_port.codemods.rules.constructors.precision import mixed_precision, offload
from fsdp2_port.codemods.rules.constructors.strategy import (
    cpu_mesh,
    process_group,
    strategy_and_mesh,
    sync,
)
from fsdp2_port.codemods.rules.constructors.values import (
    Pure,
    device_call,
    is_fsdp1,
    once,
    read_arguments,
)


def _without_calls(value: ast.expr) -> bool:
    """Names, constants, attribute chains and what conditions and operators make of them
    (``True if lora else False``): dropping the expression drops no call."""
    return not any(
        isinstance(node, (ast.Call, ast.Lambda, ast.NamedExpr)) for node in ast.walk(value)
    )


def _conditional_policy(out: Pure) -> None:
    """A wrap policy a grown dict holds under a test: its units are sharded when it holds."""
    test = out.when.get("auto_wrap_policy")
    if test is None:
        return
    if "auto_wrap_policy" in out.read_at_run_time or out.init_fn is not None:
        out.blockers.append("auto_wrap_policy under a condition, read at run time or materialized")
    out.selects_when = test


def pure(analysis: FileAnalysis, call: ast.Call) -> Pure:
    """The plain FSDP2 conversion of a constructor call, or what blocks it."""
    out = Pure()
    if not read_arguments(analysis, call, out):
        return out
    values = out.values
    out.names.add("fully_shard")
    device = values.get("device_id")
    if device is not None and not calls.is_none(device):
        # read more than once below: a call with effects is evaluated once, first
        simple = calls.is_simple(device) or device_call(analysis, device)
        out.device = (
            analysis.source(device) if simple else once(analysis, call, out, "device_id", device)
        )
    strategy_and_mesh(analysis, call, out)
    process_group(analysis, call, out)
    cpu_mesh(analysis, call, out)
    mixed_precision(analysis, call, out)
    offload(analysis, call, out)
    wrap_policy(analysis, call, out)
    init = values.get("param_init_fn")
    if init is not None and not calls.is_none(init):
        if analysis.options.runtime_dependency:
            source = analysis.source(init)
            out.init_fn = (
                once(analysis, call, out, "param_init_fn", init) if "\n" in source else source
            )
        else:
            out.blockers.append("param_init_fn is set (fsdp2_port.materialize_like_fsdp1 runs it)")
    sync(analysis, out)
    ignored(analysis, call, out)
    _conditional_policy(out)
    for name in FSDP1_NO_EFFECT_ARGUMENTS:
        value = values.get(name)
        if value is not None and not (_without_calls(value) or is_fsdp1(analysis, value)):
            if name in out.when:
                out.blockers.append(f"{name} is computed under a condition")
            # FSDP2 has no use for it, but FSDP1 evaluated it: still evaluated, once, in order
            once(analysis, call, out, name, value)
    # the module is evaluated first, before the values bound first, as FSDP1 evaluated it
    out.hoisted = out.writes_lines_before and not calls.is_simple(out.module)  # type: ignore[arg-type]
    if out.full_precision_norms is not None:
        out.names.add("MixedPrecisionPolicy")
    if out.moves_per_unit:
        out.names.add("DTensor")
    return out
