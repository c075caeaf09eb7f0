"""One state-dict call on its own: FSDP1's checkpoint functions, the optimizer's, and a
model's own ``state_dict()`` / ``load_state_dict(sd)``."""

from __future__ import annotations

import ast

from fsdp2_port.codemods import calls
from fsdp2_port.codemods.assumptions import FSDP1_CHECKPOINT_FUNCTIONS
from fsdp2_port.codemods.plan import Rewrite
from fsdp2_port.codemods.rules.state_dict.emit import _new, _pure_site
from fsdp2_port.codemods.rules.state_dict.optimizer import _optim, _to_load
from fsdp2_port.codemods.rules.state_dict.options import DEFAULT, Options
from fsdp2_port.codemods.rules.state_dict.walk import _FSDP, CODE, Walk


def _call(
    walk: Walk,
    call: ast.Call,
    options: Options | None,
    groups: frozenset[str],
    *,
    anchor: ast.AST | None = None,
    runtime_only: bool = False,
    model: str | None = None,
    block: ast.AST | None = None,
) -> None:
    """The site for one state-dict call: in a pure block about ``model`` (``options``),
    inside a runtime block about ``block`` (``runtime_only``), or on its own."""
    analysis = walk.analysis
    name = analysis.fsdp1_name(call.func)
    if analysis.names.qualified(call.func) & FSDP1_CHECKPOINT_FUNCTIONS.members:
        walk.handled.add(call)
        ties, deferred = (
            analysis.ties.of(block) if block is not None else (frozenset(), frozenset())
        )
        analysis.add(
            CODE,
            call,
            "load_sharded_optimizer_state_dict reads FSDP1's sharded layout (ShardedTensor): "
            "with FSDP2, dcp.load into get_optimizer_state_dict(model, optim), then "
            "set_optimizer_state_dict",
            ties=ties,
            deferred=deferred,
            groups=groups,
        )
    elif name == _FSDP + "optim_state_dict":
        walk.handled.add(call)
        _optim(walk, call, options, groups, anchor)
    elif name == _FSDP + "optim_state_dict_to_load":
        walk.handled.add(call)
        _to_load(walk, call, options, groups, anchor)
    elif not runtime_only and isinstance(call.func, ast.Attribute):
        if call.func.attr in ("state_dict", "load_state_dict"):
            if model is None or analysis.source(call.func.value) == model:
                _module_call(walk, call, options, groups, anchor)


def _module_call(
    walk: Walk, call: ast.Call, options: Options | None, groups: frozenset[str], anchor
) -> None:
    """``m.state_dict()`` / ``m.load_state_dict(sd)``: in a pure block, or on a model that
    is, or may turn out to be, built by an FSDP1 constructor of the run, or that is known to
    be FSDP1 (FSDP1's FULL default, spelled out when the model migrates: FSDP2's own default
    is sharded). Receivers the run ties to no model are left alone, silently."""
    analysis = walk.analysis
    func = call.func
    assert isinstance(func, ast.Attribute)
    receiver = func.value
    plain = options is None
    if plain:
        ties, deferred = analysis.ties.of(receiver)
        if not (ties or deferred or analysis.type_tests.known_fsdp1(receiver)):
            if analysis.options.runtime_dependency and analysis.named_like_model(receiver):
                walk.handled.add(call)
                _module_runtime_call(walk, call, receiver, groups)
            return
        if deferred or walk.persistent:
            walk.handled.add(call)
            _module_runtime_call(walk, call, receiver, groups)
            return
        options = DEFAULT
    assert options is not None
    walk.handled.add(call)
    text = analysis.source(receiver)
    if func.attr == "state_dict":
        if call.args or call.keywords:
            analysis.add_tied(
                CODE,
                call,
                receiver,
                "state_dict(...) with arguments: use get_model_state_dict by hand",
                None,
                known=plain,
                groups=groups,
            )
            return
        new = _new("get_model_state_dict", [text], options.model)
        _pure_site(
            walk,
            call,
            receiver,
            new,
            "state_dict() -> get_model_state_dict(...)",
            groups,
            anchor,
            plain,
        )
        return
    bound = calls.bind(call, ("state_dict", "strict", "assign"))
    if bound is None or "state_dict" not in bound or "assign" in bound:
        analysis.add_tied(
            CODE,
            call,
            receiver,
            "load_state_dict(...) with unusual arguments: use set_model_state_dict by hand",
            None,
            known=plain,
            groups=groups,
        )
        return
    load = options.load
    if "strict" in bound:
        strict = f"strict={analysis.source(bound['strict'].value)}"
        load = f"StateDictOptions({strict})" if load is None else load[:-1] + f", {strict})"
    new = _new("set_model_state_dict", [text, analysis.source(bound["state_dict"].value)], load)
    _pure_site(
        walk,
        call,
        receiver,
        new,
        "load_state_dict(...) -> set_model_state_dict(...)",
        groups,
        anchor,
        plain,
    )


def _module_runtime_call(
    walk: Walk, call: ast.Call, receiver: ast.expr, groups: frozenset[str]
) -> None:
    """A plain ``m.state_dict(...)``/``m.load_state_dict(...)`` whose receiver may hold
    other modules as well (a parameter, a DDP branch) or follow a type set elsewhere: ->
    ``fsdp2_port.module_state_dict(m, ...)``/``load_module_state_dict(m, ...)``, FSDP1's
    answer on FSDP2 and each module's own on anything else. Rewritten when the models it
    may hold migrate; nothing at all when the run ties it to no FSDP1 model."""
    analysis = walk.analysis
    func = call.func
    assert isinstance(func, ast.Attribute)
    if not analysis.options.runtime_dependency:
        analysis.add_tied(
            CODE,
            call,
            receiver,
            f"{func.attr}() of a model that may be FSDP1 or not, or whose FSDP1 state-dict "
            "type may be set elsewhere: FSDP2's own is sharded; use get_/set_model_state_dict "
            "with StateDictOptions where the model is FSDP",
            None,
            groups=groups,
        )
        return
    function = "module_state_dict" if func.attr == "state_dict" else "load_module_state_dict"
    rewrite = Rewrite(
        analysis.receiver_first(call, f"fsdp2_port.{function}"),
        f"{func.attr}() -> fsdp2_port.{function}(...): FSDP1's answer on FSDP2 models "
        "(full by default), each module's own on any other",
        [analysis.module_import("fsdp2_port")],
    )
    analysis.add_tied(
        CODE,
        call,
        receiver,
        f"kept: {func.attr}() of a model that may be FSDP1",
        rewrite,
        groups=groups,
        quiet=True,
        # right on any module: also where the run ties no model, if named like one
        either=rewrite if analysis.named_like_model(receiver) else None,
        # an FSDP2 model already in the code wants its own (sharded) answer here
        fsdp2_meaning=True,
    )
