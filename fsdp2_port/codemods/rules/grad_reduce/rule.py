"""F2P014: a gradient norm (or sum) all-reduced by hand, on a model that may migrate; and a
model's parameters handed to a collective by hand.

``dist.all_reduce(x)`` where ``x`` is a norm computed from ``p.grad`` (a norm, a power, a sum of
squares; through the function's names, its loops over ``m.parameters()`` and helpers of the same
file) is right under FSDP1: each rank holds a shard of the flat gradient, and the sum over ranks
completes the norm. (An all-reduce of the gradients themselves is a hand-written data-parallel
step, never right on an FSDP1 model: not this rule's business.) Under FSDP2 the
gradients are DTensors: their norm is already the global one, and ``dist.all_reduce`` refuses a
DTensor (``c10d.allreduce_`` has no sharding strategy; seen on torch 2.13). No rewrite fits
every shape of such code, so the line is marked and holds its model on FSDP1 (a model the run
cannot tie: every model of its program). Code that already reads DTensors (``to_local()``,
``full_tensor()``) is left alone; ``fsdp2_port.global_grad_norm(m.parameters())`` is the norm
on any mesh. The norm a clip returns, all-reduced by its caller, is ``returned``'s.

The parameters themselves handed to a collective (``for p in model.parameters():
dist.broadcast(p.data, src=0)``, an all-reduce or a gather of them) meet the same refusal:
FSDP2's parameters are DTensors too. Marked, and the line holds its model.
"""

from __future__ import annotations

import ast
from typing import ClassVar

from fsdp2_port.codemods.analysis import FileAnalysis
from fsdp2_port.codemods.assumptions import (
    COLLECTIVES,
    DTENSOR_METHODS,
    NORM_CALLS,
    PARAMETER_ITERATORS,
    PARAMETER_WORDS,
)
from fsdp2_port.codemods.parameter_loops import loop_binding, parameters_of
from fsdp2_port.codemods.refs import GROUPS
from fsdp2_port.codemods.rules.base import Code

from ...assumed import Assumed, either_way
from . import returned

_ALL_REDUCE = "torch.distributed.all_reduce"
_MESSAGE = (
    "gradients all-reduced by hand: under FSDP2 they are DTensors, whose norms are already "
    "global and which dist.all_reduce refuses; use fsdp2_port.global_grad_norm(model.parameters())"
)
#: What a function of the run does with what it is given, found by the summaries.
_HANDS_ON = (
    "which hands what it is given to a torch.distributed collective (in its own code or further "
    "down)"
)
_THROUGH = (
    "gradients handed to {}, " + _HANDS_ON + ": under FSDP2 gradients are DTensors, already "
    "reduced over the mesh, which c10d refuses; for a norm use "
    "fsdp2_port.global_grad_norm(model.parameters())"
)
_REFUSED = (
    "under FSDP2 they are DTensors, which c10d refuses; hand it their local shards (to_local()) "
    "or full tensors (full_tensor()), as the program needs"
)
_PARAMETERS = "parameters of {} handed to {} by hand: " + _REFUSED
_PARAMETERS_THROUGH = "parameters of {} handed to {}, " + _HANDS_ON + ": " + _REFUSED
#: How many names and helpers deep a reduced value is followed back.
_DEPTH = 4


class GradReduceRule:
    STAGE: ClassVar[str] = "analysis"
    CODE: ClassVar[str] = "F2P014"
    CODES: ClassVar[dict[str, Code]] = {
        "F2P014": Code(
            summary="gradient norms all-reduced by hand (FSDP2 gradients are DTensors, their "
            "norms global)",
            topic="`dist.all_reduce` of a gradient norm",
            rewritten=(
                "the all-reduce, a statement of its own, of the square of the norm a clip "
                "returns (`torch.nn.utils.clip_grad_norm_`, a function of the run returning it): "
                "removed, and marked for review"
            ),
            marked=(
                "an all-reduce of a norm computed from gradients (a norm, a power, a sum; "
                "through names, loops over `m.parameters()` and helpers of the file), unless the "
                "code reads DTensors (`to_local()`, `full_tensor()`): it holds its model on FSDP1 "
                "(an all-reduce of the gradients themselves is left alone); any other all-reduce "
                "of a norm a clip returns (another op, not squared, a method tied by its name); "
                "a model's parameters handed to a collective by hand (`dist.broadcast(p.data)` "
                "over `m.parameters()`), or to a function of the run that hands them to one, "
                "however many calls down (`sync(m.parameters())`): it holds its model"
            ),
        ),
    }
    NEEDS: ClassVar[tuple[str, ...]] = ("F2P002",)
    EMITS: ClassVar[dict[str, str]] = {}

    def analyze(self, analysis: FileAnalysis) -> None:
        for call in analysis.names.by_type[ast.Call]:
            assert isinstance(call, ast.Call)
            if not call.args or analysis.is_ignored(call):
                continue
            qualified = analysis.names.qualified(call.func)
            if _ALL_REDUCE in qualified:
                found = _Gradients(analysis)
                found.follow(call.args[0], _DEPTH)
                if found.read and found.norm and not found.dtensor_aware:
                    self._site(analysis, call, found.modules, _MESSAGE)
                elif not found.dtensor_aware:
                    norm = returned.find(analysis, call.args[0], _DEPTH)
                    if norm.source is not None:
                        returned.site(analysis, self.CODE, call, norm)
            if qualified & COLLECTIVES.members:
                self._parameters(analysis, call)
                continue
            self._through_call(analysis, call)

    def _parameters(self, analysis: FileAnalysis, call: ast.Call) -> None:
        """``dist.broadcast(p.data)`` where ``p`` runs over ``m.parameters()``: marked with
        ``m``'s models, and holds them (every model of its program, untied)."""
        module = parameters_of(analysis, call.args[0])
        if module is not None:
            callee = analysis.source(call.func)
            what = _PARAMETERS.format(analysis.source(module), callee)
            self._site(analysis, call, [module], what)

    def _through_call(self, analysis: FileAnalysis, call: ast.Call) -> None:
        """``reduce_grads(p.grad)``, ``sync(model.parameters())``: a function of the run that
        hands what it is given to a collective, however many calls down (``summaries``),
        handed gradients or a model's parameters: what the direct form would be, gradients
        themselves included (under FSDP2 both are DTensors, which c10d refuses)."""
        effects = analysis.callee_effects(call)
        for position, argument in enumerate(call.args):
            if "collective" not in effects.get(position, ()):
                continue
            callee = analysis.source(call.func)
            module = parameters_of(analysis, argument)
            if module is not None:
                what = _PARAMETERS_THROUGH.format(analysis.source(module), callee)
                self._site(analysis, call, [module], what)
                return
            found = _Gradients(analysis)
            found.follow(argument, _DEPTH)
            if found.read and not found.dtensor_aware:
                self._site(analysis, call, found.modules, _THROUGH.format(callee))
                return

    def _site(
        self, analysis: FileAnalysis, call: ast.Call, modules: list[ast.expr], what: str
    ) -> None:
        """Marked with the models of the first of ``modules``; held untied (none, or none of
        its models known)."""
        site = None
        if modules:
            site = analysis.add_tied(
                self.CODE, call, modules[0], what, None, quiet=False, speculate=False
            )
        if site is None:
            analysis.hold(self.CODE, call, what)


class _Gradients:
    """What a value is computed from: whether ``.grad`` is read on the way, the modules whose
    parameters are read, and whether DTensors are handled there."""

    def __init__(self, analysis: FileAnalysis) -> None:
        self.analysis = analysis
        self.read = False
        self.norm = False
        self.dtensor_aware = False
        self.modules: list[ast.expr] = []
        self._seen: set[ast.AST] = set()

    def follow(self, expr: ast.AST, depth: int) -> None:
        if expr in self._seen or depth < 0:
            return
        self._seen.add(expr)
        names, assumed = self.analysis.names, self.analysis.assumed
        for node in ast.walk(expr):
            if isinstance(node, ast.Attribute):
                if node.attr == "grad" and not _activation(self.analysis, node.value):
                    self.read = True
                    self._module_of(node.value, depth)
                elif assumed.takes(DTENSOR_METHODS, node.attr, node):
                    self.dtensor_aware = True
                elif assumed.takes(PARAMETER_ITERATORS, node.attr, node):
                    self.modules.append(node.value)
            elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
                self.norm = True
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                for binding in names.bindings_of(node):
                    if binding.kind == "def":
                        continue
                    value = binding.value or _bound_from(names.parent.get(binding.node))
                    if value is not None:
                        self.follow(value, depth - 1)
            if isinstance(node, ast.Call) and either_way(NORM_CALLS, _called(node)):
                self.norm = True
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                helper = next(
                    (b.node for b in names.bindings_of(node.func) if b.kind == "def"), None
                )
                if helper is not None:
                    before = self.read
                    self.follow(helper, depth - 1)
                    if self.read and not before:
                        self.modules += [a for a in node.args if not isinstance(a, ast.Constant)]

    def _module_of(self, tensor: ast.expr, depth: int) -> None:
        """``p`` of ``p.grad``: a loop variable over ``m.parameters()`` names ``m``."""
        if isinstance(tensor, ast.Name):
            for binding in self.analysis.names.bindings_of(tensor):
                loop = loop_binding(self.analysis, binding.node)
                if loop is not None:
                    self.follow(loop.iter, depth - 1)
                    groups = _groups_of(self.analysis, loop.iter)
                    if groups is not None:
                        self.modules.append(groups)
                    if isinstance(loop.iter, ast.Name) and any(
                        b.kind == "param" for b in self.analysis.names.bindings_of(loop.iter)
                    ):
                        self.modules.append(loop.iter)  # parameters a caller passes: theirs


def _activation(analysis: FileAnalysis, tensor: ast.expr) -> bool:
    """``x`` of ``x.grad`` is no parameter: a local only ever assigned what a call computes
    without naming parameters (an input embedding made to require grad: ``x =
    embed(ids).detach().requires_grad_()``); its gradient is a plain tensor under FSDP1 and
    FSDP2 alike. A name or attribute chain (``w = model.head.weight``) may be a parameter.
    That a call naming none of ``PARAMETER_WORDS`` computes no parameter is an assumption."""
    if not isinstance(tensor, ast.Name):
        return False
    bindings = analysis.names.bindings_of(tensor)
    return bool(bindings) and all(
        b.kind == "assign"
        and isinstance(b.value, ast.Call)
        and not _names_parameters(analysis.assumed, tensor, b.value)
        for b in bindings
    )


def _names_parameters(assumed: Assumed, tensor: ast.Name, value: ast.Call) -> bool:
    """``value`` (bound to ``tensor``) names a way to a model's parameters, or may."""
    return assumed.takes(
        PARAMETER_WORDS,
        tensor.id,
        value,
        otherwise=True,
        member=any(
            getattr(n, "attr", None) in PARAMETER_WORDS
            or getattr(n, "id", None) in PARAMETER_WORDS
            or (isinstance(n, ast.Constant) and n.value == "params")
            for n in ast.walk(value)
        ),
    )


def _called(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _groups_of(analysis: FileAnalysis, params: ast.expr) -> ast.Attribute | None:
    """``o.param_groups`` of ``group["params"]``, where ``group`` runs over it: the
    parameters the optimizer ``o`` was given."""
    if not (
        isinstance(params, ast.Subscript)
        and isinstance(params.value, ast.Name)
        and isinstance(params.slice, ast.Constant)
        and params.slice.value == "params"
    ):
        return None
    for binding in analysis.names.bindings_of(params.value):
        loop = loop_binding(analysis, binding.node)
        if loop is not None and isinstance(loop.iter, ast.Attribute) and loop.iter.attr == GROUPS:
            return loop.iter
    return None


def _bound_from(statement: ast.AST | None) -> ast.AST | None:
    """The value an augmented assignment or a ``with ... as`` adds to a name."""
    if isinstance(statement, ast.AugAssign):
        return statement.value
    if isinstance(statement, ast.withitem):
        return statement.context_expr
    return None
