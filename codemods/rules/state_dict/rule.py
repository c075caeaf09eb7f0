"""F2P008: FSDP1 state-dict plumbing -> ``torch.distributed.checkpoint.state_dict`` (what
becomes what: ``CODES``).

Invariants: every rewrite here is right under FSDP1 and FSDP2 alike, so none waits for a model
to migrate, except a plain ``m.state_dict()``/``load_state_dict`` of a model built here (FSDP1's
FULL default), which follows its model. LOCAL_STATE_DICT has no FSDP2 form: it holds its model.
FSDP2 gives the full state dict to rank 0 only exactly when it offloads, so ``cpu_offload``
without ``rank0_only`` goes to the runtime form; FSDP1's optimizer configs offload by default
(``FSDP1_DEFAULTS``), so FULL with the default optimizer config does too wherever the block reads
optimizer state. Each DCP call gets the options of its own config.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import ClassVar

from codemods import calls
from codemods.analysis import FileAnalysis
from codemods.names import Binding
from codemods.plan import NeededImport, Requirement, Rewrite
from codemods.rules.base import Code
from codemods.text import Edit

MODULE = "torch.distributed.checkpoint.state_dict"
_FSDP = "FullyShardedDataParallel."
_CONTEXT = ("module", "state_dict_type", "state_dict_config", "optim_state_dict_config")
_TO_LOAD = ("model", "optim", "optim_state_dict")
_DCP_LOADS = (
    "torch.distributed.checkpoint.load",
    "torch.distributed.checkpoint.load_state_dict",
    "torch.distributed.checkpoint.state_dict_loader.load",
)
_SAFE_PREFIXES = (
    "builtins.",
    "torch.",
    "os.",
    "json.",
    "logging.",
    "time.",
    "math.",
    "pathlib.",
    "shutil.",
    "pickle.",
    "io.",
    "gc.",
    "warnings.",
    "copy.",
    "collections.",
    "numpy.",
    "safetensors.",
)
#: Methods that take no state dict from a module, whatever object they are called on.
_SAFE_METHODS = frozenset(
    {
        "info",
        "debug",
        "warning",
        "warn",
        "error",
        "exception",
        "critical",
        "print",
        "format",
        "join",
        "items",
        "keys",
        "values",
        "update",
        "get",
        "pop",
        "append",
        "extend",
        "copy",
        "cpu",
        "to",
        "clone",
        "detach",
        "item",
        "numel",
        "replace",
        "startswith",
        "endswith",
        "split",
        "write",
        "mkdir",
        "exists",
        "barrier",
        "get_rank",
        "get_world_size",
        "setdefault",
        "tolist",
        "float",
        "half",
        "bfloat16",
        "contiguous",
        "is_dir",
        "joinpath",
        "open",
        "close",
        "flush",
        "synchronize",
    }
)
_RUNTIME = "its FSDP1 behaviour on FSDP1 and FSDP2 models alike"
#: DCP functions that read FSDP1's sharded layout (ShardedTensor optimizer state).
_FSDP1_CHECKPOINT = frozenset(
    {
        "torch.distributed.checkpoint.optimizer.load_sharded_optimizer_state_dict",
        "torch.distributed.checkpoint.load_sharded_optimizer_state_dict",
    }
)


@dataclass(frozen=True)
class Options:
    """``StateDictOptions(...)`` source for each DCP call a state-dict site becomes (None: no
    options): ``model`` for ``get_model_state_dict``, ``optim`` for
    ``get_optimizer_state_dict``, ``load`` for ``set_model_state_dict``, ``optim_load`` for
    ``set_optimizer_state_dict``. DCP takes options per call, so each says its own FSDP1
    config. ``inexact`` names those of them that no ``StateDictOptions`` says exactly: a site
    that needs one takes the runtime form instead."""

    model: str | None
    optim: str | None
    load: str | None
    optim_load: str | None
    note: str = ""
    inexact: frozenset[str] = frozenset()


_DCP = "torch.distributed.checkpoint.state_dict"

#: FSDP1's defaults, in one place: ``(offload_to_cpu, rank0_only)`` of a model config
#: (``*StateDictConfig``) and of an optimizer config (``*OptimStateDictConfig``) where a call
#: omits it or passes None, or builds it without those arguments (``torch.distributed.fsdp.api``:
#: ``StateDictConfig.offload_to_cpu = False``, ``OptimStateDictConfig.offload_to_cpu = True``,
#: ``rank0_only = False``); an FSDP1 model starts FULL with both. ``OPTIONS_OF_SETTINGS``'s keys
#: have them filled in.
FSDP1_DEFAULTS: dict[str, tuple[bool, bool]] = {
    "StateDictConfig": (False, False),
    "OptimStateDictConfig": (True, False),
}

#: The FSDP1 settings that a ``StateDictOptions`` says exactly, and how: DCP's own translation
#: of its options for FSDP1 models (``torch.distributed.checkpoint.state_dict._verify_options``),
#: the table ``fsdp2_port.state_dict_type(m, options=...)`` follows (``fsdp1_api.
#: _settings_of_options``; a test checks the two agree). Key: the type, then ``(offload_to_cpu,
#: rank0_only)`` of the model config and of the optimizer config, FSDP1's defaults filled in.
OPTIONS_OF_SETTINGS: dict[tuple[str, tuple[bool, bool], tuple[bool, bool]], str] = {
    ("FULL_STATE_DICT", (True, True), (True, True)): (
        "StateDictOptions(full_state_dict=True, cpu_offload=True)"
    ),
    ("FULL_STATE_DICT", (False, False), (False, False)): "StateDictOptions(full_state_dict=True)",
    ("SHARDED_STATE_DICT", (True, False), (True, False)): "StateDictOptions(cpu_offload=True)",
    ("SHARDED_STATE_DICT", (False, False), (False, False)): "StateDictOptions()",
}

#: The sides of an ``OPTIONS_OF_SETTINGS`` key: the model config's settings, the optimizer's.
_MODEL, _OPTIM = 0, 1


def _dcp_options(
    kind: str, side: int, settings: tuple[bool, bool], *, load: bool = False
) -> tuple[bool, str | None]:
    """``(found, text)``: the ``StateDictOptions`` (None: DCP's defaults, no argument) under
    which DCP applies to an FSDP1 model the config ``settings`` on ``side`` for a ``kind``
    state dict (``OPTIONS_OF_SETTINGS``); DCP sets both configs from one options value, and a
    call reads only its own side's. ``load``: for ``FSDP.optim_state_dict_to_load``, which
    reads ``rank0_only`` and not ``offload_to_cpu``: an options value with the same
    ``rank0_only`` loads the same where none has the same offload too."""
    matches = [
        (sides[side] == settings, text)
        for (type_, *sides), text in OPTIONS_OF_SETTINGS.items()
        if type_ == kind and (sides[side] == settings or (load and sides[side][1] == settings[1]))
    ]
    if not matches:
        return False, None
    text = max(matches, key=lambda match: match[0])[1]  # the exact one first
    return True, None if text == "StateDictOptions()" else text


def _exact_side(kind: str, side: int, settings: tuple[bool, bool]) -> str | None:
    """The ``StateDictOptions`` text that says ``settings`` exactly on ``side`` of a ``kind``
    state dict (``OPTIONS_OF_SETTINGS``; the other side aside), or None."""
    for (type_, *sides), text in OPTIONS_OF_SETTINGS.items():
        if type_ == kind and sides[side] == settings:
            return text
    return None


def _block_options(kind: str, model: tuple[bool, bool], optim: tuple[bool, bool]) -> Options:
    """What each DCP call says inside ``FSDP.state_dict_type(m, kind, <model>, <optim>)``
    (``(offload_to_cpu, rank0_only)`` of each config, FSDP1's defaults filled in)."""
    full = kind == "FULL_STATE_DICT"
    forms: dict[str, str | None] = {}
    inexact: set[str] = set()
    notes = []
    for field, side, settings, what in (
        ("model", _MODEL, model, "state_dict_config"),
        ("optim", _OPTIM, optim, "optim_state_dict_config"),
    ):
        found, forms[field] = _dcp_options(kind, side, settings)
        if not found and full and settings == (False, True):
            found, forms[field] = _dcp_options(kind, side, (False, False))
            notes.append(
                f"{what} rank0_only=True without offload: every rank now gets the full "
                "state dict (the same values on rank 0, more memory elsewhere)"
            )
        if not found:
            inexact.add(field)
    found, optim_load = _dcp_options(kind, _OPTIM, optim, load=True)
    if not found:
        inexact.add("optim_load")
    return Options(
        forms["model"],
        forms["optim"],
        "StateDictOptions(full_state_dict=True)" if full else None,
        optim_load,
        "; ".join(notes),
        frozenset(inexact),
    )


#: FSDP1 outside a ``state_dict_type`` block: FULL, FSDP1's default configs (the model's
#: on every rank, on its device; the optimizer's offloaded on every rank: no DCP form).
DEFAULT = _block_options(
    "FULL_STATE_DICT", FSDP1_DEFAULTS["StateDictConfig"], FSDP1_DEFAULTS["OptimStateDictConfig"]
)


class StateDictRule:
    STAGE: ClassVar[str] = "analysis"
    CODE: ClassVar[str] = "F2P008"
    CODES: ClassVar[dict[str, Code]] = {
        "F2P008": Code(
            summary=(
                "FSDP.state_dict_type / optim_state_dict / optim_state_dict_to_load -> "
                "get_/set_*_state_dict (fsdp2_port's FSDP1 forms where they are not literal)"
            ),
            topic="state dicts",
            rewritten=(
                "a literal FULL/SHARDED `with FSDP.state_dict_type(...)` whose body takes state "
                "dicts only through the model → the block's calls become "
                "`get_/set_model_state_dict`, `get_/set_optimizer_state_dict` with "
                "`StateDictOptions` (configs read, `optim_state_dict_to_load` in both argument "
                "orders or through a name), the `with` goes; any other shape (runtime type, a "
                "callee such as `trainer.save_model()`, a context returned by a helper, "
                "`set_state_dict_type`) → the same call on `fsdp2_port` (`state_dict_type`, "
                "`set_state_dict_type`, `optim_state_dict`, `optim_state_dict_to_load`), which "
                "behave as FSDP1's on FSDP2 models too, its literal settings said as "
                "`options=StateDictOptions(...)` where DCP's options mean exactly them (configs "
                "bound to a name read only there go); a plain "
                "`m.state_dict()`/`m.load_state_dict(sd)` of a model built here → the full state "
                "dict (FSDP1's default) when it migrates; of a receiver that may also hold other "
                "modules (a helper's parameter, a DDP branch) or under a type set elsewhere in "
                "the file → `fsdp2_port.module_state_dict(m)`/`load_module_state_dict(m, sd)` "
                "(FSDP1's answer on FSDP2, each module's own on DDP and plain modules)"
            ),
            marked="`LOCAL_STATE_DICT` (no FSDP2 form: its model stays FSDP1)",
        ),
    }
    NEEDS: ClassVar[tuple[str, ...]] = ("F2P002",)
    EMITS: ClassVar[dict[str, str]] = {
        "StateDictOptions": _DCP + ":StateDictOptions",
        "get_model_state_dict": _DCP + ":get_model_state_dict",
        "set_model_state_dict": _DCP + ":set_model_state_dict",
        "get_optimizer_state_dict": _DCP + ":get_optimizer_state_dict",
        "set_optimizer_state_dict": _DCP + ":set_optimizer_state_dict",
        "fsdp2_port.state_dict_type": "fsdp2_port:state_dict_type",
        "fsdp2_port.set_state_dict_type": "fsdp2_port:set_state_dict_type",
        "fsdp2_port.optim_state_dict": "fsdp2_port:optim_state_dict",
        "fsdp2_port.optim_state_dict_to_load": "fsdp2_port:optim_state_dict_to_load",
        "fsdp2_port.module_state_dict": "fsdp2_port:module_state_dict",
        "fsdp2_port.load_module_state_dict": "fsdp2_port:load_module_state_dict",
    }

    def analyze(self, analysis: FileAnalysis) -> None:
        self.analysis = analysis
        self.handled: set[ast.AST] = set()
        self.persistent = any(
            analysis.fsdp1_name(node) == _FSDP + "set_state_dict_type"
            or analysis.resolves_to(node, "fsdp2_port.set_state_dict_type")
            for node in analysis.names.by_type[ast.Attribute]
        )
        for node in analysis.names.by_type[ast.Call]:
            assert isinstance(node, ast.Call)
            if node in self.handled or analysis.is_ignored(node):
                continue
            name = analysis.fsdp1_name(node.func)
            if name == _FSDP + "state_dict_type":
                self._context(node)
            elif name == _FSDP + "set_state_dict_type":
                self._runtime_call(
                    node, "set_state_dict_type", "a persistent FSDP1 state-dict type"
                )
        for node in analysis.names.by_type[ast.Call]:
            assert isinstance(node, ast.Call)
            if analysis.resolves_to(node.func, "fsdp2_port.state_dict_type"):
                # an earlier run's block: its state dicts are already FSDP1's on any model
                self.handled.update(_block_calls(analysis, node))
        for node in analysis.names.by_type[ast.Call]:
            assert isinstance(node, ast.Call)
            if node not in self.handled and not analysis.is_ignored(node):
                self._call(node, None, frozenset())

    # -- with FSDP.state_dict_type(...) ------------------------------------------------------------
    def _context(self, call: ast.Call) -> None:
        analysis = self.analysis
        self.handled.add(call)
        bound = calls.bind(call, _CONTEXT)
        if bound is None or "module" not in bound or "state_dict_type" not in bound:
            self._runtime_call(
                call, "state_dict_type", "FSDP.state_dict_type(...) with unusual arguments"
            )
            return
        kind = (analysis.fsdp1_name(bound["state_dict_type"].value) or "").removeprefix(
            "StateDictType."
        )
        item = analysis.names.parent.get(call)
        statement = analysis.names.parent.get(item) if isinstance(item, ast.withitem) else None
        if isinstance(statement, ast.With):  # the body's calls follow the block, never a default
            block_calls = [
                n for s in statement.body for n in ast.walk(s) if isinstance(n, ast.Call)
            ]
        else:
            block_calls = []
        # a ``with`` of this one item, binding nothing: the one the rewrites can remove
        block = (
            statement
            if isinstance(statement, ast.With)
            and len(statement.items) == 1
            and statement.items[0].optional_vars is None
            else None
        )
        if kind == "LOCAL_STATE_DICT":
            if block is not None and self._inert(call, block, bound["module"].value):
                return
            self.handled.update(block_calls)
            analysis.add_tied(
                self.CODE,
                call,
                bound["module"].value,
                "LOCAL_STATE_DICT has no FSDP2 form: save the sharded state dict with DCP instead",
                None,
                known=False,
            )
            return
        literal = self._literal(bound, kind)
        if block is not None and isinstance(literal, Options):
            group = frozenset({f"state_dict:{analysis.site_id(call)}"})
            if self._pure_block(call, block, bound["module"].value, literal, group):
                return
        self._runtime_call(call, "state_dict_type", "an FSDP1 state-dict block")
        for node in block_calls:
            if node not in self.handled:
                self._call(node, None, frozenset(), runtime_only=True, block=bound["module"].value)
        self.handled.update(block_calls)

    def _pure_block(
        self,
        call: ast.Call,
        statement: ast.With,
        model: ast.expr,
        options: Options,
        group: frozenset[str],
    ) -> bool:
        """The block's state-dict calls rewritten and the ``with`` removed; False (nothing
        added) when the body calls code that may take a state dict itself."""
        analysis = self.analysis
        text = analysis.source(model)
        body = [n for s in statement.body for n in ast.walk(s) if isinstance(n, ast.Call)]
        ours = [n for n in body if n not in self.handled and self._is_state_call(n, text)]
        if any(not self._safe(n) for n in body if n not in ours and n not in self.handled):
            return False
        if any(self._needs(n, text) in options.inexact for n in ours if n not in self.handled):
            return False  # no StateDictOptions says this config for that call: the runtime form
        for node in ours:
            if node not in self.handled:
                self._call(node, options, group, anchor=call.func, model=text)
        for name in ("state_dict_config", "optim_state_dict_config"):
            self._drop_config_binding(calls.bind(call, _CONTEXT).get(name), group)  # type: ignore[union-attr]
        message = "with FSDP.state_dict_type(...) removed: FSDP2 chooses the state dict per call"
        if options.note:
            message += "; " + options.note
        self._without_with(call, statement, model, message, group)
        return True

    def _inert(self, call: ast.Call, statement: ast.With, model: ast.expr) -> bool:
        """A block whose body reads no state-dict type (an optimizer's own ``state_dict()``,
        ``torch.save``): the ``with`` is removed, whatever type it sets (Lumina's
        LOCAL_STATE_DICT around ``torch.save(opt.state_dict(), ...)``)."""
        text = self.analysis.source(model)
        body = [n for s in statement.body for n in ast.walk(s) if isinstance(n, ast.Call)]
        if any(self._is_state_call(n, text) or not self._safe(n) for n in body):
            return False
        message = (
            "with FSDP.state_dict_type(...) removed: nothing in its block reads the state-dict "
            "type it sets"
        )
        self._without_with(call, statement, model, message, frozenset())
        self.handled.update(body)
        return True

    def _without_with(
        self,
        call: ast.Call,
        statement: ast.With,
        model: ast.expr,
        message: str,
        group: frozenset[str],
    ) -> None:
        """The site that removes the ``with`` (its body dedented): right on any model."""
        ties, deferred = self.analysis.ties.of(model)
        self.analysis.add(
            self.CODE,
            call,
            "kept: FSDP.state_dict_type(...) block",
            Rewrite(_unwrap(self.analysis, statement), message),
            "ALWAYS",
            ties=ties,
            deferred=deferred,
            groups=group,
        )

    def _literal(self, bound: dict[str, calls.Argument], kind: str) -> Options | None:
        """The options of a literal FULL/SHARDED block, each call's its own (``Options``), or
        None (run-time values)."""
        if kind not in ("FULL_STATE_DICT", "SHARDED_STATE_DICT"):
            return None
        full = kind == "FULL_STATE_DICT"
        model = self._config(bound.get("state_dict_config"), full, "StateDictConfig")
        optim = self._config(bound.get("optim_state_dict_config"), full, "OptimStateDictConfig")
        if model is None or optim is None:
            return None
        return _block_options(kind, model, optim)

    def _config(
        self, arg: calls.Argument | None, full: bool, family: str
    ) -> tuple[bool, bool] | None:
        """``(offload_to_cpu, rank0_only)`` of a literal config (FSDP1's defaults when absent)."""
        analysis = self.analysis
        if arg is None or calls.is_none(arg.value):
            return FSDP1_DEFAULTS[family]
        value: ast.AST = arg.value
        if isinstance(value, ast.Name):
            binding = self._reaching(value)
            if binding is None or binding.value is None:
                return None
            if analysis.sole_binding(value) is None and self._reads(binding) != [value]:
                return None
            value = binding.value
        return self._flags(value, ("Full" if full else "Sharded") + family, family)

    def _flags(self, value: ast.AST, expected: str, family: str) -> tuple[bool, bool] | None:
        """``(offload_to_cpu, rank0_only)`` of ``expected(...)`` with literal booleans, the
        class's defaults (``FSDP1_DEFAULTS[family]``) filled in; None for another call, a
        run-time value or ``_use_dtensor=True`` (DCP's options never set it)."""
        if not (isinstance(value, ast.Call) and self.analysis.fsdp1_name(value.func) == expected):
            return None
        names = ["offload_to_cpu"] + (["rank0_only"] if expected.startswith("Full") else [])
        bound = calls.bind(value, [*names, "_use_dtensor"])
        if bound is None:
            return None
        flags = {name: calls.literal_bool(arg.value) for name, arg in bound.items()}
        if any(v is None for v in flags.values()) or flags.get("_use_dtensor"):
            return None
        offload, rank0_only = FSDP1_DEFAULTS[family]
        return (
            bool(flags.get("offload_to_cpu", offload)),
            bool(flags.get("rank0_only", rank0_only)),
        )

    def _drop_config_binding(self, arg: calls.Argument | None, group: frozenset[str]) -> None:
        """A config bound to a name just for this site (same scope, read only there) goes."""
        analysis = self.analysis
        if arg is None or not isinstance(arg.value, ast.Name):
            return
        binding = self._reaching(arg.value)
        if binding is None or self._reads(binding) != [arg.value]:
            return
        statement = analysis.names.statement(binding.node)
        if not isinstance(statement, ast.Assign) or analysis.names.scope_of(
            statement
        ) is not analysis.names.scope_of(arg.value):
            return
        start = analysis.statement_start(statement)
        analysis.add(
            self.CODE,
            statement,
            "kept: a state-dict config binding",
            Rewrite(
                [Edit(start, analysis.lines.line_end(analysis.lines.end(statement) - 1), "")],
                "state-dict config binding removed (its only use was rewritten)",
            ),
            "ALWAYS",
            groups=group,
        )

    def _safe(self, call: ast.Call) -> bool:
        """A call that cannot be taking the model's state dict under the block's type."""
        names = self.analysis.names.qualified(call.func)
        if names & _FSDP1_CHECKPOINT:
            return False
        if names and all(n.startswith(_SAFE_PREFIXES) for n in names):
            return True
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr in ("state_dict", "load_state_dict"):
            return not self.analysis.ties.of(func.value)[0]  # another module's: not this model's
        return isinstance(func, ast.Attribute) and func.attr in _SAFE_METHODS

    def _needs(self, call: ast.Call, model: str) -> str | None:
        """The ``Options`` field a block's state-dict call becomes a DCP call with."""
        name = self.analysis.fsdp1_name(call.func)
        if name == _FSDP + "optim_state_dict":
            return "optim"
        if name == _FSDP + "optim_state_dict_to_load" or _to_load_inside(self.analysis, call):
            return "optim_load"
        func = call.func
        if isinstance(func, ast.Attribute) and self.analysis.source(func.value) == model:
            return {"state_dict": "model", "load_state_dict": "load"}.get(func.attr)
        return None

    def _is_state_call(self, call: ast.Call, model: str) -> bool:
        name = self.analysis.fsdp1_name(call.func)
        if name in (_FSDP + "optim_state_dict", _FSDP + "optim_state_dict_to_load"):
            return True
        func = call.func
        return (
            isinstance(func, ast.Attribute)
            and func.attr in ("state_dict", "load_state_dict")
            and self.analysis.source(func.value) == model
        ) or _to_load_inside(self.analysis, call)

    # -- the calls ---------------------------------------------------------------------------------
    def _call(
        self,
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
        analysis = self.analysis
        name = analysis.fsdp1_name(call.func)
        if analysis.names.qualified(call.func) & _FSDP1_CHECKPOINT:
            self.handled.add(call)
            ties, deferred = (
                analysis.ties.of(block) if block is not None else (frozenset(), frozenset())
            )
            analysis.add(
                self.CODE,
                call,
                "load_sharded_optimizer_state_dict reads FSDP1's sharded layout (ShardedTensor): "
                "with FSDP2, dcp.load into get_optimizer_state_dict(model, optim), then "
                "set_optimizer_state_dict",
                ties=ties,
                deferred=deferred,
                groups=groups,
            )
        elif name == _FSDP + "optim_state_dict":
            self.handled.add(call)
            self._optim(call, options, groups, anchor)
        elif name == _FSDP + "optim_state_dict_to_load":
            self.handled.add(call)
            self._to_load(call, options, groups, anchor)
        elif not runtime_only and isinstance(call.func, ast.Attribute):
            if call.func.attr in ("state_dict", "load_state_dict"):
                if model is None or analysis.source(call.func.value) == model:
                    self._module_call(call, options, groups, anchor)

    def _optim(
        self, call: ast.Call, options: Options | None, groups: frozenset[str], anchor
    ) -> None:
        analysis = self.analysis
        bound = calls.bind(call, ("model", "optim", "optim_state_dict", "group"))
        if options is None and not analysis.options.runtime_dependency and not self.persistent:
            options = DEFAULT
        if (
            options is None
            or "optim" in options.inexact  # FSDP1's default FULL offloads on every rank
            or bound is None
            or set(bound) != {"model", "optim"}
        ):
            self._runtime_call(call, "optim_state_dict", "FSDP.optim_state_dict(...)", groups)
            return
        new = _new(
            "get_optimizer_state_dict",
            [analysis.source(bound["model"].value), analysis.source(bound["optim"].value)],
            options.optim,
        )
        self._pure_site(
            call,
            bound["model"].value,
            new,
            "FSDP.optim_state_dict(...) -> get_optimizer_state_dict(...)",
            groups,
            anchor,
        )
        self._dcp_resume(call, bound["model"].value, bound["optim"].value)

    def _dcp_resume(self, call: ast.Call, model: ast.expr, optim: ast.expr) -> None:
        """``FSDP.optim_state_dict(m, o)`` filled by a DCP load in the same function: FSDP1's
        dict of an optimizer that has not stepped holds no state, so the load restored no
        moments; ``get_optimizer_state_dict`` holds it (lr 0 step), so the migration restores
        them. Marked, with the model."""
        analysis = self.analysis
        function = analysis.names.function_of(call) or analysis.tree
        if not _fresh(analysis, optim, call):
            return
        statement = analysis.names.statement(call)
        names = {t.id for t in getattr(statement, "targets", []) if isinstance(t, ast.Name)}
        for node in ast.walk(function):
            if not (isinstance(node, ast.Call) and analysis.resolves_to(node.func, *_DCP_LOADS)):
                continue
            used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            if names & used or any(n is call for n in ast.walk(node)):
                break
        else:
            return
        ties, deferred = analysis.ties.of(model)
        message = (
            "a DCP resume through FSDP.optim_state_dict: on FSDP1 an optimizer that has not "
            "stepped gives no state, so this load restored no Adam moments; "
            "get_optimizer_state_dict gives its state, so the migrated run restores them and "
            "differs from the FSDP1 one from the first step after the resume (check which you "
            "want)"
        )
        analysis.add(
            self.CODE,
            call,
            message,
            Rewrite([], message, review=True),
            "MODELS" if ties or deferred else "RUN",
            ties=ties,
            deferred=deferred,
            quiet=True,
            holds=False,
        )

    def _to_load(
        self, call: ast.Call, options: Options | None, groups: frozenset[str], anchor
    ) -> None:
        """``o.load_state_dict(FSDP.optim_state_dict_to_load(...))``, or the same in two
        consecutive statements through a name used nowhere else."""
        analysis = self.analysis
        parts = _to_load_parts(analysis, call)
        parent = analysis.names.parent.get(call)
        outer: ast.Call | None = None
        pair: tuple[ast.Assign, ast.stmt] | None = None
        if isinstance(parent, ast.Call) and _loads(parent, call):
            outer = parent
        elif isinstance(parent, ast.Assign):
            pair = self._paired_load(parent)
            outer = None if pair is None else _expression_call(pair[1])
        if parts is None:
            self._runtime_call(
                call, "optim_state_dict_to_load", "FSDP.optim_state_dict_to_load(...)", groups
            )
            return
        model, optim, state = (analysis.source(p) for p in parts)
        if options is None and not analysis.options.runtime_dependency and not self.persistent:
            options = DEFAULT
        if options is None or "optim_load" in options.inexact or outer is None:
            if not analysis.options.runtime_dependency:
                analysis.add_tied(
                    self.CODE,
                    call,
                    parts[0],
                    "FSDP.optim_state_dict_to_load(...): use set_optimizer_state_dict",
                    None,
                    known=False,
                    groups=groups,
                )
                return
            in_order = call.keywords or (call.args and call.args[0] is parts[0])
            if in_order:  # torch >= 2.1's order, or keywords: only the function changes
                edit = analysis.replace(call.func, "fsdp2_port.optim_state_dict_to_load")
            else:
                text = f"fsdp2_port.optim_state_dict_to_load({model}, {optim}, {state})"
                edit = analysis.replace(call, text)
            analysis.add(
                self.CODE,
                call,
                "kept: FSDP.optim_state_dict_to_load(...)",
                Rewrite(
                    [edit],
                    "FSDP.optim_state_dict_to_load -> fsdp2_port.optim_state_dict_to_load: "
                    + _RUNTIME,
                    [analysis.module_import("fsdp2_port")],
                ),
                "ALWAYS",
                groups=groups,
            )
            return
        self.handled.add(outer)
        new = _new("set_optimizer_state_dict", [model, optim, state], options.optim_load)
        if pair is None:
            edits = [analysis.replace(outer, new.text)]
        else:
            assign, load = pair
            edits = [
                Edit(analysis.lines.start(assign), analysis.lines.end(assign), new.text),
                Edit(
                    analysis.statement_start(load),
                    analysis.lines.line_end(analysis.lines.end(load) - 1),
                    "",
                ),
            ]
        ties, deferred = analysis.ties.of(parts[0])
        analysis.add(
            self.CODE,
            call,
            "kept: FSDP.optim_state_dict_to_load(...)",
            Rewrite(
                edits,
                "optim_state_dict_to_load + load_state_dict -> set_optimizer_state_dict(...)",
                self._imports(anchor or call.func, new),
            ),
            "ALWAYS",
            ties=ties,
            deferred=deferred,
            groups=groups,
        )

    def _module_call(
        self, call: ast.Call, options: Options | None, groups: frozenset[str], anchor
    ) -> None:
        """``m.state_dict()`` / ``m.load_state_dict(sd)``: in a pure block, or on a model that
        is, or may turn out to be, built by an FSDP1 constructor of the run, or that is known to
        be FSDP1 (FSDP1's FULL default, spelled out when the model migrates: FSDP2's own default
        is sharded). Receivers the run ties to no model are left alone, silently."""
        analysis = self.analysis
        func = call.func
        assert isinstance(func, ast.Attribute)
        receiver = func.value
        plain = options is None
        if plain:
            ties, deferred = analysis.ties.of(receiver)
            if not (ties or deferred or analysis.ties.known_fsdp1(receiver)):
                if analysis.options.runtime_dependency and analysis.named_like_model(receiver):
                    self.handled.add(call)
                    self._module_runtime_call(call, receiver, groups)
                return
            if deferred or self.persistent:
                self.handled.add(call)
                self._module_runtime_call(call, receiver, groups)
                return
            options = DEFAULT
        assert options is not None
        self.handled.add(call)
        text = analysis.source(receiver)
        if func.attr == "state_dict":
            if call.args or call.keywords:
                analysis.add_tied(
                    self.CODE,
                    call,
                    receiver,
                    "state_dict(...) with arguments: use get_model_state_dict by hand",
                    None,
                    known=plain,
                    groups=groups,
                )
                return
            new = _new("get_model_state_dict", [text], options.model)
            self._pure_site(
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
                self.CODE,
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
        self._pure_site(
            call,
            receiver,
            new,
            "load_state_dict(...) -> set_model_state_dict(...)",
            groups,
            anchor,
            plain,
        )

    def _module_runtime_call(
        self, call: ast.Call, receiver: ast.expr, groups: frozenset[str]
    ) -> None:
        """A plain ``m.state_dict(...)``/``m.load_state_dict(...)`` whose receiver may hold
        other modules as well (a parameter, a DDP branch) or follow a type set elsewhere: ->
        ``fsdp2_port.module_state_dict(m, ...)``/``load_module_state_dict(m, ...)``, FSDP1's
        answer on FSDP2 and each module's own on anything else. Rewritten when the models it
        may hold migrate; nothing at all when the run ties it to no FSDP1 model."""
        analysis = self.analysis
        func = call.func
        assert isinstance(func, ast.Attribute)
        if not analysis.options.runtime_dependency:
            analysis.add_tied(
                self.CODE,
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
            self.CODE,
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

    def _paired_load(self, assign: ast.Assign) -> tuple[ast.Assign, ast.stmt] | None:
        """``osd = FSDP.optim_state_dict_to_load(...)`` directly followed by the statement
        ``o.load_state_dict(osd)``, with ``osd`` used nowhere else."""
        analysis = self.analysis
        if len(assign.targets) != 1 or not isinstance(assign.targets[0], ast.Name):
            return None
        bindings = analysis.names.bindings_of(assign.targets[0])
        uses = analysis.uses_of(bindings[0]) if len(bindings) == 1 else []
        body = _block_of(analysis, assign)
        if len(uses) != 1 or body is None or body.index(assign) + 1 >= len(body):
            return None
        following = body[body.index(assign) + 1]
        call = _expression_call(following)
        if call is not None and _loads(call, uses[0]):
            return assign, following
        return None

    # -- emitting ----------------------------------------------------------------------------------
    def _runtime_call(
        self, call: ast.Call, function: str, what: str, groups: frozenset[str] = frozenset()
    ) -> None:
        """``FSDP.<function>(...)`` -> ``fsdp2_port.<function>(...)``, the same arguments."""
        analysis = self.analysis
        self.handled.add(call)
        first = call.args[0] if call.args else (call.keywords[0].value if call.keywords else call)
        if not analysis.options.runtime_dependency:
            analysis.add_tied(
                self.CODE,
                call,
                first,
                f"{what}: port with get_/set_*_state_dict and StateDictOptions",
                None,
                known=False,
                groups=groups,
            )
            return
        if function in ("state_dict_type", "set_state_dict_type"):
            form = self._options_form(call)
            if form is not None:
                self._runtime_options_call(call, function, what, groups, *form)
                return
        rewrite = Rewrite(
            [analysis.replace(call.func, f"fsdp2_port.{function}")],
            f"FSDP.{function} -> fsdp2_port.{function}: {_RUNTIME}",
            [analysis.module_import("fsdp2_port")],
        )
        analysis.add(self.CODE, call, f"kept: {what}", rewrite, "ALWAYS", groups=groups)

    def _runtime_options_call(
        self,
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
        analysis = self.analysis
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
            [analysis.module_import("fsdp2_port"), *self._imports(kind, new)],
        )
        analysis.add(self.CODE, call, f"kept: {what}", rewrite, "ALWAYS", groups=group)
        for config in configs:
            self._drop_config_binding(config, group)

    def _options_form(self, call: ast.Call) -> tuple[str, list[calls.Argument], ast.expr] | None:
        """The ``options=StateDictOptions(...)`` text (with ``optim_options=`` where no one
        options value says both configs) that says exactly the FSDP1 settings of a
        ``state_dict_type``/``set_state_dict_type`` call (``OPTIONS_OF_SETTINGS``), its config
        arguments and its type argument; None unless the module is passed first, the type is
        a literal member and each config is written at the call, or bound to a name in the
        same scope and read only there, with literal booleans."""
        bound = calls.bind(call, _CONTEXT)
        if bound is None or "state_dict_type" not in bound or not call.args:
            return None
        if "module" not in bound or bound["module"].node is not call.args[0]:
            return None
        kind = (self.analysis.fsdp1_name(bound["state_dict_type"].value) or "").removeprefix(
            "StateDictType."
        )
        if kind not in ("FULL_STATE_DICT", "SHARDED_STATE_DICT"):
            return None
        prefix = "Full" if kind == "FULL_STATE_DICT" else "Sharded"
        configs = [bound[n] for n in ("state_dict_config", "optim_state_dict_config") if n in bound]
        model = self._settings(bound.get("state_dict_config"), prefix + "StateDictConfig")
        optim = self._settings(
            bound.get("optim_state_dict_config"), prefix + "OptimStateDictConfig"
        )
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

    def _settings(self, arg: calls.Argument | None, expected: str) -> tuple[bool, bool] | None:
        """``(offload_to_cpu, rank0_only)`` of an exactly known config, FSDP1's defaults filled
        in; None when not literal, of another class, with ``_use_dtensor=True``, or a name read
        anywhere else."""
        analysis = self.analysis
        family = expected.removeprefix("Full").removeprefix("Sharded")
        if arg is None or calls.is_none(arg.value):
            return FSDP1_DEFAULTS[family]
        value: ast.AST = arg.value
        if isinstance(value, ast.Name):
            binding = self._reaching(value)
            if (
                binding is None
                or binding.value is None
                or self._reads(binding) != [value]
                or analysis.names.scope_of(binding.node) is not analysis.names.scope_of(value)
            ):
                return None
            value = binding.value
        return self._flags(value, expected, family)

    def _reaching(self, name: ast.Name) -> Binding | None:
        """The one ``name = value`` assignment a read sees: the name's sole binding in its
        scope; where a function binds the name more than once (``save_policy`` for the model,
        then for the optimizer), the last assignment before the read in the read's own
        statement list, with none of the name's other bindings in between, all of them plain
        assignments, and no ``global``/``nonlocal`` of it."""
        analysis = self.analysis
        sole = analysis.sole_binding(name)
        if sole is not None:
            return sole
        bindings = analysis.names.bindings_of(name)
        scope = analysis.names.scope_of(name)
        if (
            len(bindings) < 2
            or any(b.kind != "assign" or b.value is None for b in bindings)
            or any(analysis.names.scope_of(b.node) is not scope for b in bindings)
            or name.id in scope.globals | scope.nonlocals
            or not scope.is_function
        ):
            return None
        statement = analysis.names.statement(name)
        block = _block_of(analysis, statement)
        if block is None:
            return None
        earlier = block[: block.index(statement)]
        before = [b for b in bindings if analysis.names.statement(b.node) in earlier]
        if not before:
            return None
        last = max(before, key=lambda b: analysis.lines.start(b.node))
        start, end = analysis.lines.start(last.node), analysis.lines.start(name)
        if any(b is not last and start < analysis.lines.start(b.node) < end for b in bindings):
            return None
        return last

    def _reads(self, binding: Binding) -> list[ast.Name] | None:
        """The reads that may see ``binding``: every read of the name when it is its scope's
        only binding; else those after it up to the name's next binding, the binding outside
        any loop and no nested scope reading the name (None otherwise: unknown)."""
        analysis = self.analysis
        uses = analysis.uses_of(binding)
        scope = analysis.names.scope_of(binding.node)
        bindings = scope.bindings.get(binding.name, [])
        if len(bindings) == 1:
            return uses
        function = analysis.names.function_of(binding.node)
        for ancestor in analysis.names.ancestors(binding.node):
            if ancestor is function:
                break
            if isinstance(ancestor, (ast.For, ast.AsyncFor, ast.While)):
                return None
        if any(analysis.names.scope_of(u) is not scope for u in uses):
            return None  # a nested function reads it, at any time
        start = analysis.lines.start(binding.node)
        later = [analysis.lines.start(b.node) for b in bindings]
        end = min((at for at in later if at > start), default=len(analysis.text))
        return [u for u in uses if start < analysis.lines.start(u) < end]

    def _pure_site(
        self,
        call: ast.Call,
        model: ast.AST,
        new: _New,
        message: str,
        groups: frozenset[str],
        anchor,
        plain: bool = False,
    ) -> None:
        analysis = self.analysis
        rewrite = Rewrite(
            [analysis.replace(call, new.text)], message, self._imports(anchor or call.func, new)
        )
        ties, deferred = analysis.ties.of(model)
        fsdp1 = analysis.ties.known_fsdp1(model)
        requirement: Requirement = "ALWAYS"
        if plain:  # FSDP1's default spelled out: only once the model is FSDP2
            requirement = "MODELS" if ties or deferred else "RUN"
        analysis.add(
            self.CODE,
            call,
            "kept: an FSDP1 state-dict call",
            rewrite,
            requirement,
            ties=ties,
            deferred=deferred,
            groups=groups,
            quiet=plain and bool(ties or deferred),
            # no model of the run reaches it: a plain module's state dict
            unknown="" if plain and not ties and deferred and not fsdp1 else None,
        )

    def _imports(self, anchor: ast.AST, new: _New) -> list[NeededImport]:
        analysis = self.analysis
        if (
            isinstance(anchor, (ast.Attribute, ast.Name))
            and analysis.fsdp1_name(anchor) is not None
        ):
            return [analysis.import_for(anchor, MODULE, name) for name in new.names]
        return [analysis.module_level_import(MODULE, name) for name in new.names]


@dataclass(frozen=True)
class _New:
    text: str
    names: list[str]


def _new(function: str, args: list[str], options: str | None) -> _New:
    parts = args + ([f"options={options}"] if options else [])
    return _New(
        f"{function}({', '.join(parts)})", [function] + (["StateDictOptions"] if options else [])
    )


def _expression_call(statement: ast.stmt) -> ast.Call | None:
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        return statement.value
    return None


def _block_of(analysis: FileAnalysis, statement: ast.stmt) -> list[ast.stmt] | None:
    parent = analysis.names.parent.get(statement)
    for field in ("body", "orelse", "finalbody"):
        block = getattr(parent, field, None)
        if isinstance(block, list) and statement in block:
            return block
    return None


def _loads(outer: ast.Call, inner: ast.AST) -> bool:
    """``x.load_state_dict(inner)`` with ``inner`` its only argument."""
    func = outer.func
    return (
        isinstance(func, ast.Attribute)
        and func.attr == "load_state_dict"
        and len(outer.args) == 1
        and not outer.keywords
        and outer.args[0] is inner
    )


def _to_load_inside(analysis: FileAnalysis, call: ast.Call) -> bool:
    """``o.load_state_dict(FSDP.optim_state_dict_to_load(...))``: the outer call of a pair."""
    return bool(
        isinstance(call.func, ast.Attribute)
        and call.func.attr == "load_state_dict"
        and len(call.args) == 1
        and isinstance(call.args[0], ast.Call)
        and analysis.fsdp1_name(call.args[0].func) == _FSDP + "optim_state_dict_to_load"
    )


def _to_load_parts(
    analysis: FileAnalysis, call: ast.Call
) -> tuple[ast.expr, ast.expr, ast.expr] | None:
    """``(model, optim, optim_state_dict)`` in whichever of FSDP1's two orders is used.

    torch >= 2.1: ``(model, optim, optim_state_dict)``; before: ``(optim_state_dict, model,
    optim)``. Positional calls are told apart by which argument is the optimizer that loads
    the result (or, without one, by the model being a known FSDP1 model).
    """
    if any(isinstance(x, ast.Starred) for x in call.args) or any(
        k.arg is None for k in call.keywords
    ):
        return None
    keywords = {k.arg: k.value for k in call.keywords}
    if set(keywords) - {*_TO_LOAD, "is_named_optimizer", "load_directly", "group"}:
        return None
    if not call.args and all(k in keywords for k in _TO_LOAD):
        return keywords["model"], keywords["optim"], keywords["optim_state_dict"]
    if len(call.args) != 3:
        return None
    first, second, third = call.args
    parent = analysis.names.parent.get(call)
    optimizer = None
    if isinstance(parent, ast.Call) and _loads(parent, call):
        assert isinstance(parent.func, ast.Attribute)
        optimizer = analysis.source(parent.func.value)
    if optimizer is not None:
        if analysis.source(second) == optimizer and analysis.source(third) != optimizer:
            return first, second, third
        if analysis.source(third) == optimizer and analysis.source(second) != optimizer:
            return second, third, first
        return None
    if analysis.ties.of(first)[0] or analysis.ties.known_fsdp1(first):
        return first, second, third
    if analysis.ties.of(second)[0] or analysis.ties.known_fsdp1(second):
        return second, third, first
    return None


def _block_calls(analysis: FileAnalysis, context: ast.Call) -> list[ast.Call]:
    """The calls in the body of the ``with`` whose item is ``context``."""
    item = analysis.names.parent.get(context)
    statement = analysis.names.parent.get(item) if isinstance(item, ast.withitem) else None
    if not isinstance(statement, ast.With):
        return []
    return [n for s in statement.body for n in ast.walk(s) if isinstance(n, ast.Call)]


def _fresh(analysis: FileAnalysis, optim: ast.expr, use: ast.AST) -> bool:
    """``optim`` is built in this function (``optimizer = AdamW(...)``) and not stepped before
    ``use``: it has no state yet."""
    if not isinstance(optim, ast.Name):
        return False
    binding = analysis.sole_binding(optim)
    if binding is None or not isinstance(binding.value, ast.Call):
        return False
    if analysis.names.function_of(binding.node) is not analysis.names.function_of(use):
        return False
    before = analysis.lines.start(use)
    return not any(
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "step"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == optim.id
        and analysis.lines.start(node) < before
        for node in analysis.names.by_type[ast.Call]
    )


def _unwrap(analysis: FileAnalysis, statement: ast.With) -> list[Edit]:
    """Edits that remove a ``with`` header and take its body one level out.

    The header's trailing comment stays, as a comment line above the body. Lines inside a
    multi-line string are not touched (their leading whitespace is data).
    """
    text = analysis.text
    start = analysis.statement_start(statement)
    indent = analysis.lines.indent_at(start)
    first = statement.body[0]
    body_start = analysis.lines.start(first)
    colon = text.rindex(":", analysis.lines.end(statement.items[-1].context_expr), body_start)
    if analysis.lines.line_of(colon) == analysis.lines.line_of(body_start):
        return [Edit(start + len(indent), body_start, "")]
    header_end = analysis.lines.line_end(colon)
    comment = text[colon + 1 : header_end].strip()
    keep = f"{indent}{comment}{analysis.lines.newline()}" if comment.startswith("#") else ""
    edits = [Edit(start, header_end, keep)]
    step = len(analysis.lines.indent_at(body_start)) - len(indent)
    protected = _string_continuations(statement)
    last_line = analysis.lines.line_of(analysis.lines.end(statement.body[-1]) - 1)
    for line in range(analysis.lines.line_of(header_end), last_line + 1):
        if line in protected:
            continue
        line_start = analysis.lines.starts[line - 1]
        remove = min(step, len(analysis.lines.indent_at(line_start)))
        if remove:
            edits.append(Edit(line_start, line_start + remove, ""))
    return edits


def _string_continuations(statement: ast.With) -> set[int]:
    """Lines that start inside a multi-line string literal of ``statement``'s body."""
    lines: set[int] = set()
    for node in ast.walk(statement):
        if (
            isinstance(node, (ast.Constant, ast.JoinedStr))
            and node.end_lineno
            and node.end_lineno > node.lineno
        ):
            if isinstance(node, ast.JoinedStr) or isinstance(node.value, (str, bytes)):
                lines.update(range(node.lineno + 1, node.end_lineno + 1))
    return lines
