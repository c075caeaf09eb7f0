"""F2P014's second form: the norm a clip returns, all-reduced where it arrives.

``torch.nn.utils.clip_grad_norm_`` (and every function of the run that returns what it
returns, ``summaries``: an optimizer's ``step()``) gives, on FSDP1's flat shards, one rank's
piece of the gradient norm: a caller that squares it and all-reduces the square completes it.
On FSDP2's DTensors it gives the whole norm, so that all-reduce counts it once per rank (and
``dist.all_reduce`` refuses the DTensor itself). Followed from the all-reduced tensor back
through the function's names, tensor methods (``.detach().float().pow(2)``), ``self``'s
attributes set in its class, and calls: where the square of a norm that a named function
returns is summed (the default op) by a statement of its own, the statement goes; anything
else (another op, a norm not squared, a method only its name ties to one) is marked.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from fsdp2_port.codemods.analysis import FileAnalysis
from fsdp2_port.codemods.assumptions import NORM_SOURCES
from fsdp2_port.codemods.imports import remove_statement
from fsdp2_port.codemods.plan import Rewrite
from fsdp2_port.codemods.semantic.summaries import RETURNED

_REMOVED = (
    "dist.all_reduce of the squared norm {} returns removed: under FSDP2 that norm is the "
    "global one already (FSDP1 gave each rank its shard's piece, which this sum completed)"
)
_MARKED = (
    "dist.all_reduce of the gradient norm {} returns: under FSDP2 that norm is the global one "
    "already (FSDP1 gave each rank its shard's piece), so reducing it again counts it once per "
    "rank, and dist.all_reduce refuses a DTensor norm; remove the reduction"
)


@dataclass
class Returned:
    """Where an all-reduced tensor comes from: the call that returned a norm (``source``,
    as written), whether it is named (not tied by a method name alone), whether it is
    squared on the way."""

    source: str | None = None
    named: bool = False
    squared: bool = False
    _seen: set[int] = field(default_factory=set)


def find(analysis: FileAnalysis, tensor: ast.expr, depth: int) -> Returned:
    found = Returned()
    _follow(analysis, tensor, depth, found)
    return found


def site(analysis: FileAnalysis, code: str, call: ast.Call, found: Returned) -> None:
    """Remove the all-reduce ``call`` or mark it, when the run migrates; nothing where F2P009
    already decides it (the norm of a ``BF16Optimizer.step()`` it replaces)."""
    start = analysis.span(call)[0]
    if any(s.code == "F2P009" and s.at.start == start for s in analysis.plan.sites):
        return
    statement = analysis.names.parent.get(call)
    exact = found.named and found.squared and _sums(call) and isinstance(statement, ast.Expr)
    if exact:
        assert isinstance(statement, ast.Expr)
        message = _REMOVED.format(found.source)
        edits = [remove_statement(analysis.lines, analysis.names, statement)]
        analysis.add(code, call, message, Rewrite(edits, message, review=True), "RUN")
    else:
        message = _MARKED.format(found.source)
        analysis.add(code, call, message, Rewrite([], message, review=True), "RUN")


def _follow(analysis: FileAnalysis, expr: ast.AST, depth: int, found: Returned) -> None:
    if id(expr) in found._seen or depth < 0 or found.source is not None:
        return
    found._seen.add(id(expr))
    names = analysis.names
    for node in ast.walk(expr):
        if _squares(node):
            found.squared = True
        if isinstance(node, ast.Call):
            source, named = _norm_call(analysis, node)
            if source is not None:
                found.source, found.named = source, named
                return
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            for binding in names.bindings_of(node):
                if binding.kind == "assign" and binding.value is not None:
                    _follow(analysis, binding.value, depth - 1, found)
        elif isinstance(node, ast.Attribute) and _is_self(node.value):
            for value in _self_assigned(analysis, node):
                _follow(analysis, value, depth - 1, found)


def _norm_call(analysis: FileAnalysis, call: ast.Call) -> tuple[str | None, bool]:
    """``(the callee as written, named)`` when ``call`` may return a gradient norm: one of
    ``NORM_SOURCES``, a function of the run that returns one (``summaries``), or a method of
    an object of no known type whose name is that of such a method of the run (not named)."""
    written = analysis.source(call.func)
    if analysis.names.qualified(call.func) & NORM_SOURCES.members:
        return written, True
    if "norm" in analysis.callee_effects(call).get(RETURNED, ()):
        return written, True
    func = call.func
    if isinstance(func, ast.Attribute) and not _is_self(func.value):
        if not analysis.names.qualified(func) and any(
            "norm" in effects.get(RETURNED, ()) and name.rsplit(".", 2)[-2][:1].isupper()
            for name, effects in analysis.effects.items()
            if name.rpartition(".")[2] == func.attr and name.count(".") >= 2
        ):
            return written, False
    return None, False


def _squares(node: ast.AST) -> bool:
    """``x ** 2``, ``x.pow(2)``, ``x.square()``, ``torch.square(x)``."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
        return isinstance(node.right, ast.Constant) and node.right.value == 2
    if isinstance(node, ast.Call):
        name = node.func.attr if isinstance(node.func, ast.Attribute) else ""
        if name == "pow":
            return len(node.args) == 1 and getattr(node.args[0], "value", None) == 2
        return name == "square"
    return False


def _sums(call: ast.Call) -> bool:
    """The all-reduce sums: no ``op``, or ``ReduceOp.SUM``."""
    op = next((k.value for k in call.keywords if k.arg == "op"), None)
    if op is None and len(call.args) > 1:
        op = call.args[1]
    return op is None or (isinstance(op, ast.Attribute) and op.attr == "SUM")


def _is_self(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def _self_assigned(analysis: FileAnalysis, attribute: ast.Attribute) -> list[ast.expr]:
    """The values the methods of the class around ``attribute`` assign to ``self.<attr>``."""
    owner = analysis.names.class_of(attribute)
    if owner is None:
        return []
    found = []
    for node in ast.walk(owner):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if (
                    isinstance(target, ast.Attribute)
                    and target.attr == attribute.attr
                    and _is_self(target.value)
                ):
                    found.append(node.value)
    return found
