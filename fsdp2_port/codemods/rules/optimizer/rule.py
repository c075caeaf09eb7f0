"""F2P009: the BF16 master-weight optimizer follows its model; no second reduction of its norm.

- ``BF16Optimizer`` imported from ``specforge.optimizer`` or ``compat``: from ``fsdp2_port`` when
  every optimizer built through that import is built on a migrating model (the DTensor-native
  optimizer refuses FSDP1 models); otherwise SpecForge's becomes ``compat``'s, which is right on
  FSDP1 (it clips by the true global norm) and is ``fsdp2_port``'s on FSDP2. An optimizer the
  run cannot tie to a model (built on an inner module of a wrapped one) therefore holds nothing.
- Its ``step()`` returns the *global* norm. A caller-side SUM all-reduce of that norm (or of its
  square, before a square root), anywhere later in the function, would multiply it by the world
  size (or its square root): the ``all_reduce`` goes. An all-reduce followed by a division (an
  average) is left alone: it gives the norm back.
"""

from __future__ import annotations

import ast
from dataclasses import replace
from typing import ClassVar

from fsdp2_port.codemods import imports
from fsdp2_port.codemods.analysis import FileAnalysis
from fsdp2_port.codemods.assumptions import (
    BF16_OPTIMIZERS,
    FSDP1_BF16_OPTIMIZER_MODULES,
    OPTIMIZER_WORDS,
)
from fsdp2_port.codemods.plan import Requirement, Rewrite
from fsdp2_port.codemods.refs import Deferred, Optimizer
from fsdp2_port.codemods.rules.base import Code
from fsdp2_port.codemods.rules.state_dict.saves import one_rank_test
from fsdp2_port.codemods.text import Edit

_ALL_REDUCE = "torch.distributed.all_reduce"


class OptimizerRule:
    STAGE: ClassVar[str] = "analysis"
    CODE: ClassVar[str] = "F2P009"
    CODES: ClassVar[dict[str, Code]] = {
        "F2P009": Code(
            summary=(
                "BF16Optimizer from specforge/compat -> fsdp2_port (or compat); drop the "
                "caller-side all-reduce of its norm"
            ),
            topic="the BF16 master optimizer",
            rewritten=(
                "`BF16Optimizer` from `specforge`/`compat` → `fsdp2_port` when its models "
                "migrate, else SpecForge's → `compat` (right on FSDP1: global-norm clip); a "
                "caller-side SUM all-reduce of `step()`'s norm (or its square) anywhere later in "
                "the function is removed (an all-reduce followed by a division is an average: "
                "kept)"
            ),
            marked="—",
            proven_by=(
                "tests/test_multifile_programs.py::test_the_migrated_program_trains_like_the_original[specforge_prefix-bf16--]",
                "tests/test_multifile_programs.py::test_the_migrated_program_trains_like_the_original[inner_optimizer-bf16--]",
                "tests/test_migrated_scripts.py::test_the_migration_trains_like_the_original[bf16_accumulate.py-2-bf16-args3]",
                "tests/test_demo.py::test_migrated_example_trains_like_the_original",
                "tests/test_checkpoint.py::test_a_full_state_saved_by_rank_0_resumes_every_rank",
            ),
        ),
    }
    #: A case whose model stays FSDP1 needs what keeps it there (a LOCAL_STATE_DICT block).
    NEEDS: ClassVar[tuple[str, ...]] = ("F2P002", "F2P008")
    EMITS: ClassVar[dict[str, str]] = {}

    def analyze(self, analysis: FileAnalysis) -> None:
        for node in analysis.names.by_type[ast.ImportFrom]:
            assert isinstance(node, ast.ImportFrom)
            if node.level or node.module not in FSDP1_BF16_OPTIMIZER_MODULES:
                continue
            for alias in node.names:
                if alias.name == "BF16Optimizer":
                    self._import(analysis, node, alias)
        self._reductions(analysis)
        self._state_dicts(analysis)

    def _import(self, analysis: FileAnalysis, statement: ast.ImportFrom, alias: ast.alias) -> bool:
        if analysis.is_ignored(statement):
            return False
        bound = alias.asname or alias.name
        scope = analysis.names.scope_of(statement)
        bindings = [b for b in scope.bindings.get(bound, []) if b.node is alias]
        ties: set[str] = set()
        deferred: set[Deferred] = set()
        untied = False
        for call in analysis.names.by_type[ast.Call]:
            assert isinstance(call, ast.Call)
            if not isinstance(call.func, ast.Name) or call.func.id != bound:
                continue
            if not any(b in bindings for b in analysis.names.bindings_of(call.func)):
                continue
            model = (
                call.args[0]
                if call.args
                else next(
                    (k.value for k in call.keywords if k.arg in ("model", "model_or_params")), None
                )
            )
            found = analysis.ties.of(model) if model is not None else (frozenset(), frozenset())
            ties |= found[0]
            deferred |= found[1]
            untied |= not (found[0] or found[1])
        requirement: Requirement = "RUN" if untied or not (ties or deferred) else "MODELS"
        rewrite = _from(
            analysis,
            statement,
            alias,
            "fsdp2_port",
            f"BF16Optimizer imported from fsdp2_port instead of {statement.module}",
        )
        specforge = bool(statement.module and statement.module.startswith("specforge"))
        fallback = None
        if specforge and statement.module and len(statement.names) == 1:
            # rewritten or not, it imports fsdp2_port's or compat's: SpecForge's module no more
            analysis.plan.leaves += ((statement.lineno, statement.module),)
        if specforge:
            fallback = _from(
                analysis,
                statement,
                alias,
                "fsdp2_port.compat",
                "BF16Optimizer imported from fsdp2_port.compat instead of specforge: on FSDP1 "
                "it clips by the true global norm (SpecForge's clipped each rank's shard by its "
                "own), so wherever the clip acts the run differs from SpecForge's: review",
            )
            fallback = replace(fallback, review=True)
        analysis.add(
            self.CODE,
            alias,
            f"BF16Optimizer from {statement.module} kept: the model it is built on stays FSDP1",
            rewrite,
            requirement,
            ties=frozenset(ties),
            deferred=frozenset(deferred),
            fallback=fallback,
            quiet=not specforge,
            # What stays is compat's optimizer, which is fsdp2_port's on an FSDP2 model: right
            # whichever model an untied call builds it on (an inner module of a wrapped model).
            holds=False,
        )
        return True

    # -- checkpoints -----------------------------------------------------------------------------
    def _state_dicts(self, analysis: FileAnalysis) -> None:
        """``o.state_dict()`` of a BF16 optimizer -> ``o.full_state_dict()``: on FSDP1 the same
        state (its masters are plain tensors), on FSDP2 its DTensors gathered whole, so a
        checkpoint saved from one rank (SpecForge's) resumes every rank. Gathering is a
        collective: inside a branch only some ranks enter it is marked instead."""
        for node in analysis.names.by_type[ast.Call]:
            assert isinstance(node, ast.Call)
            func = node.func
            if not (
                isinstance(func, ast.Attribute)
                and func.attr == "state_dict"
                and not node.args
                and not node.keywords
            ) or analysis.is_ignored(node):
                continue
            refs, deferred = self._optimizers(analysis, func.value)
            receiver = analysis.source(func.value)
            # a value only the run's calls hand over (a helper's parameter) is taken for an
            # optimizer when named like one: a model's state_dict() is F2P008's
            last = receiver.rpartition(".")[2]
            if not refs and not (
                deferred
                and analysis.assumed.takes(
                    OPTIMIZER_WORDS,
                    last,
                    func.value,
                    member=any(w in last.lower() for w in OPTIMIZER_WORDS),
                )
            ):
                continue
            test = one_rank_test(analysis, node)
            if test is None:
                start = analysis.span(func)[1] - len("state_dict")
                rewrite = Rewrite(
                    [Edit(start, start + len("state_dict"), "full_state_dict")],
                    f"{receiver}.state_dict() -> {receiver}.full_state_dict(): the masters and "
                    "moments whole (on FSDP1 the same state), so a checkpoint saved from one rank "
                    "resumes every rank",
                )
            else:
                rewrite = Rewrite(
                    [],
                    f"{receiver}.state_dict() where only some ranks get ({test}): under "
                    f"FSDP2 it holds this rank's shards only; take {receiver}.full_state_dict() "
                    "before that test, on every rank (a collective), and save that",
                    review=True,
                )
            analysis.add(
                self.CODE,
                node,
                "",
                rewrite,
                "ALWAYS",
                deferred=deferred,
                about_optimizer=True,
                optimizers=refs,
            )

    # -- the caller-side reduction -------------------------------------------------------------
    def _reductions(self, analysis: FileAnalysis) -> None:
        for node in analysis.names.by_type[ast.Call]:
            assert isinstance(node, ast.Call)
            if not (
                isinstance(node.func, ast.Attribute) and node.func.attr == "step" and not node.args
            ):
                continue
            refs, deferred = self._optimizers(analysis, node.func.value)
            if not (refs or deferred):
                continue
            target = analysis.names.parent.get(node)
            if (
                isinstance(target, ast.Assign)
                and len(target.targets) == 1
                and isinstance(target.targets[0], ast.Name)
            ):
                self._after_step(analysis, target, target.targets[0].id, refs, deferred)

    def _optimizers(
        self, analysis: FileAnalysis, receiver: ast.AST
    ) -> tuple[frozenset[Optimizer], frozenset[Deferred]]:
        """The BF16 optimizers ``receiver`` may hold (one bound by its annotation counts)."""
        refs, deferred = analysis.ties.optimizers_of(receiver)
        if not refs and self._is_bf16_optimizer(analysis, receiver):
            refs = frozenset({Optimizer("annotated")})
        return refs, deferred

    def _is_bf16_optimizer(self, analysis: FileAnalysis, receiver: ast.AST) -> bool:
        """Bound from a ``BF16Optimizer(...)`` call, or a parameter annotated with it."""
        values: list[ast.AST] = []
        if isinstance(receiver, ast.Name):
            for binding in analysis.names.bindings_of(receiver):
                if binding.value is not None:
                    values.append(binding.value)
                annotation = getattr(binding.node, "annotation", None)
                if annotation is not None:
                    values.append(annotation)
        elif isinstance(receiver, ast.Attribute):
            values.extend(analysis.ties.assigned(receiver))
        for value in values:
            func = value.func if isinstance(value, ast.Call) else value
            if (
                isinstance(func, (ast.Name, ast.Attribute))
                and analysis.names.qualified(func) & BF16_OPTIMIZERS.members
            ):
                return True
        return False

    def _after_step(
        self,
        analysis: FileAnalysis,
        assign: ast.Assign,
        norm: str,
        refs: frozenset[Optimizer],
        deferred: frozenset[Deferred],
    ) -> None:
        """Remove each later SUM all-reduce in the function of ``norm`` or a value made from it."""
        function = analysis.names.function_of(assign) or analysis.tree
        derived = {norm}
        start = analysis.lines.end(assign)
        for node in ast.walk(function):
            if (
                isinstance(node, ast.Assign)
                and analysis.lines.start(node) >= start
                and len(node.targets) == 1
            ):
                target = node.targets[0]
                if isinstance(target, ast.Name) and _mentions(node.value, derived):
                    derived.add(target.id)
        for node in ast.walk(function):
            if not (isinstance(node, ast.Call) and analysis.lines.start(node) >= start):
                continue
            if not (
                analysis.resolves_to(node.func, _ALL_REDUCE)
                and node.args
                and isinstance(node.args[0], ast.Name)
            ):
                continue
            reduced = node.args[0].id
            if reduced not in derived or not _is_sum(analysis, node):
                continue
            statement = analysis.names.parent.get(node)
            if not isinstance(statement, ast.Expr) or analysis.is_ignored(node):
                continue
            if _divided_later(analysis, function, reduced, analysis.lines.end(node)):
                continue
            analysis.add(
                self.CODE,
                node,
                "kept: an all-reduce of BF16Optimizer.step()'s norm",
                Rewrite(
                    [imports.remove_statement(analysis.lines, analysis.names, statement)],
                    "caller-side all-reduce of BF16Optimizer.step()'s norm removed: step() already "
                    "returns the global norm (it was multiplied by the world size)",
                ),
                "ALWAYS",
                deferred=deferred,
                about_optimizer=True,
                optimizers=refs,
            )


def _from(
    analysis: FileAnalysis, statement: ast.ImportFrom, alias: ast.alias, module: str, message: str
) -> Rewrite:
    """``BF16Optimizer`` imported from ``module``: the statement's module when it imports only
    that name, else the name moves to an import of its own; at module level, out of the run's
    own imports into the libraries' (isort's sections: first-party stays last)."""
    own = analysis.run_modules.tops
    if (
        statement in analysis.tree.body
        and (statement.module or "").partition(".")[0] in own
        and module.partition(".")[0] not in own
    ):
        if len(statement.names) == 1:
            edits = [imports.remove_statement(analysis.lines, analysis.names, statement)]
        else:
            edits = imports.remove_aliases(analysis.lines, statement, {alias})
        # written here, not as a needed import: the name is the one the removed line binds
        at = analysis.module_level_import(module, "BF16Optimizer").anchor
        spelled = "BF16Optimizer" + (f" as {alias.asname}" if alias.asname else "")
        line = f"from {module} import {spelled}{analysis.lines.newline()}"
        return Rewrite([*edits, Edit(at, at, line)], message)
    if len(statement.names) == 1:
        start = analysis.lines.start(statement) + len("from ")
        while analysis.text[start] in " \t\\\r\n":
            start += 1
        end = start + len(statement.module or "")
        return Rewrite([Edit(start, end, module)], message)
    edits = imports.remove_aliases(analysis.lines, statement, {alias})
    new = analysis.import_after(statement, module, "BF16Optimizer", alias.asname)
    return Rewrite(edits, message, [new])


def _mentions(node: ast.AST, names: set[str]) -> bool:
    return any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(node))


def _is_sum(analysis: FileAnalysis, call: ast.Call) -> bool:
    op = next(
        (k.value for k in call.keywords if k.arg == "op"),
        call.args[1] if len(call.args) > 1 else None,
    )
    return op is None or analysis.resolves_to(op, "torch.distributed.ReduceOp.SUM")


def _divided_later(analysis: FileAnalysis, function: ast.AST, name: str, after: int) -> bool:
    for node in ast.walk(function):
        if not hasattr(node, "lineno") or analysis.lines.start(node) < after:
            continue
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Div, ast.FloorDiv)):
            if isinstance(node.left, ast.Name) and node.left.id == name:
                return True
        if isinstance(node, ast.AugAssign) and isinstance(node.op, (ast.Div, ast.FloorDiv)):
            if isinstance(node.target, ast.Name) and node.target.id == name:
                return True
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("div", "div_", "true_divide")
        ):
            if isinstance(node.func.value, ast.Name) and node.func.value.id == name:
                return True
    return False
