"""F2P011: parameter shapes read from a wrapped model change meaning under FSDP2.

After ``FSDP(m)`` the model's parameters are FSDP1's flat views: 1-D shards (with
``use_orig_params=True``, views into them; without it, one ``FlatParameter`` per unit), so
``p.ndim``, ``p.shape``, ``p.dim()``, ``p.size()`` and ``p.numel()`` read from
``model.parameters()`` / ``named_parameters()`` describe shards. FSDP2 keeps each parameter's
logical shape (a DTensor): the same code now sees matrices. A weight-decay split by
``p.ndim > 1`` decayed nothing before and decays every matrix after, with no error. Marked at
the line when the model migrates (for a receiver the run cannot tie but named like a model,
such as a base class's ``self.policy``: when any model of the run migrates); nothing when it
stays FSDP1.
"""

from __future__ import annotations

import ast
from typing import ClassVar

from fsdp2_port.codemods.analysis import FileAnalysis
from fsdp2_port.codemods.assumptions import PARAMETER_ITERATORS, SHAPE_ATTRIBUTES
from fsdp2_port.codemods.parameter_loops import parameters_of
from fsdp2_port.codemods.plan import Rewrite
from fsdp2_port.codemods.rules.base import Code

from ...assumed import either_way


class ParamShapesRule:
    STAGE: ClassVar[str] = "analysis"
    CODE: ClassVar[str] = "F2P011"
    CODES: ClassVar[dict[str, Code]] = {
        "F2P011": Code(
            summary=(
                "mark parameter shapes read from a wrapped model (FSDP1 flat shards, FSDP2 full)"
            ),
            topic="parameter shapes after wrapping",
            rewritten="—",
            marked=(
                "`p.ndim`/`shape`/`dim()`/`size()`/`numel()` of "
                "`model.parameters()`/`named_parameters()` on a model that migrates: FSDP1 gave "
                "flat 1-D shards, FSDP2 the full shapes (weight decay chosen by `p.ndim > 1` "
                "decayed nothing before, every matrix after)"
            ),
        ),
    }
    NEEDS: ClassVar[tuple[str, ...]] = ("F2P002",)
    EMITS: ClassVar[dict[str, str]] = {}

    def analyze(self, analysis: FileAnalysis) -> None:
        by_type = analysis.names.by_type
        for loop in (*by_type[ast.For], *by_type[ast.comprehension]):
            assert isinstance(loop, (ast.For, ast.comprehension))
            self._loop(analysis, loop.iter, loop.target, loop)
        for call in by_type[ast.Call]:
            assert isinstance(call, ast.Call)
            if not analysis.is_ignored(call):
                self._through_call(analysis, call)

    def _through_call(self, analysis: FileAnalysis, call: ast.Call) -> None:
        """``param_groups(model)``: a function of the run that reads the shapes (or the
        storage) of what it is given, however many calls down (``summaries``), handed a model
        or its parameters: marked as the direct form is, when the model migrates."""
        effects = analysis.callee_effects(call)
        for position, argument in enumerate(call.args):
            found = effects.get(position, frozenset()) & {"shape", "storage"}
            if not found:
                continue
            ties, deferred = analysis.ties.of(argument)
            if not (ties or deferred):
                continue
            callee = analysis.source(call.func)
            text = analysis.source(argument)
            module = parameters_of(analysis, argument) if isinstance(argument, ast.Name) else None
            what = (
                f"{analysis.source(module)}'s parameter {text}"
                if module is not None
                else f"{text}'s parameters"
            )
            message = (
                f"{callee} reads the {' and '.join(sorted(found))} of {what} (in "
                "its own code or further down): FSDP1 gave flat 1-D shards (one storage per "
                "unit), FSDP2 gives each parameter's full shape, a DTensor of its own; check "
                "what it selects (e.g. weight decay by ndim, parameters by storage size)"
            )
            analysis.add(
                self.CODE,
                call,
                message,
                Rewrite([], message, review=True),
                "MODELS",
                ties=ties,
                deferred=deferred,
                quiet=True,  # only a model that migrates changes meaning
                unknown="",
            )
            return

    def _loop(
        self, analysis: FileAnalysis, iterator: ast.expr, target: ast.expr, loop: ast.AST
    ) -> None:
        if not (
            isinstance(iterator, ast.Call)
            and isinstance(iterator.func, ast.Attribute)
            and either_way(PARAMETER_ITERATORS, iterator.func.attr)
        ):
            return
        model = iterator.func.value
        ties, deferred = analysis.ties.of(model)
        untraced = _self_attribute(model) and analysis.named_like_model(model)
        if analysis.is_ignored(iterator) or not (ties or deferred or untraced):
            return
        fresh = analysis.ties.fresh(model)  # just built here: its parameters are whole
        if fresh and not (ties or deferred):
            return
        parameter = _parameter_name(target, iterator.func.attr)
        owner = analysis.names.parent.get(loop) if isinstance(loop, ast.comprehension) else loop
        read = next(
            (
                n
                for n in ast.walk(owner)  # type: ignore[arg-type]
                if isinstance(n, ast.Attribute)
                and either_way(SHAPE_ATTRIBUTES, n.attr)
                and isinstance(n.value, ast.Name)
                and n.value.id == parameter
            ),
            None,
        )
        if read is None:
            return
        text = analysis.source(model)
        message = (
            f"{parameter}.{read.attr} of {text}'s parameters: FSDP1 gave flat 1-D shards here, "
            "FSDP2 gives each parameter's full shape; check what this selects (e.g. weight "
            "decay by ndim) and read the shapes from the unwrapped module if FSDP1's answer was "
            "intended"
        )
        marker = Rewrite([], message, review=True)
        analysis.add(
            self.CODE,
            read,
            message,
            marker,
            "MODELS" if ties or deferred else "ANY",
            ties=ties,
            deferred=deferred,
            fresh=fresh,
            quiet=True,  # only a model that migrates changes meaning
            # untied, named like a model (self.policy of a base class): any may come; otherwise
            # nothing at all if the run passes no model
            either=marker if untraced and not ties else None,
            unknown="" if not ties else None,
        )


def _self_attribute(node: ast.expr) -> bool:
    """``self.policy``: class state, which a subclass elsewhere may have wrapped unseen."""
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and (node.value.id == "self")
    )


def _parameter_name(target: ast.expr, iterator: str) -> str | None:
    """The loop variable that holds each parameter (``p``, or ``p`` of ``name, p``)."""
    if iterator == "parameters" and isinstance(target, ast.Name):
        return target.id
    if isinstance(target, ast.Tuple) and len(target.elts) == 2:
        second = target.elts[1]
        return second.id if isinstance(second, ast.Name) else None
    return None
