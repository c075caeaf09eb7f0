"""What F2P008's sites become: the DCP call (``_pure_site``) or the same call on ``fsdp2_port``
(``_runtime_call``, its literal settings said as ``options=StateDictOptions(...)``)."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from fsdp2_port.codemods import calls
from fsdp2_port.codemods.assumptions import FSDP1_STATE_DICT_TYPE_PARAMETERS
from fsdp2_port.codemods.plan import NeededImport, Requirement, Rewrite
from fsdp2_port.codemods.rules.state_dict.configs import _drop_config_binding, _settings
from fsdp2_port.codemods.rules.state_dict.options import (
    _MODEL,
    _OPTIM,
    OPTIONS_OF_SETTINGS,
    _exact_side,
)
from fsdp2_port.codemods.rules.state_dict.walk import CODE, Walk
from fsdp2_port.codemods.text import Edit

MODULE = "torch.distributed.checkpoint.state_dict"
_RUNTIME = "its FSDP1 behaviour on FSDP1 and FSDP2 models alike"


@dataclass(frozen=True)
class _New:
    text: str
    names: list[str]


def _new(function: str, args: list[str], options: str | None) -> _New:
    parts = args + ([f"options={options}"] if options else [])
    return _New(
        f"{function}({', '.join(parts)})", [function] + (["StateDictOptions"] if options else [])
    )


def _runtime_call(
    walk: Walk, call: ast.Call, function: str, what: str, groups: frozenset[str] = frozenset()
) -> None:
    """``FSDP.<function>(...)`` -> ``fsdp2_port.<function>(...)``, the same arguments."""
    analysis = walk.analysis
    walk.handled.add(call)
    first = call.args[0] if call.args else (call.keywords[0].value if call.keywords else call)
    if not analysis.options.runtime_dependency:
        analysis.add_tied(
            CODE,
            call,
            first,
            f"{what}: port with get_/set_*_state_dict and StateDictOptions",
            None,
            known=False,
            groups=groups,
        )
        return
    if function in ("state_dict_type", "set_state_dict_type"):
        form = _options_form(walk, call)
        if form is not None:
            _runtime_options_call(walk, call, function, what, groups, *form)
            return
    rewrite = Rewrite(
        [analysis.replace(call.func, f"fsdp2_port.{function}")],
        f"FSDP.{function} -> fsdp2_port.{function}: {_RUNTIME}",
        [analysis.module_import("fsdp2_port")],
    )
    analysis.add(CODE, call, f"kept: {what}", rewrite, "ALWAYS", groups=groups)


def _runtime_options_call(
    walk: Walk,
    call: ast.Call,
    function: str,
    what: str,
    groups: frozenset[str],
    arguments: str,
    configs: list[calls.Argument],
    kind: ast.expr,
) -> None:
    """``FSDP.<function>(m, <literal settings>)`` -> ``fsdp2_port.<function>(m,
    options=StateDictOptions(...)[, optim_options=...])``: the same settings in DCP's words;
    a config bound to a name for this call alone goes with it. The import goes where the
    type's enum was imported."""
    analysis = walk.analysis
    module = call.args[0]
    group = groups | {f"state_dict:{analysis.site_id(call)}"}
    edits = [
        analysis.replace(call.func, f"fsdp2_port.{function}"),
        # the arguments after the module, up to the last one's end: a trailing comma and
        # the line of the closing parenthesis stay
        Edit(
            analysis.span(module)[1],
            analysis.span(calls.arguments(call)[-1].node)[1],
            f", {arguments}",
        ),
    ]
    new = _New(arguments, ["StateDictOptions"])
    rewrite = Rewrite(
        edits,
        f"FSDP.{function}(<FSDP1 settings>) -> fsdp2_port.{function}(..., {arguments}): "
        f"the same settings in DCP's words, {_RUNTIME}",
        [analysis.module_import("fsdp2_port"), *_imports(walk, kind, new)],
    )
    analysis.add(CODE, call, f"kept: {what}", rewrite, "ALWAYS", groups=group)
    for config in configs:
        _drop_config_binding(walk, config, group)


def _options_form(walk: Walk, call: ast.Call) -> tuple[str, list[calls.Argument], ast.expr] | None:
    """The ``options=StateDictOptions(...)`` text (with ``optim_options=`` where no one
    options value says both configs) that says exactly the FSDP1 settings of a
    ``state_dict_type``/``set_state_dict_type`` call (``OPTIONS_OF_SETTINGS``), its config
    arguments and its type argument; None unless the module is passed first, the type is
    a literal member and each config is written at the call, or bound to a name in the
    same scope and read only there, with literal booleans."""
    bound = calls.bind(call, FSDP1_STATE_DICT_TYPE_PARAMETERS.names)
    if bound is None or "state_dict_type" not in bound or not call.args:
        return None
    if "module" not in bound or bound["module"].node is not call.args[0]:
        return None
    kind = (walk.analysis.fsdp1_name(bound["state_dict_type"].value) or "").removeprefix(
        "StateDictType."
    )
    if kind not in ("FULL_STATE_DICT", "SHARDED_STATE_DICT"):
        return None
    prefix = "Full" if kind == "FULL_STATE_DICT" else "Sharded"
    configs = [bound[n] for n in ("state_dict_config", "optim_state_dict_config") if n in bound]
    model = _settings(walk, bound.get("state_dict_config"), prefix + "StateDictConfig")
    optim = _settings(walk, bound.get("optim_state_dict_config"), prefix + "OptimStateDictConfig")
    if model is None or optim is None:
        return None
    options = OPTIONS_OF_SETTINGS.get((kind, model, optim))
    if options is not None:
        return f"options={options}", configs, bound["state_dict_type"].value
    # no one row: the model's options and the optimizer's, each exact on its own side
    sides = [_exact_side(kind, _MODEL, model), _exact_side(kind, _OPTIM, optim)]
    if None in sides:
        return None
    arguments = f"options={sides[0]}, optim_options={sides[1]}"
    return arguments, configs, bound["state_dict_type"].value


def _pure_site(
    walk: Walk,
    call: ast.Call,
    model: ast.AST,
    new: _New,
    message: str,
    groups: frozenset[str],
    anchor,
    plain: bool = False,
) -> None:
    analysis = walk.analysis
    rewrite = Rewrite(
        [analysis.replace(call, new.text)], message, _imports(walk, anchor or call.func, new)
    )
    ties, deferred = analysis.ties.of(model)
    fsdp1 = analysis.type_tests.known_fsdp1(model)
    requirement: Requirement = "ALWAYS"
    if plain:  # FSDP1's default spelled out: only once the model is FSDP2
        requirement = "MODELS" if ties or deferred else "RUN"
    analysis.add(
        CODE,
        call,
        "kept: an FSDP1 state-dict call",
        rewrite,
        requirement,
        ties=ties,
        deferred=deferred,
        groups=groups,
        # its block's marker (or its model's) says why it stays, unless it names FSDP1 itself
        quiet=(plain and bool(ties or deferred)) or analysis.fsdp1_name(call.func) is None,
        # no model of the run reaches it: a plain module's state dict
        unknown="" if plain and not ties and deferred and not fsdp1 else None,
    )


def _imports(walk: Walk, anchor: ast.AST, new: _New) -> list[NeededImport]:
    analysis = walk.analysis
    if isinstance(anchor, (ast.Attribute, ast.Name)) and analysis.fsdp1_name(anchor) is not None:
        return [analysis.import_for(anchor, MODULE, name) for name in new.names]
    return [analysis.module_level_import(MODULE, name) for name in new.names]
