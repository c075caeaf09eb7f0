"""``auto_wrap_policy``: the condition a submodule meets to be a unit (``Pure.selects``,
``UNIT`` standing for it), written as code where the policy is written here (classes, a
predicate), else membership in the units ``fsdp2_port.units_like_fsdp1`` selects at run time.

Invariant: without a policy there are no units, and no BatchNorm exception.
"""

from __future__ import annotations

import ast

from fsdp2_port.codemods import calls
from fsdp2_port.codemods.analysis import FileAnalysis
from fsdp2_port.codemods.assumptions import FSDP1_REQUIRED_POLICY_ARGUMENT
from fsdp2_port.codemods.rules.constructors.values import (
    ROOT,
    UNIT,
    Pure,
    at_run_time,
    fresh,
    resolved,
)


def wrap_policy(analysis: FileAnalysis, call: ast.Call, out: Pure) -> None:
    """``auto_wrap_policy`` -> the condition a unit meets: classes or a predicate written
    here, or membership in the units ``fsdp2_port.units_like_fsdp1`` selects at run time
    (any other policy: a library's, a size-based one, a user's callable)."""
    value, removable, blocker = resolved(analysis, out, "auto_wrap_policy")
    if value is None and blocker is None:
        out.full_precision_norms = None  # FSDP1 overrides BatchNorm only under a policy
        return
    selects = _literal_policy(analysis, value) if value is not None else None
    if selects is not None:
        out.removable += [removable] if removable else []
        out.selects = selects
        return
    given = (
        value if value is not None else _bound_once(analysis, out.values.get("auto_wrap_policy"))
    )
    if given is not None:
        _uncallable(analysis, given)
    why = blocker or (
        "auto_wrap_policy is not transformer_auto_wrap_policy/ModuleWrapPolicy of classes or "
        "lambda_auto_wrap_policy"
    )
    policy = at_run_time(analysis, call, out, "auto_wrap_policy", why)
    if policy is None:
        return
    arguments = [ROOT, policy]
    if out.mixed_precision is not None:
        arguments.append(f"mixed_precision={out.mixed_precision}")
        if out.mixed_precision.startswith("MixedPrecisionPolicy("):
            out.names.add("MixedPrecisionPolicy")
    units = fresh(analysis, call, out, "units")
    out.bound_first.append((units, f"fsdp2_port.units_like_fsdp1({', '.join(arguments)})"))
    out.selects = f"{UNIT} in {units}"


def _bound_once(analysis: FileAnalysis, value: ast.expr | None) -> ast.expr | None:
    """What a name bound once holds (a policy read elsewhere too stays a run-time value, but
    what it is can still be known)."""
    binding = analysis.sole_binding(value) if isinstance(value, ast.Name) else None
    return binding.value if binding is not None else None


def _uncallable(analysis: FileAnalysis, value: ast.expr) -> None:
    """A policy that lacks its own required argument (bare ``transformer_auto_wrap_policy``,
    OpenRLHF's) raises ``TypeError`` on its first call, under FSDP1 and in
    ``units_like_fsdp1`` alike: the migration keeps that, and marks it (code that catches the
    error never shards)."""
    bound = value
    keywords: set[str | None] = set()
    if isinstance(value, ast.Call) and analysis.resolves_to(value.func, "functools.partial"):
        bound = value.args[0] if value.args else value
        keywords = {k.arg for k in value.keywords}
    policy = analysis.fsdp1_name(bound)
    needed = FSDP1_REQUIRED_POLICY_ARGUMENT.get(policy or "")
    if needed is None or needed in keywords or None in keywords:
        return
    analysis.add(
        "F2P003",
        value,
        f"{policy} without {needed}: every call raises TypeError, FSDP1's as the migrated "
        "code's (code that catches it never shards): pass it",
        holds=False,
    )


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
    """``lambda_fn`` as a condition on ``UNIT``."""
    return calls.condition(analysis.lines, fn, UNIT)


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
