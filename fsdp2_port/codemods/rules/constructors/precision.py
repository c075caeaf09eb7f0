"""``mixed_precision`` and ``cpu_offload``: the ``MixedPrecisionPolicy`` and
``OffloadPolicy`` they mean.

Invariants: ``buffer_dtype``, which FSDP2 lacks, becomes a cast of floating buffers before
sharding (``Pure.buffer_dtype``); a choice made in branches is rewritten where each branch
writes it, its flags evaluated there, once.
"""

from __future__ import annotations

import ast
import re

from fsdp2_port.codemods import calls
from fsdp2_port.codemods.analysis import FileAnalysis
from fsdp2_port.codemods.assumptions import DTYPE_NAMES, FSDP1_MIXED_PRECISION_FIELDS
from fsdp2_port.codemods.names import Binding
from fsdp2_port.codemods.rules.constructors.values import (
    Pure,
    at_run_time,
    chosen,
    device_type_of,
    fresh,
    inlined_once,
    is_flag,
    once,
    resolved,
)
from fsdp2_port.codemods.text import Edit

#: The FSDP2 offload classes an ``offload_policy`` text calls (the names it imports).
_POLICY_CLASSES = re.compile(r"\b(CPUOffloadPolicy|OffloadPolicy)\(")


def mixed_precision(analysis: FileAnalysis, call: ast.Call, out: Pure) -> None:
    """``MixedPrecision`` -> ``MixedPrecisionPolicy``: written here (or chosen here between
    None and one that only reduces in another dtype), or read by ``fsdp2_port`` at run time
    (a policy built elsewhere, flags only the run knows)."""
    if _chosen_mixed_precision(analysis, call, out):
        return
    value, removable, blocker = resolved(analysis, out, "mixed_precision")
    if _ignores_classes(analysis, value):
        # its own full-precision classes: read at run time (``full_precision_like_fsdp1``)
        blocker = blocker or "mixed_precision sets _module_classes_to_ignore"
    elif (
        value is not None
        and inlined_once(removable, value)
        and (
            _literal_mixed_precision(analysis, call, out, value)
            or _conditional_mixed_precision(analysis, out, value)
        )
    ):
        out.removable += [removable] if removable else []
        return
    if value is None and blocker is None:
        return
    why = blocker or "mixed_precision is not a literal MixedPrecision(...)"
    name = at_run_time(analysis, call, out, "mixed_precision", why)
    if name is None:
        return
    reader = "fsdp2_port.mp_policy_like_fsdp1"
    out.root.append(f"mp_policy={reader}({name}, root=True)")
    out.children.append(f"mp_policy={reader}({name})")
    out.mixed_precision = name
    # read by the readers too, so that the value may lose FSDP1's spelling (F2P013)
    out.buffer_dtype = fresh(analysis, call, out, "buffer_dtype")
    out.bound_first.append((out.buffer_dtype, f"fsdp2_port.buffer_dtype_like_fsdp1({name})"))
    out.full_precision_norms = f"{reader}({name}).param_dtype"
    out.norms_when = f"{name} is not None"
    out.norms = f"fsdp2_port.full_precision_like_fsdp1({name})"


def _ignores_classes(analysis: FileAnalysis, value: ast.expr | None) -> bool:
    """A ``MixedPrecision(...)`` written here that names the classes FSDP1 runs in full
    precision (``_module_classes_to_ignore``, BatchNorm by default)."""
    if not (isinstance(value, ast.Call) and analysis.fsdp1_name(value.func) == "MixedPrecision"):
        return False
    bound = calls.bind(value, FSDP1_MIXED_PRECISION_FIELDS.names)
    return bound is not None and "_module_classes_to_ignore" in bound


def _literal_mixed_precision(
    analysis: FileAnalysis, call: ast.Call, out: Pure, value: ast.expr
) -> bool:
    """A ``MixedPrecision(...)`` written here whose flags are literals, as FSDP2 values;
    False (``out`` untouched) for anything else."""
    if not (isinstance(value, ast.Call) and analysis.fsdp1_name(value.func) == "MixedPrecision"):
        return False
    bound = calls.bind(value, FSDP1_MIXED_PRECISION_FIELDS.names)
    if bound is None:
        return False
    flags = {n: calls.literal_bool(bound[n].value) for n in bound if n.startswith(("cast", "keep"))}
    if any(v is None for v in flags.values()) or flags.get("keep_low_precision_grads"):
        return False
    dtypes: dict[str, str] = {}
    for name in ("param_dtype", "reduce_dtype", "buffer_dtype"):
        if name in bound and not calls.is_none(bound[name].value):
            dtypes[name] = once(analysis, call, out, name, bound[name].value)
    fields = [
        f"{name}={dtypes[name]}" for name in ("param_dtype", "reduce_dtype") if name in dtypes
    ]
    out.buffer_dtype = dtypes.get("buffer_dtype")
    # kept only with a policy (see policy.wrap_policy)
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


def _conditional_mixed_precision(analysis: FileAnalysis, out: Pure, value: ast.expr) -> bool:
    """``MixedPrecision(...) if flag else None`` (either way round) of dtypes read without side
    effects: the ``MixedPrecisionPolicy`` it means when the flag says so, none otherwise. Every
    dtype is read only where the flag holds, as FSDP1 read it."""
    if not (isinstance(value, ast.IfExp) and is_flag(value.test)):
        return False
    nones = [calls.is_none(side) for side in (value.body, value.orelse)]
    policy = value.orelse if nones[0] else value.body
    if nones.count(True) != 1 or not (
        isinstance(policy, ast.Call) and analysis.fsdp1_name(policy.func) == "MixedPrecision"
    ):
        return False
    bound = calls.bind(policy, FSDP1_MIXED_PRECISION_FIELDS.names)
    if bound is None or set(bound) - {"param_dtype", "reduce_dtype", "buffer_dtype"}:
        return False
    dtypes = {n: a.value for n, a in bound.items() if not calls.is_none(a.value)}
    if not all(calls.is_simple(dtype) for dtype in dtypes.values()):
        return False
    test = analysis.source(value.test)
    when = f"not {test}" if nones[0] else test
    fields = [
        f"{n}={analysis.source(dtypes[n])}" for n in ("param_dtype", "reduce_dtype") if n in dtypes
    ]
    if "buffer_dtype" in dtypes:
        out.buffer_dtype, out.buffer_when = analysis.source(dtypes["buffer_dtype"]), when
    param = dtypes.get("param_dtype")
    out.full_precision_norms = analysis.source(param) if param is not None else "None"
    out.norms_when = when
    out.mixed_precision = f"MixedPrecisionPolicy({', '.join(fields)}) if {when} else None"
    out.names.add("MixedPrecisionPolicy")
    if fields:
        child = ", ".join([*fields, "cast_forward_inputs=False"])
        out.root.append(
            f"mp_policy=MixedPrecisionPolicy({', '.join(fields)}) if {when} else "
            "MixedPrecisionPolicy()"
        )
        out.children.append(
            f"mp_policy=MixedPrecisionPolicy({child}) if {when} else MixedPrecisionPolicy()"
        )
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
    bindings = chosen(analysis, call, name, "mixed_precision")
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
        bound = calls.bind(value, FSDP1_MIXED_PRECISION_FIELDS.names)
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
    out.edits += edits + _annotations_now_fsdp2(analysis, bindings)
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


def _annotations_now_fsdp2(analysis: FileAnalysis, bindings: list[Binding]) -> list[Edit]:
    """``mp: Optional[MixedPrecision] = None``: the name holds a ``MixedPrecisionPolicy`` now,
    and its annotation says so (FM_KD's)."""
    edits = []
    for binding in bindings:
        statement = analysis.names.statement(binding.node)
        if isinstance(statement, ast.AnnAssign):
            for node in ast.walk(statement.annotation):
                if (
                    isinstance(node, (ast.Name, ast.Attribute))
                    and analysis.fsdp1_name(node) == "MixedPrecision"
                ):
                    edits.append(analysis.replace(node, "MixedPrecisionPolicy"))
    return edits


def _written_before(analysis: FileAnalysis, value: ast.expr, bindings: list[Binding]) -> bool:
    """Whether ``value`` reads later what it read at the first of ``bindings``: a dtype of
    ``torch``, or a name bound only in their scope and only before them."""
    if analysis.resolves_to(value, *(f"torch.{t}" for t in DTYPE_NAMES)):
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


def offload(analysis: FileAnalysis, call: ast.Call, out: Pure) -> None:
    """``CPUOffload`` -> ``CPUOffloadPolicy``: written here (or ``CPUOffload(...) if flag else
    None``, or a name bound to these in branches), or read by ``fsdp2_port`` at run time."""
    if _chosen_offload(analysis, call, out):
        return
    value, removable, blocker = resolved(analysis, out, "cpu_offload")
    if value is None and blocker is None:
        return
    literal = None
    if value is not None and inlined_once(removable, value):
        literal = _literal_offload(analysis, call, out, value)
    if literal is not None:
        out.removable += [removable] if removable else []
        if literal:
            out.names.update(_POLICY_CLASSES.findall(literal))
            out.root.append(f"offload_policy={literal}")
            out.children.append(f"offload_policy={literal}")
        return
    why = blocker or "cpu_offload is not a literal CPUOffload(...) (or a choice)"
    name = at_run_time(analysis, call, out, "cpu_offload", why)
    if name is None:
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
    bindings = chosen(analysis, call, name, "cpu_offload")
    if bindings is None or not all(
        isinstance(analysis.names.statement(b.node), ast.Assign) for b in bindings
    ):
        return False
    assert isinstance(name, ast.Name)
    cpu = _cpu_offload_policy(analysis, out)
    edits = []
    for binding in bindings:
        assert binding.value is not None
        offloads = _offloads(analysis, binding.value)
        if offloads is None:
            return False
        if isinstance(offloads, ast.expr):
            text = f"{cpu} if {analysis.source(offloads)} else OffloadPolicy()"
        else:
            text = cpu if offloads else "OffloadPolicy()"
        out.names.update(_POLICY_CLASSES.findall(text))
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
    cpu = _cpu_offload_policy(analysis, out)
    if isinstance(value, ast.IfExp):  # CPUOffload(...) if flag else None
        if not is_flag(value.test):
            return None
        branches = [_offloads(analysis, b) for b in (value.body, value.orelse)]
        if None in branches or any(isinstance(b, ast.expr) for b in branches):
            return None
        if branches[0] == branches[1]:
            return cpu if branches[0] else ""
        policies = [cpu if b else "OffloadPolicy()" for b in branches]
        return f"{policies[0]} if {analysis.source(value.test)} else {policies[1]}"
    offloads = _offloads(analysis, value)
    if isinstance(offloads, ast.expr):  # CPUOffload(offload_params=<a run-time flag>)
        flag = once(analysis, call, out, "offload_params", offloads)
        return f"{cpu} if {flag} else OffloadPolicy()"
    if offloads is None:
        return None
    return cpu if offloads else ""


def _cpu_offload_policy(analysis: FileAnalysis, out: Pure) -> str:
    """``CPUOffloadPolicy()``, pinning the CPU copies (FSDP1 pins them), except when
    ``device_id`` says the run is on the CPU, where there is nothing to pin for
    (``fsdp2_port.offload_policy_like_fsdp1``'s rule)."""
    if device_type_of(analysis, out.values.get("device_id")) == "cpu":
        return "CPUOffloadPolicy(pin_memory=False)"
    return "CPUOffloadPolicy()"


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
