"""F2P002 / F2P003 / F2P004: FSDP1 constructors become FSDP2 (what becomes what: ``CODES``).

Invariants: the plain form (``pure.py`` reads the values, ``emit.py`` writes the code) is
exact: children get ``cast_forward_inputs=False``, as FSDP1 casts only the root's inputs;
``device_id``'s moves stay one unit at a time, as FSDP1 made them; BatchNorm units stay in
full precision under a policy with mixed precision. A value only the run knows is read there by an
``fsdp2_port`` reader that gives FSDP1's meaning (and runs no FSDP1 code); the code around it
is still written out. Anything else goes to ``fully_shard_like_fsdp1`` with the same
arguments (or, without the runtime dependency, a marker naming what blocks it). A binding
the plain form inlines goes only when every constructor reading it takes the plain form.
FSDP1 subclasses and ``wrapper_cls=FSDP`` are marked and keep the run's other models honest.
"""

from __future__ import annotations

import ast
from typing import ClassVar

from fsdp2_port.codemods import calls
from fsdp2_port.codemods.analysis import FileAnalysis
from fsdp2_port.codemods.plan import Rewrite
from fsdp2_port.codemods.rules.base import Code
from fsdp2_port.codemods.rules.constructors import dispatch, emit
from fsdp2_port.codemods.rules.constructors.pure import pure
from fsdp2_port.codemods.rules.constructors.values import SPREAD, Pure, Removable
from fsdp2_port.codemods.text import Edit

RUNTIME = "fully_shard_like_fsdp1"


class ConstructorRule:
    STAGE: ClassVar[str] = "analysis"
    CODE: ClassVar[str] = "F2P002"
    CODES: ClassVar[dict[str, Code]] = {
        "F2P002": Code(
            summary="FSDP(module, ...) -> plain fully_shard(...) code, or fully_shard_like_fsdp1",
            topic="constructors",
            rewritten=(
                "values followed to where they are written (the call, a name bound once in its "
                "scope, a script's constant, a `dict(...)`/`{...}` spread with `**` by "
                "constructors only, or grown right before its constructor by `kw[key] = value` "
                "and `kw.update(key=value)`, under an `if` or not; what FSDP1 evaluated once is "
                "bound once, first): "
                "`FSDP(m, ...)` → `fully_shard(m, ...)` (`sharding_strategy`, or a choice "
                "between FULL_SHARD and SHARD_GRAD_OP by a key or a flag, → "
                "`reshard_after_forward`; HYBRID + `device_mesh` → 2-D `mesh`; a process group "
                "→ `DeviceMesh.from_group(group, <device_id's type>)`; `MixedPrecision` → "
                "`MixedPrecisionPolicy` (children get `cast_forward_inputs=False`: FSDP1 casts "
                "only the root's inputs); `buffer_dtype` → floating buffers cast first; "
                "`CPUOffload` → `CPUOffloadPolicy` (also `CPUOffload(...) if flag else None`); "
                "`param_init_fn` → `fsdp2_port.materialize_like_fsdp1(...)` first (FSDP1's "
                "calls in FSDP1's order); `device_id` → `fully_shard`'s own move, unit by unit "
                "(with `sync_module_states`, each unit's states moved and broadcast before its "
                "`fully_shard`); `sync_module_states` → a broadcast of every parameter and "
                "buffer from the group's first rank (under `if <flag>:` when chosen at run "
                "time); `ignored_modules` → `ignored_params` (the parameters of their "
                "subtrees, in no unit, their buffers not cast; `if <test>` where a grown dict "
                "sets it there); "
                "`forward_prefetch`, `backward_prefetch`, `limit_all_gathers` → a comment "
                "saying what FSDP2 does instead; no-effect arguments dropped (one "
                "computed by a call still evaluated, bound to its name); a module "
                "given as an expression is bound to a name first); **a value only the run "
                "knows** (a strategy, policy, `MixedPrecision`, `CPUOffload` or process group "
                "built elsewhere; HSDP or NO_SHARD without a mesh) → the same plain form, that "
                "value read by an `fsdp2_port.*_like_fsdp1` reader (`mesh_like_fsdp1`, "
                "`reshard_after_forward_like_fsdp1`, `units_like_fsdp1`, `mp_policy_like_fsdp1`, "
                "`buffer_dtype_like_fsdp1`, `offload_policy_like_fsdp1`: FSDP1's meaning, no "
                "FSDP1 code); `**kwargs` whose keys are written out where it is bound (in this "
                "file, another module of the run, a class attribute) but that other code may "
                "read or change → the same plain form, its values read at run time from "
                "`fsdp2_port.kwargs_as_migrated(kwargs, <keys>)` (which raises if the keys are "
                "no longer those); **anything else** → "
                "`fsdp2_port.fully_shard_like_fsdp1(<the same arguments>)` (`**kwargs` whose "
                "keys only the run knows, `ignored_states`, `ignored_modules` with "
                "`sync_module_states` or `param_init_fn`...); "
                "`functools.partial(FSDP, ...)` → "
                "`partial(fully_shard_like_fsdp1, ...)`"
            ),
            marked=(
                "FSDP1 subclasses, `wrapper_cls=FSDP` (`enable_wrap`/`wrap`); with "
                "`--no-runtime-dependency`, what has no plain form; without "
                "`--drop-fsdp1-branches`, a constructor in the FSDP1 branch of a dispatch "
                "between FSDP versions (an `if` chain another branch of which uses FSDP2: "
                '`if cfg.strategy == "fsdp": FSDP(...) elif ...: fully_shard(...)`), kept'
            ),
            proven_by=(
                "tests/test_type_tests_and_scaler.py::test_type_tests_configs_and_scaler_run_as_fsdp1_did",
                "tests/test_plain_readers.py::test_plain_form_with_readers_trains_as_fsdp1_did[mesh-sync]",
                "tests/test_migrated_scripts.py::test_the_migration_trains_like_the_original[kwargs_policy.py-2-fp32-args0]",
                "tests/test_migrated_scripts.py::test_the_migration_trains_like_the_original[kwargs_policy.py-2-fp32-args1]",
                "tests/test_like_fsdp1.py::test_trains_like_fsdp1",
            ),
        ),
        "F2P003": Code(
            summary=(
                "FSDP(..., auto_wrap_policy=<policy>) -> fully_shard on each selected "
                "submodule, then the root"
            ),
            topic="wrap policies",
            rewritten=(
                "`partial(transformer_auto_wrap_policy, transformer_layer_cls=<classes>)` / "
                "`ModuleWrapPolicy(<classes>)` (a literal collection or a name), "
                "`partial(lambda_auto_wrap_policy, lambda_fn=<fn>)` (a lambda's body as the "
                "condition) → a loop applying `fully_shard` to each selected submodule, "
                "children first, then the root; with mixed precision, BatchNorm modules are "
                "units of their own in full precision, as FSDP1 made them"
            ),
            marked=(
                "a policy missing its own required argument (bare "
                "`transformer_auto_wrap_policy`): FSDP1 and the migration raise `TypeError` "
                "on it alike"
            ),
            proven_by=(
                "tests/test_plain_rewrite.py::test_plain_rewrite_trains_as_fsdp1_did",
                "tests/test_plain_readers.py::test_plain_form_with_readers_trains_as_fsdp1_did",
                "tests/test_grown_kwargs.py::test_grown_kwargs_with_ignored_modules_train_as_fsdp1_did",
                "tests/test_multifile_programs.py::test_the_migrated_program_trains_like_the_original",
                "tests/test_demo.py::test_migrated_example_trains_like_the_original",
            ),
        ),
        "F2P004": Code(
            summary=(
                "bindings the plain form inlined (MixedPrecision, CPUOffload, strategies, "
                "kwargs dicts) -> removed"
            ),
            topic="values of a plain rewrite",
            rewritten=(
                "a `MixedPrecision(...)`, `CPUOffload(...)`, strategy or `**kwargs` dict bound "
                "for constructors is inlined as FSDP2 values; the binding goes when every "
                "constructor reading it took the plain form"
            ),
            marked="—",
            proven_by=(
                "tests/test_plain_rewrite.py::test_plain_rewrite_trains_as_fsdp1_did[shared-1e-06]",
                "tests/test_grown_kwargs.py::test_grown_kwargs_with_ignored_modules_train_as_fsdp1_did",
            ),
        ),
    }
    NEEDS: ClassVar[tuple[str, ...]] = ()
    EMITS: ClassVar[dict[str, str]] = {
        "fully_shard": "torch.distributed.fsdp:fully_shard",
        "MixedPrecisionPolicy": "torch.distributed.fsdp:MixedPrecisionPolicy",
        "CPUOffloadPolicy": "torch.distributed.fsdp:CPUOffloadPolicy",
        "OffloadPolicy": "torch.distributed.fsdp:OffloadPolicy",
        "DeviceMesh.from_group": "torch.distributed.device_mesh:DeviceMesh.from_group",
        "init_device_mesh": "torch.distributed.device_mesh:init_device_mesh",
        "torch.distributed.get_world_size": "torch.distributed:get_world_size",
        "fsdp2_port.materialize_like_fsdp1": "fsdp2_port:materialize_like_fsdp1",
        "torch.distributed.broadcast": "torch.distributed:broadcast",
        "dataclasses.replace": "dataclasses:replace",
        "fully_shard_like_fsdp1": "fsdp2_port:fully_shard_like_fsdp1",
        "fsdp2_port.mesh_like_fsdp1": "fsdp2_port:mesh_like_fsdp1",
        "fsdp2_port.reshard_after_forward_like_fsdp1": (
            "fsdp2_port:reshard_after_forward_like_fsdp1"
        ),
        "fsdp2_port.mp_policy_like_fsdp1": "fsdp2_port:mp_policy_like_fsdp1",
        "fsdp2_port.buffer_dtype_like_fsdp1": "fsdp2_port:buffer_dtype_like_fsdp1",
        "fsdp2_port.full_precision_like_fsdp1": "fsdp2_port:full_precision_like_fsdp1",
        "fsdp2_port.offload_policy_like_fsdp1": "fsdp2_port:offload_policy_like_fsdp1",
        "fsdp2_port.units_like_fsdp1": "fsdp2_port:units_like_fsdp1",
        "fsdp2_port.kwargs_as_migrated": "fsdp2_port:kwargs_as_migrated",
    }

    def analyze(self, analysis: FileAnalysis) -> None:
        plain: dict[ast.Call, str] = {}
        removable: list[Removable] = []
        for call, cid in analysis.ties.constructors.items():
            if analysis.is_ignored(call):
                analysis.add(self.CODE, call, "", constructor=cid, silent=True)
            elif call in analysis.ties.factories:
                self._factory(analysis, call, cid)
            else:
                found = self._constructor(analysis, call, cid)
                if found is not None:
                    plain[call] = cid
                    removable += found.removable
        self._remove_inlined(analysis, removable, plain)
        self._class_as_value(analysis)

    # -- FSDP(...) ---------------------------------------------------------------------------
    def _constructor(self, analysis: FileAnalysis, call: ast.Call, cid: str) -> Pure | None:
        """The plain form, or the bridge (or a marker); the plain form's reading when taken."""
        owner = _fsdp1_subclass_around(analysis, call)
        if owner is not None:
            message = (
                f"FSDP(...) inside class {owner.name}(FSDP): its units stay FSDP1 with the "
                "subclass (FSDP2 units cannot live inside an FSDP1 model)"
            )
            analysis.add(self.CODE, call, message, constructor=cid)
            return None
        if not analysis.options.drop_fsdp1_branches and dispatch.in_fsdp1_branch(analysis, call):
            message = (
                "FSDP(...) in the FSDP1 branch of a dispatch between FSDP versions (another "
                "branch uses FSDP2): kept, as library code may offer both on purpose; "
                "--drop-fsdp1-branches migrates it"
            )
            analysis.add(self.CODE, call, message, constructor=cid)
            return None
        found = pure(analysis, call)
        statement = analysis.names.statement(call)
        needs_lines = found.writes_lines_before
        if needs_lines and not _stands_alone(analysis, statement):
            found.blockers.append("the call shares its line with other code: put it on its own")
        elif needs_lines and not _evaluated_first(analysis, statement, call):
            # code put before the statement must run exactly when the call does
            found.blockers.append("the call is part of an expression: give it a statement")
        if not found.blockers:
            self._plain(analysis, call, cid, found)
            return found
        if analysis.options.runtime_dependency:
            rewrite = Rewrite(
                [analysis.replace(call.func, RUNTIME)],
                f"FSDP(...) -> {RUNTIME}(...): the same arguments, applied with fully_shard",
                [analysis.import_for(call.func, "fsdp2_port", RUNTIME)],
            )
            analysis.add(self.CODE, call, "FSDP(...) left as is", rewrite, constructor=cid)
            return None
        analysis.add(
            self.CODE,
            call,
            "FSDP(...) left as is (--no-runtime-dependency): " + "; ".join(found.blockers),
            constructor=cid,
        )
        return None

    def _factory(self, analysis: FileAnalysis, call: ast.Call, cid: str) -> None:
        if not analysis.options.runtime_dependency:
            analysis.add(
                self.CODE,
                call,
                "functools.partial(FSDP, ...) left as is (--no-runtime-dependency): "
                f"use fsdp2_port.{RUNTIME}, or call fully_shard on each module",
                constructor=cid,
            )
            return
        target = call.args[0]
        rewrite = Rewrite(
            [analysis.replace(target, RUNTIME)],
            f"functools.partial(FSDP, ...) -> functools.partial({RUNTIME}, ...)",
            [analysis.import_for(target, "fsdp2_port", RUNTIME)],
        )
        analysis.add(
            self.CODE, call, "functools.partial(FSDP, ...) left as is", rewrite, constructor=cid
        )

    def _plain(self, analysis: FileAnalysis, call: ast.Call, cid: str, found: Pure) -> None:
        statement = analysis.names.statement(call)
        own_target = _evaluated_first(analysis, statement, call, chained=True)
        module = emit.module_name(analysis, statement, found, own_target)
        callee = "fully_shard"
        edits = [analysis.replace(call.func, callee), *found.edits]
        edits += emit.argument_edits(analysis, call, found, module, callee)
        before = emit.lines_before(analysis, statement, found, module)
        if _stands_alone(analysis, statement):
            before += emit.dropped_notes(analysis, statement, found)
        if before:
            start = analysis.statement_start(statement)
            edits.append(Edit(start, start, before))
        imports = [
            analysis.import_for(call.func, _home(n, analysis.options.fsdp2_module), n)
            for n in sorted(found.names)
        ]
        if found.sync is not None:
            imports.append(analysis.module_import("torch.distributed", call))
        if found.selects is not None:
            imports += [analysis.module_import(m, call) for m in sorted(found.child_modules)]
        if found.init_fn is not None or found.read_at_run_time:
            imports.append(analysis.module_import("fsdp2_port", call))
        if found.uses_torch or (
            found.full_precision_norms is not None and found.selects is not None
        ):
            imports.append(analysis.module_import("torch", call))
        code, message = "F2P002", "FSDP(...) -> fully_shard(...)"
        if found.selects is not None:
            code = "F2P003"
            message = (
                "FSDP(..., auto_wrap_policy=<policy>) -> fully_shard on each submodule it "
                "selects, then on the root"
            )
        if found.read_at_run_time:
            message += f" ({', '.join(found.read_at_run_time)} read at run time by fsdp2_port)"
        analysis.add(
            code, call, "FSDP(...) left as is", Rewrite(edits, message, imports), constructor=cid
        )

    def _remove_inlined(
        self, analysis: FileAnalysis, removable: list[Removable], plain: dict[ast.Call, str]
    ) -> None:
        """A binding the plain forms inlined goes when every constructor reading it took the
        plain form (and with them: tied to each of them)."""
        done: set[ast.stmt] = set()
        for item in removable:
            if item.statement in done or not item.users <= plain.keys():
                continue
            done.add(item.statement)
            start = analysis.statement_start(item.statement)
            end = analysis.lines.line_end(analysis.lines.end(item.statement) - 1)
            lines = analysis.lines
            if start > 0 and end < len(lines.text):
                above = lines.line_start(start - 1)
                if (
                    not lines.text[above:start].strip()
                    and not lines.text[end : lines.line_end(end)].strip()
                ):
                    start = above  # alone between blank lines: one blank line stays, not two
            code = "F2P003" if item.what == "auto_wrap_policy" else "F2P004"
            what = item.what if item.what == SPREAD else f"{item.what} binding"
            analysis.add(
                code,
                item.statement,
                f"{what} kept: its FSDP(...) stays FSDP1",
                Rewrite([Edit(start, end, "")], f"{what} removed: inlined into the FSDP2 calls"),
                "MODELS",
                ties=frozenset(plain[u] for u in item.users),
                quiet=True,  # kept with its constructor, whose marker says why
                holds=False,  # kept, it is right for the FSDP1 models still reading it
            )

    # -- the FSDP1 class as a value ------------------------------------------------------------
    def _class_as_value(self, analysis: FileAnalysis) -> None:
        for node in analysis.names.by_type[ast.ClassDef]:
            assert isinstance(node, ast.ClassDef)
            for base in node.bases:
                if analysis.is_fsdp_class(base) and not analysis.is_ignored(base):
                    analysis.add(
                        self.CODE,
                        base,
                        f"class {node.name}(FSDP): FSDP2 has no wrapper class to subclass; apply "
                        "fully_shard to the module and move the overrides onto it",
                        constructor=analysis.site_id(base),
                    )
        for node in analysis.names.by_type[ast.keyword]:
            assert isinstance(node, ast.keyword)
            if (
                node.arg == "wrapper_cls"
                and analysis.is_fsdp_class(node.value)
                and not analysis.is_ignored(node)
            ):
                analysis.add(
                    self.CODE,
                    node.value,
                    "wrapper_cls=FSDP (enable_wrap/wrap): FSDP2 has no wrapper class; call "
                    "fully_shard on each module the wrap() calls select, children first",
                    constructor=analysis.site_id(node.value),
                )


def _home(name: str, fsdp2_module: str) -> str:
    """The module a name the plain form imports comes from."""
    if name in ("DeviceMesh", "init_device_mesh"):
        return "torch.distributed.device_mesh"
    return "torch.distributed.tensor" if name == "DTensor" else fsdp2_module


def _fsdp1_subclass_around(analysis: FileAnalysis, call: ast.Call) -> ast.ClassDef | None:
    """The FSDP1 subclass whose body (methods included) holds ``call``, if any."""
    for ancestor in analysis.names.ancestors(call):
        if isinstance(ancestor, ast.ClassDef) and any(
            analysis.is_fsdp_class(b) for b in ancestor.bases
        ):
            return ancestor
    return None


def _evaluated_first(
    analysis: FileAnalysis, statement: ast.stmt, call: ast.Call, *, chained: bool = False
) -> bool:
    """The call runs whenever the statement does, before anything else in it that has an
    effect, so code put before the statement runs exactly when the call would: the
    statement's value is the call, a chain of attributes and method calls on it
    (``FSDP(...).to(device)``), or, unless ``chained``, a call that takes it as an argument
    with only names, attribute chains and constants before it (``Policy(FSDP(...), tok)``),
    and so on outwards."""
    value = getattr(statement, "value", None)
    node: ast.AST = call
    while node is not value:
        parent = analysis.names.parent.get(node)
        held = node
        if isinstance(parent, ast.keyword):
            held, parent = parent, analysis.names.parent.get(parent)
        on_it = (isinstance(parent, ast.Attribute) and parent.value is node) or (
            isinstance(parent, ast.Call) and parent.func is node
        )
        if not on_it and (chained or not _first_with_effects(parent, held)):
            return False
        node = parent  # type: ignore[assignment]
    return True


def _first_with_effects(call: ast.AST | None, held: ast.AST) -> bool:
    """``held``, an argument of ``call``, is evaluated after nothing but the callee and other
    arguments that are names, attribute chains or constants."""
    if not isinstance(call, ast.Call) or not calls.is_simple(call.func):
        return False
    parts: list[ast.expr | ast.keyword] = sorted(
        [*call.args, *call.keywords], key=lambda p: (p.lineno, p.col_offset)
    )
    index = next((i for i, p in enumerate(parts) if p is held), None)
    return index is not None and all(
        calls.is_simple(p.value if isinstance(p, ast.keyword) else p) for p in parts[:index]
    )


def _stands_alone(analysis: FileAnalysis, statement: ast.stmt) -> bool:
    """A simple statement that starts its own line: code can be put on lines before it."""
    if not isinstance(statement, (ast.Assign, ast.AnnAssign, ast.Return, ast.Expr)):
        return False
    start = analysis.lines.start(statement)
    return not analysis.text[analysis.lines.line_start(start) : start].strip()
