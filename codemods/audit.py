"""A second reading of migrated code: what it still holds of FSDP1, and whether any model is
half-migrated. It does not use the codemod's plan or decisions, only the output text.

- ``constructors``: FSDP1 constructor calls left (``FullyShardedDataParallel(...)`` and
  ``partial(FSDP, ...)``); ``wrapper_classes``: FSDP1 subclasses and ``wrapper_cls=FSDP``;
- half-migrated: an FSDP2 policy object handed to an FSDP1 constructor; an FSDP2-only API
  (``set_requires_gradient_sync``, ``fully_shard``, an ``FSDPModule`` test,
  ``fsdp2_port.clip_grad_norm_``, ``fsdp2_port.BF16Optimizer``) on a model an FSDP1 constructor
  builds;
- unmarked: an FSDP1 name (configuration values aside) or an FSDP1-only call (``no_sync``,
  ``clip_grad_norm_``) on a model FSDP2 builds, in a statement without a marker;
- ``untied_fsdp2``: FSDP2-only APIs on models of unknown origin (half-migrated when FSDP1
  constructors remain in the same run; see ``run_problems``).
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass, field

from codemods import markers
from codemods.analysis import FileAnalysis, Source
from codemods.options import Options
from codemods.rules.leftovers import CONFIGURATION
from codemods.ties import Ties

_FSDP2_POLICIES = frozenset({"MixedPrecisionPolicy", "CPUOffloadPolicy", "OffloadPolicy"})
_FSDP2_CONSTRUCTORS = frozenset(
    {"fsdp2_port.fully_shard_like_fsdp1", "fsdp2_port.fsdp1.like_fsdp1.fully_shard_like_fsdp1"}
)
_FSDP2_FUNCTIONS = frozenset({"fsdp2_port.clip_grad_norm_", "fsdp2_port.BF16Optimizer"})


@dataclass
class Audit:
    constructors: int = 0
    wrapper_classes: int = 0
    half_migrated: list[str] = field(default_factory=list)
    unmarked: list[str] = field(default_factory=list)
    #: FSDP1 type tests and annotations left unmarked: right while every model of the run
    #: stays FSDP1 (``unmarked`` of the run counts them only when a model migrated).
    unmarked_type_tests: list[str] = field(default_factory=list)
    untied_fsdp2: list[str] = field(default_factory=list)


def audit(path: str, text: str, module_name: str = "", is_package: bool = False) -> Audit:
    """Audit one file's text (raises ``SyntaxError`` when it does not parse)."""
    a = FileAnalysis(Source(path, text, module_name, is_package), Options())
    report = Audit(constructors=len(a.ties.constructors))
    classes = [n for n in a.names.by_type[ast.ClassDef] if isinstance(n, ast.ClassDef)]
    keywords = [n for n in a.names.by_type[ast.keyword] if isinstance(n, ast.keyword)]
    report.wrapper_classes = sum(a.is_fsdp_class(b) for node in classes for b in node.bases)
    report.wrapper_classes += sum(
        node.arg == "wrapper_cls" and a.is_fsdp_class(node.value) for node in keywords
    )
    for call in a.ties.constructors:
        for node in ast.walk(call):
            if (
                isinstance(node, (ast.Name, ast.Attribute))
                and a.fsdp2_name(node) in _FSDP2_POLICIES
            ):
                report.half_migrated.append(
                    f"{path}:{call.lineno}: an FSDP2 policy reaches an FSDP1 constructor"
                )
    fsdp1 = set(a.ties.constructors.values())
    fsdp2 = Ties(
        a,
        lambda f: (
            bool(a.names.qualified(f) & _FSDP2_CONSTRUCTORS) or a.fsdp2_name(f) == "fully_shard"
        ),
    )
    for node in a.names.by_type[ast.Call]:
        assert isinstance(node, ast.Call)
        receiver, fsdp2_api = _receiver(a, node)
        if receiver is None or a.is_ignored(node):
            continue
        where = f"{path}:{node.lineno}"
        if fsdp2_api and set(a.ties.of(receiver)[0]) & fsdp1:
            report.half_migrated.append(
                f"{where}: an FSDP2 API on a model an FSDP1 constructor builds"
            )
        elif fsdp2_api and not (a.ties.of(receiver)[0] or fsdp2.of(receiver)[0]):
            if a.fsdp2_name(node.func) != "fully_shard":  # that builds a model: not a use of one
                report.untied_fsdp2.append(where)
        elif not fsdp2_api and fsdp2.of(receiver)[0] and not _marked(a, node):
            report.unmarked.append(f"{where}: an FSDP1 API on a model FSDP2 builds")
    for node in [*a.names.by_type[ast.Name], *a.names.by_type[ast.Attribute]]:
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            continue
        parent = a.names.parent.get(node)
        if isinstance(parent, ast.Attribute) and a.fsdp1_name(parent) is not None:
            continue
        name = a.fsdp1_name(node)
        if name is None or name.split(".", 1)[0] in CONFIGURATION or a.is_ignored(node):
            continue
        if _marked(a, node) or _tested_with_fsdp2(a, node):
            continue
        where = f"{path}:{node.lineno}"  # type: ignore[attr-defined]
        if _in_type_test(a, node):
            report.unmarked_type_tests.append(f"{where}: FSDP1 type test without a marker")
        else:
            report.unmarked.append(f"{where}: FSDP1 name {name} without a marker")
    return report


def run_unmarked(before: Mapping[str, Audit], after: Mapping[str, Audit]) -> list[str]:
    """FSDP1 uses left without a marker in a run; its type tests only if a model migrated."""
    out = [p for audit in after.values() for p in audit.unmarked]
    migrated = sum(x.constructors for x in before.values()) > sum(
        x.constructors for x in after.values()
    )
    if migrated:
        out += [p for audit in after.values() for p in audit.unmarked_type_tests]
    return out


def run_problems(before: Mapping[str, Audit], after: Mapping[str, Audit]) -> list[str]:
    """Half-migrations of a whole run: per file, plus FSDP2 APIs newly used on models of
    unknown origin while FSDP1 constructors remain anywhere in the run."""
    problems = [p for audit in after.values() for p in audit.half_migrated]
    remaining = sum(x.constructors + x.wrapper_classes for x in after.values())
    added = sum(len(x.untied_fsdp2) for x in after.values()) - sum(
        len(x.untied_fsdp2) for x in before.values()
    )
    if remaining and added > 0:
        problems += [
            f"{where}: an FSDP2 API on a model of unknown origin while FSDP1 constructors remain"
            for x in after.values()
            for where in x.untied_fsdp2
        ]
    return problems


def _receiver(a: FileAnalysis, node: ast.Call) -> tuple[ast.AST | None, bool]:
    """``(the model a call is about, whether the call is FSDP2-only)`` for the calls audited."""
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr == "set_requires_gradient_sync":
        return func.value, True
    if a.names.qualified(func) & _FSDP2_FUNCTIONS and node.args:
        first = node.args[0]
        if (
            isinstance(first, ast.Call)
            and isinstance(first.func, ast.Attribute)
            and first.func.attr == "parameters"
        ):
            return first.func.value, True
        return first, True
    if a.fsdp2_name(func) == "fully_shard" and node.args:
        return node.args[0], True
    if a.resolves_to(func, "builtins.isinstance") and len(node.args) == 2:
        if any(a.fsdp2_name(n) == "FSDPModule" for n in ast.walk(node.args[1])):
            return node.args[0], True
    if (
        isinstance(func, ast.Attribute)
        and func.attr in ("no_sync", "clip_grad_norm_")
        and not a.names.qualified(func)
    ):
        return func.value, False
    return None, False


def _tested_with_fsdp2(a: FileAnalysis, node: ast.AST) -> bool:
    """``FSDP`` in ``isinstance(m, (FSDP, FSDPModule))``: true for both kinds of model."""
    kinds = a.names.parent.get(node)
    call = a.names.parent.get(kinds) if isinstance(kinds, ast.Tuple) else None
    return (
        isinstance(call, ast.Call)
        and a.resolves_to(call.func, "builtins.isinstance", "builtins.issubclass")
        and any(a.fsdp2_name(e) == "FSDPModule" for e in kinds.elts)  # type: ignore[union-attr]
    )


def _in_type_test(a: FileAnalysis, node: ast.AST) -> bool:
    """The FSDP1 class in ``isinstance``/``issubclass`` or an annotation."""
    for ancestor in a.names.ancestors(node):
        if isinstance(ancestor, ast.Call):
            return a.resolves_to(ancestor.func, "builtins.isinstance", "builtins.issubclass")
        if isinstance(ancestor, ast.arg) or (
            isinstance(ancestor, (ast.FunctionDef, ast.AsyncFunctionDef))
            and ancestor.returns is not None
        ):
            return True
        if isinstance(ancestor, ast.AnnAssign):
            return True
        if isinstance(ancestor, ast.stmt):
            return False
    return False


def _marked(a: FileAnalysis, node: ast.AST) -> bool:
    anchor = a.statement_start(a.names.statement(node))
    return bool(markers.existing_above(a.lines, anchor))
