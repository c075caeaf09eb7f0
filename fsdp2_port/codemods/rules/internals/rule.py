"""F2P010: FSDP1 APIs and internals with no mechanical FSDP2 rewrite, each with what to do.

- ``m.module`` on an FSDP1 model built in this run becomes ``m`` (FSDP2 does not wrap); on a
  receiver that may also hold another wrapper (DDP), ``fsdp2_port.unwrapped(m)``, right for all.
- Static FSDP1 APIs other than the state-dict ones (``summon_full_params``, ``fsdp_modules``,
  ``set_state_dict_type``, the deprecated optimizer-state functions...) and FSDP1-only
  attributes of a model (flat parameters, handles, ``check_is_root``, ``process_group``...)
  are marked. Tied to a model built here, they keep it on FSDP1: the code around them would
  otherwise meet an FSDP2 module it was not written for.
- ``ShardedGradScaler(...)`` becomes ``fsdp2_port.GradScaler(...)`` with the same arguments:
  a scaler is tied to no model, and that one is right on all (the inf/NaN verdict reduced
  over the group). Other references to the class (type tests, annotations, subclasses) are
  marked; so is the call with ``--no-runtime-dependency``.
- ``_fsdp_wrapped_module`` / ``_flat_param`` anywhere, in attributes or in strings (state-dict
  key prefixes that silently stop matching under FSDP2), are marked.
"""

from __future__ import annotations

import ast
from typing import ClassVar

from fsdp2_port.codemods import fsdp1
from fsdp2_port.codemods.analysis import FileAnalysis
from fsdp2_port.codemods.assumptions import (
    EITHER_STATIC_APIS,
    FSDP1_ATTRIBUTES_IN_STRINGS,
    FSDP1_HANDLE_ATTRIBUTES,
    FSDP1_ONLY_ATTRIBUTES,
    FSDP1_ONLY_LIBRARIES,
    FSDP1_SHARED_ATTRIBUTES,
    FSDP1_STATIC_APIS,
    FSDP1_VALUE_ATTRIBUTES,
    FSDP1_WRAPPED_ATTRIBUTES,
    OTHER_WRAPPERS,
    STRING_EDIT_METHODS,
)
from fsdp2_port.codemods.local_names import seen_only_here
from fsdp2_port.codemods.plan import Rewrite
from fsdp2_port.codemods.rules.base import Code
from fsdp2_port.codemods.text import Edit

_FSDP = "FullyShardedDataParallel."
_FSDP1_ATTRIBUTES = FSDP1_ONLY_ATTRIBUTES.members | FSDP1_SHARED_ATTRIBUTES.members
#: ``ShardedGradScaler`` kept (``--no-runtime-dependency``).
_SCALER_KEPT = (
    "ShardedGradScaler: with FSDP2 use torch.amp.GradScaler (check that the inf/NaN verdict is "
    "reduced across ranks)"
)
_INTERNAL = (
    "{}: FSDP1 internal; FSDP2 keeps the original modules and parameters "
    "(no wrapper, no flat parameter)"
)


_FLAG_SET = (
    "{}: an FSDP1 flag set to a constant; on an FSDP2 module it only adds an attribute nothing "
    "reads: check what it did for FSDP1 (this line holds no model)"
)


class InternalsRule:
    STAGE: ClassVar[str] = "analysis"
    CODE: ClassVar[str] = "F2P010"
    CODES: ClassVar[dict[str, Code]] = {
        "F2P010": Code(
            summary=(
                "flag FSDP1 APIs/internals without a mechanical rewrite (summon_full_params, "
                ".module, ...)"
            ),
            topic="internals",
            rewritten=(
                "`m.module` → `m` (a model built here), `fsdp2_port.unwrapped(m)` (one that may "
                "be DDP, or a receiver named like a model the run cannot tie; never "
                "`self.module`); `FSDP.summon_full_params`, `FSDP.fsdp_modules`, "
                "`FSDP.full_optim_state_dict`, `sharded_optim_state_dict`, "
                "`scatter_full_optim_state_dict`, `shard_full_optim_state_dict` → the same call "
                "on `fsdp2_port` (FSDP1's own on FSDP1 models, the same meaning on FSDP2, DDP "
                "and plain ones); `m._handle.reshard(flag)` → `fsdp2_port.reshard(m, flag)` "
                "(FSDP1's call on FSDP1 models, `reshard()` on FSDP2 ones); "
                "`ShardedGradScaler(...)` → `fsdp2_port.GradScaler(...)`, the same arguments "
                "(`torch.amp.GradScaler` with the inf/NaN verdict reduced over "
                "the process group: right on FSDP1, FSDP2, DDP and plain models), also where "
                "the class is bound to a local name only called (`scaler_type = "
                "ShardedGradScaler`; `scaler_type(...)`)"
            ),
            marked=(
                "the other deprecated optimizer-state functions, other references to "
                "`ShardedGradScaler` (type tests, annotations, subclasses), FSDP1-only "
                "attributes (flat parameters, handles, `check_is_root`, `sharding_strategy`...; "
                "on an untied receiver they hold the run; names other objects share, such as "
                "`process_group` or `mixed_precision`, only on a receiver named like a model), "
                "`_fsdp_wrapped_module`/`_flat_param` in attributes and strings (state-dict key "
                "prefixes)"
            ),
            proven_by=(
                "tests/test_migrated_scripts.py::test_the_migration_trains_like_the_original[kwargs_policy.py-2-fp32-args0]",
                "tests/test_multifile_programs.py::test_the_migrated_program_trains_like_the_original[base_trainer-fp32--]",
                "tests/test_multifile_programs.py::test_the_migrated_program_trains_like_the_original[optim_helpers-fp32--]",
                "tests/test_type_tests_and_scaler.py::test_type_tests_configs_and_scaler_run_as_fsdp1_did",
                "tests/test_grad_scaler.py::test_fsdp1_steps_as_sharded_grad_scaler",
                "tests/test_fsdp1_api_forms.py::test_clip_summon_fsdp_modules_match_fsdp1",
                "tests/test_fsdp1_api_forms.py::test_legacy_optimizer_state_matches_fsdp1",
            ),
        ),
    }
    NEEDS: ClassVar[tuple[str, ...]] = ("F2P002",)
    EMITS: ClassVar[dict[str, str]] = {
        "fsdp2_port.unwrapped": "fsdp2_port:unwrapped",
        "fsdp2_port.reshard": "fsdp2_port:reshard",
        "fsdp2_port.fsdp_wrapped_module": "fsdp2_port:fsdp_wrapped_module",
        "fsdp2_port.summon_full_params": "fsdp2_port:summon_full_params",
        "fsdp2_port.fsdp_modules": "fsdp2_port:fsdp_modules",
        "fsdp2_port.full_optim_state_dict": "fsdp2_port:full_optim_state_dict",
        "fsdp2_port.sharded_optim_state_dict": "fsdp2_port:sharded_optim_state_dict",
        "fsdp2_port.scatter_full_optim_state_dict": "fsdp2_port:scatter_full_optim_state_dict",
        "fsdp2_port.shard_full_optim_state_dict": "fsdp2_port:shard_full_optim_state_dict",
        "fsdp2_port.GradScaler": "fsdp2_port:GradScaler",
    }

    def analyze(self, analysis: FileAnalysis) -> None:
        for node in analysis.names.by_type[ast.Attribute]:
            assert isinstance(node, ast.Attribute)
            if not analysis.is_ignored(node):
                self._attribute(analysis, node)
        for call in analysis.names.by_type[ast.Call]:
            assert isinstance(call, ast.Call)
            library = next(
                iter(analysis.names.qualified(call.func) & FSDP1_ONLY_LIBRARIES.keys()), None
            )
            if library is not None and call.args and not analysis.is_ignored(call):
                what = FSDP1_ONLY_LIBRARIES[library]
                analysis.add_tied(self.CODE, call, call.args[0], what, None, known=False)
        for node in [*analysis.names.by_type[ast.Name], *analysis.names.by_type[ast.Attribute]]:
            parent = analysis.names.parent.get(node)
            if isinstance(parent, ast.Attribute) and analysis.fsdp1_name(parent) is not None:
                continue  # the longer chain is the reference
            if analysis.fsdp1_name(node) == "ShardedGradScaler" and not analysis.is_ignored(node):
                self._grad_scaler(analysis, node)
        for node in analysis.names.by_type[ast.Constant]:
            assert isinstance(node, ast.Constant)
            if isinstance(node.value, str) and any(
                i in node.value for i in FSDP1_ATTRIBUTES_IN_STRINGS
            ):
                if not (
                    analysis.is_ignored(node)
                    or _is_docstring(analysis, node)
                    or _probed(analysis, node)
                ):
                    analysis.add(
                        self.CODE,
                        node,
                        "an FSDP1 name in a string: FSDP2 state-dict keys and module names carry "
                        "no _fsdp_wrapped_module / _flat_param prefix",
                    )

    def _attribute(self, analysis: FileAnalysis, node: ast.Attribute) -> None:
        name = analysis.fsdp1_name(node)
        if name is not None and name.startswith(_FSDP):
            api = name[len(_FSDP) :]
            if api in FSDP1_STATIC_APIS:
                self._static(analysis, node, api)
            return
        receiver = node.value
        if node.attr in FSDP1_WRAPPED_ATTRIBUTES and isinstance(node.ctx, ast.Load):
            self._dot_module(analysis, node)
        elif _handle_reshard(analysis, node) is not None and analysis.options.runtime_dependency:
            self._reshard(analysis, node)
        elif node.attr in EITHER_STATIC_APIS and _instance_call(analysis, node):
            self._instance_static(analysis, node)
        elif node.attr in FSDP1_ONLY_ATTRIBUTES and _private_flag_set(analysis, node):
            # on an FSDP2 module it sets an attribute nothing reads: right either way
            analysis.add(
                self.CODE,
                node,
                _FLAG_SET.format(node.attr),
                None,
                "RUN",
                holds=False,
                fsdp1_only_marker=True,
            )
        elif node.attr in FSDP1_HANDLE_ATTRIBUTES:
            return  # a handle's: the model is where the handle is read (``m._handle``)
        elif node.attr in FSDP1_SHARED_ATTRIBUTES and _public_store(node):
            return  # ``layer.rank = r``: sets an attribute, FSDP1's meaning or not, on any object
        elif node.attr in FSDP1_VALUE_ATTRIBUTES and _read_as_another_value(analysis, node):
            return
        elif node.attr in FSDP1_SHARED_ATTRIBUTES and analysis.ties.from_library(receiver):
            return  # ``accelerator.mixed_precision``: the library object's own attribute
        elif node.attr in _FSDP1_ATTRIBUTES:
            what = FSDP1_STATIC_APIS.get(node.attr, _INTERNAL.format(node.attr))
            # a receiver named like a model that other files pass: if the run ties it to
            # none, it may be any model (no speculation that it is none)
            model_like = _may_be_model(analysis, node)
            site = analysis.add_tied(
                self.CODE, node, receiver, what, None, quiet=True, speculate=not model_like
            )
            if site is None and model_like:
                analysis.hold(self.CODE, node, what)

    def _grad_scaler(self, analysis: FileAnalysis, node: ast.AST) -> None:
        """``ShardedGradScaler(...)`` -> ``fsdp2_port.GradScaler(...)``, the same arguments: a
        scaler is tied to no model, and that one is right on FSDP1, FSDP2, DDP and plain models
        alike. Other references (type tests, annotations, subclasses) are marked."""
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            return  # an alias's own name (``Scaler = ShardedGradScaler``): its value is marked
        parent = analysis.names.parent.get(node)
        call = parent if isinstance(parent, ast.Call) and parent.func is node else None
        called = call is not None
        uses = None if called else _alias_uses(analysis, node)
        if not analysis.options.runtime_dependency:
            self._scaler_marked(analysis, node, uses, _SCALER_KEPT)
        elif called or _only_called(analysis, uses):
            what = (
                "ShardedGradScaler -> fsdp2_port.GradScaler: torch.amp.GradScaler with "
                "ShardedGradScaler's arguments, its inf/NaN verdict reduced over the process "
                "group (every rank steps or skips together on FSDP1, FSDP2, DDP and plain models)"
                if called
                else "ShardedGradScaler bound to a name only called (scaler_type = ...; "
                "scaler_type(...)) -> fsdp2_port.GradScaler: what each call builds is right on "
                "FSDP1, FSDP2, DDP and plain models"
            )
            rewrite = Rewrite(
                [analysis.replace(node, "fsdp2_port.GradScaler")],
                what,
                [analysis.module_import("fsdp2_port")],
            )
            analysis.add(self.CODE, call or node, _SCALER_KEPT, rewrite, "ALWAYS")
        else:
            message = (
                "ShardedGradScaler: its calls become fsdp2_port.GradScaler (a "
                "torch.amp.GradScaler, not a ShardedGradScaler): test, annotate or subclass "
                "fsdp2_port.GradScaler instead"
            )
            self._scaler_marked(analysis, node, uses, message)

    def _scaler_marked(
        self, analysis: FileAnalysis, node: ast.AST, uses: list[ast.Name] | None, message: str
    ) -> None:
        """Marked where it is read, and where a local alias of it is read."""
        analysis.add(self.CODE, node, message)
        for use in uses or ():
            if not analysis.is_ignored(use):
                analysis.add(self.CODE, use, message)

    def _static(self, analysis: FileAnalysis, node: ast.Attribute, api: str) -> None:
        call = analysis.names.parent.get(node)
        if not (isinstance(call, ast.Call) and call.func is node and call.args):
            analysis.hold(self.CODE, node, FSDP1_STATIC_APIS[api])
        elif api in EITHER_STATIC_APIS and analysis.options.runtime_dependency:
            rewrite = Rewrite(
                [analysis.replace(node, f"fsdp2_port.{api}")],
                f"FSDP.{api} -> fsdp2_port.{api}: FSDP1's on FSDP1 models, the same meaning "
                "on FSDP2, DDP and plain ones",
                [analysis.module_import("fsdp2_port")],
            )
            analysis.add(self.CODE, call, FSDP1_STATIC_APIS[api], rewrite, "ALWAYS")
        else:
            analysis.add_tied(
                self.CODE, call, call.args[0], FSDP1_STATIC_APIS[api], None, known=False
            )

    def _instance_static(self, analysis: FileAnalysis, node: ast.Attribute) -> None:
        """``m.summon_full_params(m, ...)``: FSDP1's static method called on an instance."""
        call = analysis.names.parent.get(node)
        assert isinstance(call, ast.Call)
        what = FSDP1_STATIC_APIS[node.attr]
        if not analysis.options.runtime_dependency:
            analysis.add_tied(self.CODE, call, node.value, what, None, known=False)
            return
        rewrite = Rewrite(
            [analysis.replace(node, f"fsdp2_port.{node.attr}")],
            f"{analysis.source(node.value)}.{node.attr} -> fsdp2_port.{node.attr}: FSDP1's on "
            "FSDP1 models, the same meaning on FSDP2, DDP and plain ones",
            [analysis.module_import("fsdp2_port")],
        )
        analysis.add(self.CODE, call, what, rewrite, "ALWAYS")

    def _dot_module(self, analysis: FileAnalysis, node: ast.Attribute) -> None:
        """``m.module`` / ``m._fsdp_wrapped_module``: ``m`` for a model built here; else
        ``fsdp2_port.unwrapped(m)`` / ``fsdp_wrapped_module(m)`` for one that may also be another
        wrapper (DDP), is only known to be FSDP1, or cannot be tied (not ``self.module``, an
        object's own attribute, nor a Python module's)."""
        receiver = node.value
        ties, deferred = analysis.ties.of(receiver)
        text = analysis.source(receiver)
        attribute, function = node.attr, FSDP1_WRAPPED_ATTRIBUTES[node.attr]
        keep = f"kept: {text}.{attribute} of an FSDP1 model"
        if ties and not deferred:
            message = f"{text}.{attribute} -> {text}: FSDP2 does not wrap the module"
            analysis.add(
                self.CODE,
                node,
                keep,
                Rewrite(analysis.around(node, "", ""), message),
                "MODELS",
                ties=ties,
                quiet=True,
            )
        elif analysis.options.runtime_dependency:
            rewrite = Rewrite(
                analysis.around(node, f"fsdp2_port.{function}(", ")"),
                f"{text}.{attribute} -> fsdp2_port.{function}({text}): the wrapped module of "
                "FSDP1 (and DDP), the module itself under FSDP2",
                [analysis.module_import("fsdp2_port")],
            )
            untied = _may_be_model(analysis, node) and not _bound_to(
                analysis, receiver, OTHER_WRAPPERS.members
            )
            analysis.add_tied(
                self.CODE,
                node,
                receiver,
                keep,
                rewrite,
                quiet=True,
                either=rewrite if untied else None,
                tied_requirement="ALWAYS",
            )
        else:
            keep = f"{text}.{attribute}: FSDP2 does not wrap; use {text} itself once it is FSDP2"
            if analysis.add_tied(self.CODE, node, receiver, keep, None, quiet=True) is None:
                if _may_be_model(analysis, node):
                    analysis.hold(self.CODE, node, keep)

    def _reshard(self, analysis: FileAnalysis, node: ast.Attribute) -> None:
        """``m._handle.reshard(flag)`` -> ``fsdp2_port.reshard(m, flag)``: FSDP1's call on
        FSDP1 models, ``reshard()`` on FSDP2 ones; right on either, tied or not."""
        call = _handle_reshard(analysis, node)
        assert call is not None
        receiver = node.value
        text = analysis.source(receiver)
        arguments = [analysis.source(a) for a in call.args]
        arguments += [f"{k.arg}={analysis.source(k.value)}" for k in call.keywords]
        rewrite = Rewrite(
            [Edit(*analysis.span(call), f"fsdp2_port.reshard({', '.join([text, *arguments])})")],
            f"{text}._handle.reshard(...) -> fsdp2_port.reshard({text}, ...): FSDP1's handle "
            "call on FSDP1 models, FSDPModule.reshard() on FSDP2 ones",
            [analysis.module_import("fsdp2_port")],
        )
        analysis.add_tied(
            self.CODE,
            node,
            receiver,
            _INTERNAL.format(node.attr),
            rewrite,
            quiet=True,
            either=rewrite,
            tied_requirement="ALWAYS",
        )


def _private_flag_set(analysis: FileAnalysis, node: ast.Attribute) -> bool:
    """``m._is_root = False``: a private FSDP1-only attribute (FSDP's own name, which no user
    module shares) assigned a constant, alone, as a statement."""
    statement = analysis.names.parent.get(node)
    return (
        node.attr.startswith("_")
        and isinstance(node.ctx, ast.Store)
        and isinstance(statement, ast.Assign)
        and statement.targets == [node]
        and isinstance(statement.value, ast.Constant)
    )


def _handle_reshard(analysis: FileAnalysis, node: ast.Attribute) -> ast.Call | None:
    """The call ``m._handle.reshard(<one argument>)`` that ``node`` (``m._handle``) begins."""
    method = analysis.names.parent.get(node)
    call = analysis.names.parent.get(method) if method is not None else None
    if not (
        node.attr == "_handle"
        and isinstance(node.ctx, ast.Load)
        and isinstance(method, ast.Attribute)
        and method.attr == "reshard"
        and isinstance(call, ast.Call)
        and call.func is method
    ):
        return None
    keywords = [k.arg for k in call.keywords]
    if len(call.args) + len(keywords) > 1 or keywords not in ([], ["free_unsharded_flat_param"]):
        return None
    return call


def _bound_to(analysis: FileAnalysis, receiver: ast.expr, classes: frozenset[str]) -> bool:
    """Every value this file assigns to ``receiver`` is a call of one of ``classes``."""
    if isinstance(receiver, ast.Name):
        values = [b.value for b in analysis.names.bindings_of(receiver)]
    else:
        values = (
            list(analysis.ties.assigned(receiver)) if isinstance(receiver, ast.Attribute) else []
        )
    return bool(values) and all(
        isinstance(v, ast.Call) and bool(analysis.names.qualified(v.func) & classes) for v in values
    )


def _instance_call(analysis: FileAnalysis, node: ast.Attribute) -> bool:
    """``m.<static FSDP1 API>(m, ...)``: called, with the receiver as its first argument."""
    call = analysis.names.parent.get(node)
    return (
        isinstance(call, ast.Call)
        and call.func is node
        and bool(call.args)
        and analysis.source(call.args[0]) == analysis.source(node.value)
        and not analysis.names.qualified(node.value)
    )


def _public_store(node: ast.Attribute) -> bool:
    """A store or ``del`` of a public name (``rank``, ``world_size``...): it reads nothing of
    FSDP1's; private ones (``_sync_gradients``) steer FSDP1 and stay FSDP1 uses."""
    return not isinstance(node.ctx, ast.Load) and not node.attr.startswith("_")


def _read_as_another_value(analysis: FileAnalysis, node: ast.Attribute) -> bool:
    """``m.params.max_seq_len``: something FSDP1's value lacks is read from the value (an
    attribute, a string key, ``**`` as a mapping: FSDP1's values are no mappings), there,
    through a name bound only to it, or through ``self.x = m.params`` in the same class
    (``config.model.params`` of the latent-diffusion configs)."""
    has = FSDP1_VALUE_ATTRIBUTES[node.attr]

    def foreign(read: ast.AST) -> bool:
        outer = analysis.names.parent.get(read)
        if isinstance(outer, ast.keyword) and outer.arg is None:
            return True  # f(**m.params)
        if isinstance(outer, ast.Subscript) and outer.value is read:
            key = outer.slice
            return isinstance(key, ast.Constant) and isinstance(key.value, str)
        return isinstance(outer, ast.Attribute) and outer.value is read and outer.attr not in has

    if foreign(node) or any(foreign(use) for use in _alias_uses(analysis, node) or ()):
        return True
    statement = analysis.names.parent.get(node)
    if not (
        isinstance(statement, ast.Assign)
        and statement.value is node
        and len(statement.targets) == 1
        and isinstance(target := statement.targets[0], ast.Attribute)
        and isinstance(target.value, ast.Name)
        and target.value.id == "self"
    ):
        return False
    owner = analysis.names.class_of(statement)
    return owner is not None and any(
        isinstance(read, ast.Attribute)
        and isinstance(read.ctx, ast.Load)
        and read.attr == target.attr
        and isinstance(read.value, ast.Name)
        and read.value.id == "self"
        and foreign(read)
        for read in ast.walk(owner)
    )


def _may_be_model(analysis: FileAnalysis, node: ast.Attribute) -> bool:
    """Whether an untied receiver may be an FSDP1 model: never ``self`` (an object's own
    attribute) nor an imported name; for names other objects share too, only a receiver
    named like a model."""
    receiver = node.value
    if isinstance(receiver, ast.Name) and receiver.id in ("self", "cls"):
        return False
    if analysis.names.qualified(receiver):  # an imported module or class
        return False
    if _reads_fsdp1_attribute(analysis, receiver):  # m._handle.flat_param: m._handle says it all
        return False
    return node.attr in FSDP1_ONLY_ATTRIBUTES or analysis.named_like_model(receiver)


def _reads_fsdp1_attribute(analysis: FileAnalysis, receiver: ast.expr) -> bool:
    """``m._handle`` itself, a name bound only to it (``handle = m._handle``), or a loop
    variable over FSDP1 internals (``for handle in m._all_handles`` or a private FSDP1 call):
    the site there already says it."""
    value: ast.AST = receiver
    if isinstance(receiver, ast.Name):
        binding = analysis.sole_binding(receiver)
        if binding is not None and binding.value is not None:
            value = binding.value
        else:
            loops = [
                loop
                for b in analysis.names.bindings_of(receiver)
                if isinstance(loop := analysis.names.parent.get(b.node), (ast.For, ast.AsyncFor))
                and loop.target is b.node
            ]
            if len(loops) == 1:
                value = loops[0].iter
    if isinstance(value, ast.Call):
        value = value.func
        name = analysis.fsdp1_name(value)
        if name is not None and fsdp1.is_private(name):  # not FSDP.fsdp_modules: it migrates
            return True
    return isinstance(value, ast.Attribute) and value.attr in _FSDP1_ATTRIBUTES


def _probed(analysis: FileAnalysis, node: ast.Constant) -> bool:
    """``hasattr(m, "_fsdp_wrapped_module")``, ``getattr(m, "...", default)`` or
    ``name.replace("_fsdp_wrapped_module.", "")``: false, the default or a no-op on an FSDP2
    model, which is what such code is written for."""
    call = analysis.names.parent.get(node)
    if (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.args
        and call.args[0] is node
        and analysis.assumed.takes(STRING_EDIT_METHODS, call.func.attr, call)
    ):
        return True  # name.replace("_fsdp_wrapped_module.", ""): a no-op on FSDP2 names
    if not (isinstance(call, ast.Call) and len(call.args) >= 2 and call.args[1] is node):
        return False
    if analysis.resolves_to(call.func, "builtins.hasattr"):
        return True
    return analysis.resolves_to(call.func, "builtins.getattr") and len(call.args) == 3


def _is_docstring(analysis: FileAnalysis, node: ast.Constant) -> bool:
    parent = analysis.names.parent.get(node)
    return isinstance(parent, ast.Expr)


def _alias_uses(analysis: FileAnalysis, node: ast.AST) -> list[ast.Name] | None:
    """The reads of ``name`` in ``name = <node>`` (also as a branch of a conditional
    expression) where ``name`` is seen only here (``local_names``); None for another use."""
    value: ast.AST = node
    statement = analysis.names.parent.get(node)
    while isinstance(statement, ast.IfExp) and statement.test is not value:
        value, statement = statement, analysis.names.parent.get(statement)
    if not (
        isinstance(statement, ast.Assign)
        and statement.value is value
        and len(statement.targets) == 1
        and isinstance(statement.targets[0], ast.Name)
    ):
        return None
    target = statement.targets[0]
    binding = next((b for b in analysis.names.bindings_of(target) if b.node is target), None)
    scope = analysis.names.lookup(target.id, analysis.names.scope_of(target))[0]
    if binding is None or scope is None:
        return None
    if not seen_only_here(analysis.names, scope, target.id):
        return None
    return analysis.uses_of(binding)


def _only_called(analysis: FileAnalysis, uses: list[ast.Name] | None) -> bool:
    """Every read calls it (``scaler_type(...)``): the class is only instantiated."""
    return bool(uses) and all(
        isinstance(call := analysis.names.parent.get(use), ast.Call) and call.func is use
        for use in uses or ()
    )
