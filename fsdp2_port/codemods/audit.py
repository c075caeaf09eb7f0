"""A second reading of migrated code: what it still holds of FSDP1, and whether any model is
half-migrated. It reads only the output text, with its own resolver over plain ``ast``
(``fsdp2_port.codemods.audit_names``): nothing of the codemod's analysis, ties, plan or rules, so
that a
bug there does not hide here too.

- ``constructors``: FSDP1 constructor calls left (``FullyShardedDataParallel(...)`` and
  ``partial(FSDP, ...)``); ``wrapper_classes``: FSDP1 subclasses and ``wrapper_cls=FSDP``;
- half-migrated: an FSDP2 policy object handed to an FSDP1 constructor (written there or bound
  to a name passed there); an FSDP2-only API (``set_requires_gradient_sync``, ``fully_shard``,
  ``fully_shard_like_fsdp1``, an ``FSDPModule`` test, ``fsdp2_port.clip_grad_norm_``,
  ``fsdp2_port.BF16Optimizer``) on a model an FSDP1 constructor (or a subclass of FSDP1
  defined in the file) builds;
- unmarked: an FSDP1-only call (``no_sync``, ``clip_grad_norm_``, ``summon_full_params``,
  ``check_is_root``) or attribute (``_handle``, ``_flat_param``, ...) on a model FSDP2 builds,
  in a statement without a marker; an FSDP1 name (configuration values aside) or type test
  without one, counted only in a run where a model migrated (``run_unmarked``);
- ``untied_fsdp2``: FSDP2-only APIs on models of unknown origin (half-migrated when FSDP1
  constructors remain in the same run; see ``run_problems``).

Models are followed within the file: names bound to a value (``model = FSDP(m)``, chains of
them, tuple unpacking), attributes (``self.model`` across a class and the classes it derives
from or that derive from it here; ``state.model`` where ``state`` is bound), functions and
methods of the file that return a model, parameters the file's own calls pass a model to,
``partial`` factories, conditional expressions, ``or``/``and``, walrus, module methods that
return the module (``.to()``, ``.cuda()``...), and ``fully_shard(model)`` made in place. A
binding is not taken for a read it cannot reach (a later statement outside a loop, the other
branch of an ``if``).
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from fsdp2_port.codemods import audit_names as n
from fsdp2_port.codemods.assumptions import (
    AUDIT_CONFIGURATION,
    AUDIT_FSDP1_METHODS,
    AUDIT_FSDP2_POLICIES,
    AUDIT_FSDP2_TOOLS,
    FSDP1_ONLY_ATTRIBUTES,
)
from fsdp2_port.codemods.audit_models import _FSDP1, _FSDP2, _Models
from fsdp2_port.codemods.markers import PREFIX as _MARKER
from fsdp2_port.codemods.markers import ignored_lines

_LINE_BREAK = re.compile(r"\r\n|\r|\n")

#: FSDP1-only attributes, those called as methods aside (``AUDIT_FSDP1_METHODS``: one finding
#: for each use).
_FSDP1_ATTRIBUTES = FSDP1_ONLY_ATTRIBUTES.members - AUDIT_FSDP1_METHODS.members


@dataclass
class Audit:
    constructors: int = 0
    wrapper_classes: int = 0
    half_migrated: list[str] = field(default_factory=list)
    unmarked: list[str] = field(default_factory=list)
    #: FSDP1 type tests and annotations left unmarked: right while every model of the run
    #: stays FSDP1 (``unmarked`` of the run counts them only when a model migrated).
    unmarked_type_tests: list[str] = field(default_factory=list)
    #: Other FSDP1 names left unmarked: right, too, while every model of the run stays FSDP1
    #: (a state-dict block on a model a blocker keeps), counted the same way.
    unmarked_names: list[str] = field(default_factory=list)
    untied_fsdp2: list[str] = field(default_factory=list)


def audit(
    path: str,
    text: str,
    module_name: str = "",
    is_package: bool = False,
    handed_on: Mapping[str, str] | None = None,
) -> Audit:
    """Audit one file's text (raises ``SyntaxError`` when it does not parse); ``handed_on``:
    the FSDP1 names other modules of the run import (``audit_names.handed_on``)."""
    tree = ast.parse(text, filename=path)
    # Every verdict needs a name imported from a module path with ``fsdp`` in it (torch's
    # FSDP1 and FSDP2, ``fsdp2_port``) or from a module of the run that imported one, except
    # ``set_requires_gradient_sync`` on anything.
    if (
        "fsdp" not in text
        and "fsdp" not in module_name
        and "set_requires_gradient_sync" not in text
        and not any(name.rpartition(".")[2] in text for name in handed_on or {})
    ):
        return Audit()
    return _Reader(path, text, n.Scopes(tree, module_name, is_package, handed_on)).report()


def run_unmarked(before: Mapping[str, Audit], after: Mapping[str, Audit]) -> list[str]:
    """FSDP1 uses left without a marker in a run; its FSDP1 names and type tests only if a
    model migrated (while every model stays FSDP1 they are right as they are)."""
    out = [p for audit in after.values() for p in audit.unmarked]
    migrated = sum(x.constructors for x in before.values()) > sum(
        x.constructors for x in after.values()
    )
    if migrated:
        out += [p for x in after.values() for p in (*x.unmarked_names, *x.unmarked_type_tests)]
    return out


def run_problems(
    before: Mapping[str, Audit],
    after: Mapping[str, Audit],
    programs: frozenset[str] = frozenset(),
) -> list[str]:
    """Half-migrations of a whole run: per file (those the input already had aside: a test
    that builds an FSDP1 model and an FSDP2 one under the same name), plus FSDP2 APIs newly
    used on models of unknown origin while FSDP1 constructors remain where they may come from:
    anywhere in the run, or, in one of ``programs`` (scripts no file imports), in it or in a
    file that is none of them."""
    problems = []
    for path, audit in after.items():
        had = Counter(_what(p) for p in before[path].half_migrated) if path in before else {}
        new = Counter(_what(p) for p in audit.half_migrated) - Counter(had)
        problems += [p for p in audit.half_migrated if new[_what(p)] > 0]

    def left(paths: Iterable[str]) -> int:
        return sum(after[p].constructors + after[p].wrapper_classes for p in paths)

    shared = left(p for p in after if p not in programs)
    added = sum(len(x.untied_fsdp2) for x in after.values()) - sum(
        len(x.untied_fsdp2) for x in before.values()
    )
    if added > 0:
        problems += [
            f"{where}: an FSDP2 API on a model of unknown origin while FSDP1 constructors remain"
            for path, x in after.items()
            if (shared + left([path]) if path in programs else left(after))
            for where in x.untied_fsdp2
        ]
    return problems


def _what(problem: str) -> str:
    """A problem without its ``path:line:`` (lines move when a file is rewritten)."""
    return problem.split(": ", 1)[-1]


class _Reader:
    def __init__(self, path: str, text: str, s: n.Scopes) -> None:
        self.path = path
        self.s = s
        self.models = _Models(s)
        self.lines = _LINE_BREAK.split(text)
        self.ignored = ignored_lines(text)

    def report(self) -> Audit:
        s, models = self.s, self.models
        report = Audit(constructors=len(models.constructors))
        for node in s.nodes:
            if isinstance(node, ast.ClassDef):
                report.wrapper_classes += sum(models.is_fsdp1_class(b) for b in node.bases)
            elif isinstance(node, ast.keyword) and node.arg == "wrapper_cls":
                report.wrapper_classes += models.is_fsdp1_class(node.value)
        for call in models.constructors:
            report.half_migrated += [
                f"{self.path}:{call.lineno}: an FSDP2 policy reaches an FSDP1 constructor"
                for node in ast.walk(call)
                if self._is_fsdp2_policy(node)
            ]
        for node in s.nodes:
            if isinstance(node, ast.Call):
                self._model_call(node, report)
            elif isinstance(node, ast.Attribute) and node.attr in _FSDP1_ATTRIBUTES:
                self._fsdp1_use(node, node.value, f".{node.attr}", report)
        for node in s.nodes:
            if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                continue
            if isinstance(node, (ast.Name, ast.Attribute)):
                self._fsdp1_name(node, report)
        for annotation, constant in self._string_annotations():
            self._quoted_fsdp1_name(annotation, constant, report)
        return report

    def _is_fsdp2_policy(self, node: ast.AST) -> bool:
        """An FSDP2 policy class, or a name bound to an instance of one (``mp = ...Policy()``)."""
        if not isinstance(node, (ast.Name, ast.Attribute)):
            return False
        if n.first_fsdp2(self.s.dotted(node)) in AUDIT_FSDP2_POLICIES:
            return True
        return isinstance(node, ast.Name) and any(
            isinstance(b.value, ast.Call)
            and n.first_fsdp2(self.s.dotted(b.value.func)) in AUDIT_FSDP2_POLICIES
            and self.models.reaches(b.node, node)
            for b in self.s.bindings(node)
            if b.kind == "assign"
        )

    # -- FSDP2 APIs on FSDP1 models, FSDP1 APIs on FSDP2 models ------------------------------------
    def _model_call(self, call: ast.Call, report: Audit) -> None:
        func = call.func
        # ``torch.nn.utils.clip_grad_norm_``, ``fsdp2_port.clip_grad_norm_``: not methods
        if isinstance(func, ast.Attribute) and func.attr in AUDIT_FSDP1_METHODS:
            if not self.s.dotted(func):
                self._fsdp1_use(call, func.value, f".{func.attr}()", report)
                return
        receiver, builds = self._fsdp2_api(call)
        if receiver is None or self._is_ignored(call):
            return
        where = f"{self.path}:{call.lineno}"
        kinds = {b.kind for b in self.models.models(receiver)}
        if _FSDP1 in kinds:
            report.half_migrated.append(
                f"{where}: an FSDP2 API on a model an FSDP1 constructor builds"
            )
        elif not kinds and not builds:
            report.untied_fsdp2.append(where)

    def _fsdp2_api(self, call: ast.Call) -> tuple[ast.AST | None, bool]:
        """``(the model an FSDP2-only call is about, whether the call builds that model)``."""
        func, s = call.func, self.s
        if isinstance(func, ast.Attribute) and func.attr == "set_requires_gradient_sync":
            return func.value, False
        if not call.args:
            return None, False
        first = call.args[0]
        if s.is_(func, *AUDIT_FSDP2_TOOLS):
            if (
                isinstance(first, ast.Call)
                and isinstance(first.func, ast.Attribute)
                and first.func.attr in ("parameters", "named_parameters")
            ):
                return first.func.value, False
            return first, False
        if self.models.is_fsdp2_builder(func):
            return first, True
        if s.is_(func, "builtins.isinstance") and len(call.args) == 2:
            if any(n.first_fsdp2(s.dotted(x)) == "FSDPModule" for x in ast.walk(call.args[1])):
                return first, False
        return None, False

    def _fsdp1_use(self, node: ast.AST, receiver: ast.AST, what: str, report: Audit) -> None:
        """``model.no_sync()``, ``model._handle``...: FSDP1's, wrong on an FSDP2 model."""
        if self._is_ignored(node) or self._marked(node):
            return
        if any(b.kind == _FSDP2 for b in self.models.models(receiver)):
            where = f"{self.path}:{node.lineno}"  # type: ignore[attr-defined]
            if what in (".no_sync()", ".clip_grad_norm_()"):
                report.unmarked.append(f"{where}: an FSDP1 API on a model FSDP2 builds")
            else:
                report.unmarked.append(f"{where}: FSDP1's {what} on a model FSDP2 builds")

    # -- FSDP1 names -------------------------------------------------------------------------------
    def _fsdp1_name(self, node: ast.Name | ast.Attribute, report: Audit) -> None:
        s = self.s
        parent = s.parent.get(node)
        if isinstance(parent, ast.Attribute) and n.first_fsdp1(s.dotted(parent)) is not None:
            return  # the longer chain is the reference
        name = n.first_fsdp1(s.dotted(node))
        if name is None or name.split(".", 1)[0] in AUDIT_CONFIGURATION:
            return
        if self._is_ignored(node) or self._marked(node) or self._tested_with_fsdp2(node):
            return
        where = f"{self.path}:{node.lineno}"
        if self._in_type_test(node):
            report.unmarked_type_tests.append(f"{where}: FSDP1 type test without a marker")
        else:
            report.unmarked_names.append(f"{where}: FSDP1 name {name} without a marker")

    def _string_annotations(self) -> Iterator[tuple[ast.expr, ast.Constant]]:
        for node in self.s.nodes:
            annotations: list[ast.expr | None] = []
            if isinstance(node, ast.arg):
                annotations = [node.annotation]
            elif isinstance(node, n.FUNCTIONS):
                annotations = [node.returns]
            elif isinstance(node, ast.AnnAssign):
                annotations = [node.annotation]
            for annotation in filter(None, annotations):
                for constant in ast.walk(annotation):
                    if isinstance(constant, ast.Constant) and isinstance(constant.value, str):
                        yield annotation, constant

    def _quoted_fsdp1_name(
        self, annotation: ast.expr, constant: ast.Constant, report: Audit
    ) -> None:
        """``model: "FSDP"``: a type annotation too."""
        try:
            parsed = ast.parse(str(constant.value).strip(), mode="eval")
        except SyntaxError:
            return
        scope = self.s.scope[annotation]
        for node in ast.walk(parsed):
            path: list[str] = []
            head = node
            while isinstance(head, ast.Attribute):
                path.insert(0, head.attr)
                head = head.value
            if not isinstance(head, ast.Name):
                continue
            names = self.s.dotted_name(head.id, scope)
            name = n.first_fsdp1(frozenset(".".join([d, *path]) for d in names))
            if name is not None and name.split(".", 1)[0] not in AUDIT_CONFIGURATION:
                if not (self._is_ignored(constant) or self._marked(constant)):
                    report.unmarked_type_tests.append(
                        f"{self.path}:{constant.lineno}: FSDP1 type test without a marker"
                    )
                return

    def _tested_with_fsdp2(self, node: ast.AST) -> bool:
        """``FSDP`` in ``isinstance(m, (FSDP, FSDPModule))``: true for both kinds of model."""
        kinds = self.s.parent.get(node)
        call = self.s.parent.get(kinds) if isinstance(kinds, ast.Tuple) else None
        return (
            isinstance(kinds, ast.Tuple)
            and isinstance(call, ast.Call)
            and self.s.is_(call.func, "builtins.isinstance", "builtins.issubclass")
            and any(n.first_fsdp2(self.s.dotted(e)) == "FSDPModule" for e in kinds.elts)
        )

    def _in_type_test(self, node: ast.AST) -> bool:
        """The class tested in ``isinstance``/``issubclass`` or compared with ``type(x)``
        (``==``, ``is``, negated), or part of an annotation."""
        child = node
        for ancestor in self.s.ancestors(node):
            if isinstance(ancestor, ast.Compare):
                sides = [ancestor.left, *ancestor.comparators]
                return (
                    len(sides) == 2
                    and any(
                        isinstance(side, ast.Call)
                        and self.s.is_(side.func, "builtins.type")
                        and side is not child
                        for side in sides
                    )
                    and isinstance(ancestor.ops[0], (ast.Eq, ast.NotEq, ast.Is, ast.IsNot))
                )
            if isinstance(ancestor, ast.Call):
                return any(child is a for a in ancestor.args[1:]) and self.s.is_(
                    ancestor.func, "builtins.isinstance", "builtins.issubclass"
                )
            if isinstance(ancestor, (ast.arg, ast.AnnAssign)):
                return child is ancestor.annotation
            if isinstance(ancestor, n.FUNCTIONS):
                return child is ancestor.returns
            if isinstance(ancestor, ast.stmt):
                return False
            child = ancestor
        return False

    # -- lines -------------------------------------------------------------------------------------
    def _is_ignored(self, node: ast.AST) -> bool:
        """The line where ``node`` starts or ends ends in ``# fsdp2-port: ignore``."""
        return bool(self.ignored) and (
            node.lineno in self.ignored  # type: ignore[attr-defined]
            or node.end_lineno in self.ignored  # type: ignore[attr-defined]
        )

    def _marked(self, node: ast.AST) -> bool:
        """A marker line directly above the statement that holds ``node``."""
        statement = self.s.statement(node)
        first = min(
            [statement.lineno, *(d.lineno for d in getattr(statement, "decorator_list", []))]
        )
        above = first - 2  # 0-based index of the line above
        return above >= 0 and self.lines[above].strip().startswith(_MARKER)
