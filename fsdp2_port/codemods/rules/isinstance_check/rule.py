"""F2P005: the FSDP1 class as a type -> ``FSDPModule``.

``isinstance(x, FSDP)`` / ``issubclass`` (in a tuple or a ``|`` union too), an exact type
test (``type(x) == FSDP``, ``is``, negated: ``isinstance`` then, as each model ``fully_shard``
takes gets a class of its own) and annotations.
Every module ``fully_shard`` was applied to is an ``FSDPModule``, as every FSDP1-wrapped module
was an ``FSDP``; but a type check is rewritten only with the models it sees (tied ones, or
every model of the run), and never when what it guards stays FSDP1: the check and the FSDP1
sites in the code it guards form one group, rewritten together or not at all.
"""

from __future__ import annotations

import ast
from typing import ClassVar

from fsdp2_port.codemods import imports
from fsdp2_port.codemods.analysis import FileAnalysis
from fsdp2_port.codemods.assumptions import MODULE_WALKS, TYPE_ASSERTIONS, TYPE_TESTS
from fsdp2_port.codemods.plan import Requirement, Rewrite, Site
from fsdp2_port.codemods.rules.base import Code
from fsdp2_port.codemods.text import Edit

#: ``type(x) <op> FSDP``: the comparisons that test a type exactly.
_EXACT = (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)
#: Where ``not ...`` needs no parentheses: a condition of its own.
_CONDITIONS = (ast.If, ast.While, ast.IfExp, ast.Assert, ast.BoolOp, ast.UnaryOp)


class IsinstanceRule:
    STAGE: ClassVar[str] = "analysis"
    CODE: ClassVar[str] = "F2P005"
    CODES: ClassVar[dict[str, Code]] = {
        "F2P005": Code(
            summary="isinstance(x, FSDP) / issubclass / annotations -> FSDPModule",
            topic="the FSDP1 class as a type",
            rewritten=(
                "`isinstance(x, FSDP)` / `issubclass` (in tuples and unions), annotations → "
                "`FSDPModule`, `type(x) == FSDP` (`!=`, `is`, `is not`) → "
                "`isinstance(x, FSDPModule)` (negated), with the models they see; with "
                "`--drop-fsdp1-branches`, the "
                "FSDP1 branch of an `if isinstance(x, FSDP): ... elif isinstance(x, "
                "FSDPModule):` dispatch is deleted, and so is a one-armed `if isinstance(x, "
                "FSDP):` over FSDP1 code no rule rewrites once its models migrate (review)"
            ),
            marked=(
                "a check guarding FSDP1-only code that stays; the FSDP1 branch of such a "
                "dispatch, without the flag (left as is: library code may keep both on purpose; "
                "it no longer runs once the model is FSDP2)"
            ),
            proven_by=(
                "tests/test_type_tests_and_scaler.py::test_type_tests_configs_and_scaler_run_as_fsdp1_did",
                "tests/test_demo.py::test_migrated_example_trains_like_the_original",
            ),
        ),
    }
    #: A type test and the FSDP1 code it guards (state dicts, internals) go together.
    NEEDS: ClassVar[tuple[str, ...]] = ("F2P002", "F2P008", "F2P010")
    EMITS: ClassVar[dict[str, str]] = {}

    def analyze(self, analysis: FileAnalysis) -> None:
        for call in analysis.names.by_type[ast.Call]:
            assert isinstance(call, ast.Call)
            tests = len(call.args) == 2 and analysis.resolves_to(call.func, *TYPE_TESTS)
            asserts = (  # ``self.assertIsInstance(module, FSDP[, msg])``: the same test
                len(call.args) in (2, 3)
                and isinstance(call.func, ast.Attribute)
                and call.func.attr in TYPE_ASSERTIONS
            )
            if (tests or asserts) and not analysis.is_ignored(call):
                self._check(analysis, call)
        for compare in analysis.names.by_type[ast.Compare]:
            assert isinstance(compare, ast.Compare)
            test = _exact_type_test(analysis, compare)
            if test is not None and not analysis.is_ignored(compare):
                self._exact(analysis, compare, *test)
        for annotation in analysis.names.annotations:
            self._annotation(analysis, annotation)

    def _exact(
        self,
        analysis: FileAnalysis,
        compare: ast.Compare,
        subject: ast.expr,
        ref: ast.expr,
        negated: bool,
    ) -> None:
        """``type(x) == FSDP`` -> ``isinstance(x, FSDPModule)``: ``fully_shard`` gives each
        module a class of its own (``FSDPLinear``), so only ``isinstance`` tells."""
        text = f"isinstance({analysis.source(subject)}, FSDPModule)"
        if negated:
            parent = analysis.names.parent.get(compare)
            text = f"not {text}" if isinstance(parent, _CONDITIONS) else f"(not {text})"
        module = analysis.options.fsdp2_module
        rewrite = Rewrite(
            [analysis.replace(compare, text)],
            "FSDP exact type test -> isinstance(x, FSDPModule)",
            [analysis.import_for(ref, module, "FSDPModule")],
        )
        self._type_test(analysis, compare, subject, rewrite, negated)

    def _type_test(
        self,
        analysis: FileAnalysis,
        test: ast.expr,
        subject: ast.expr,
        rewrite: Rewrite,
        negated: bool = False,
    ) -> Site | None:
        """A type test of ``subject``, tied to its models; the FSDP1 code it guards goes
        with it (one group)."""
        guarded = _guarded_span(analysis, test, negated)
        group = _guard_group(analysis, test)
        groups = frozenset({group}) if guarded else frozenset()
        site = analysis.add_tied(
            self.CODE,
            test,
            subject,
            "kept: FSDP1 type test",
            rewrite,
            known=False,
            groups=groups,
            holds=False,  # kept, an FSDP2 model fails the test: marked, not broken
            fsdp1_only_marker=True,
        )
        if site is not None and guarded:
            analysis.guards.append((guarded, group))
        return site

    def _check(self, analysis: FileAnalysis, call: ast.Call) -> None:
        kinds = call.args[1]
        refs = _fsdp_refs(analysis, kinds)
        if not refs:
            return
        dispatch = _dispatch_branch(analysis, call)
        if dispatch is not None:
            message = (
                "FSDP1 branch of a type dispatch that has an FSDP2 branch: it no longer runs "
                "once the model is FSDP2; delete it with the last FSDP1 model "
                "(--drop-fsdp1-branches)"
            )
            statement = analysis.names.parent.get(call)
            assert isinstance(statement, ast.If)
            following = statement.orelse[0]
            assert isinstance(following, ast.If)
            deleted = analysis.options.drop_fsdp1_branches and analysis.is_elif(following)
            rewrite = None
            if deleted:
                start, end = analysis.lines.start(call), analysis.lines.start(following.test)
                rewrite = Rewrite(
                    [Edit(start, end, "")],
                    "FSDP1 branch of a type dispatch deleted (--drop-fsdp1-branches): FSDP1 "
                    "models no longer have a branch here",
                    review=True,
                )
            analysis.add(self.CODE, call, message, rewrite, "ALWAYS" if deleted else "NEVER")
            analysis.dead_branches.append((dispatch, message, deleted))
            return
        if isinstance(kinds, ast.Tuple) and any(
            analysis.fsdp2_name(e) == "FSDPModule" for e in kinds.elts
        ):
            # Already true for FSDP1 and FSDP2 models alike: nothing to change or mark.
            analysis.add(self.CODE, call, "", None, "NEVER", silent=True, holds=False)
            return
        rewrite = _to_fsdp_module(analysis, kinds, refs, "FSDP class test -> FSDPModule")
        site = self._type_test(analysis, call, call.args[0], rewrite)
        statement = analysis.names.parent.get(call)
        if (
            site is not None
            and analysis.options.drop_fsdp1_branches
            and isinstance(statement, ast.If)
            and statement.test is call
            and not statement.orelse
        ):
            analysis.one_armed.append(
                (site, _guard_group(analysis, call), _removal(analysis, statement))
            )

    def _annotation(self, analysis: FileAnalysis, annotation: ast.expr) -> None:
        refs = _fsdp_refs(analysis, annotation)
        if not refs or analysis.is_ignored(annotation):
            return
        rewrite = _to_fsdp_module(analysis, annotation, refs, "FSDP annotation -> FSDPModule")
        parent = analysis.names.parent.get(annotation)
        if isinstance(parent, ast.AnnAssign) and parent.value is not None:
            analysis.add_tied(
                self.CODE,
                annotation,
                parent.value,
                "kept: FSDP1 annotation",
                rewrite,
                known=False,
                holds=False,  # an annotation changes nothing at run time
                fsdp1_only_marker=True,
            )
        elif (
            isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef))
            and parent.returns is annotation
        ):
            ties = analysis.ties.returned_by(parent)
            requirement: Requirement = "MODELS" if ties[0] or ties[1] else "RUN"
            analysis.add(
                self.CODE,
                annotation,
                "kept: FSDP1 annotation",
                rewrite,
                requirement,
                ties=ties[0],
                deferred=ties[1],
                holds=False,  # an annotation changes nothing at run time
                fsdp1_only_marker=True,
            )
        else:
            analysis.add(
                self.CODE,
                annotation,
                "kept: FSDP1 annotation",
                rewrite,
                "RUN",
                holds=False,
                fsdp1_only_marker=True,
            )


def _exact_type_test(
    analysis: FileAnalysis, compare: ast.Compare
) -> tuple[ast.expr, ast.expr, bool] | None:
    """``type(x) == FSDP`` (``is``; ``!=`` / ``is not``: negated; either side): ``(x, the
    FSDP1 reference, negated)``."""
    if len(compare.ops) != 1 or not isinstance(compare.ops[0], _EXACT):
        return None
    sides = (compare.left, compare.comparators[0])
    for typed, other in (sides, sides[::-1]):
        if (
            isinstance(typed, ast.Call)
            and analysis.resolves_to(typed.func, "builtins.type")
            and len(typed.args) == 1
            and not typed.keywords
            and isinstance(other, (ast.Name, ast.Attribute))
            and analysis.is_fsdp_class(other)
        ):
            return typed.args[0], other, isinstance(compare.ops[0], (ast.NotEq, ast.IsNot))
    return None


def _fsdp_refs(analysis: FileAnalysis, node: ast.AST) -> list[ast.expr]:
    """The FSDP1 class references in a type expression (tuples, unions, subscripts)."""
    found: list[ast.expr] = []
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, (ast.Name, ast.Attribute)) and analysis.is_fsdp_class(current):
            found.append(current)
        elif isinstance(current, (ast.Tuple, ast.List)):
            stack.extend(current.elts)
        elif isinstance(current, ast.BinOp) and isinstance(current.op, ast.BitOr):
            stack.extend((current.left, current.right))
        elif isinstance(current, ast.Subscript):
            stack.append(current.slice)
    return sorted(found, key=lambda n: (n.lineno, n.col_offset))


def _to_fsdp_module(
    analysis: FileAnalysis, kinds: ast.AST, refs: list[ast.expr], message: str
) -> Rewrite:
    """``FSDPModule`` in place of each FSDP1 reference (dropped from a tuple, or a ``|`` union,
    that has it)."""
    has_fsdp2 = isinstance(kinds, ast.Tuple) and any(
        analysis.fsdp2_name(e) == "FSDPModule" for e in kinds.elts
    )
    if has_fsdp2:
        assert isinstance(kinds, ast.Tuple)
        return Rewrite(_tuple_removals(analysis, kinds, set(refs)), message)
    edits, replaced = [], []
    for ref in refs:
        union = _union_of(analysis, ref)
        members = _union_members(union) if union is not None else []
        if any(analysis.fsdp2_name(m) == "FSDPModule" for m in members) and (
            len(set(members) & set(refs)) == 1
        ):
            edits.append(_union_removal(analysis, ref))
        else:
            edits.append(analysis.replace(ref, "FSDPModule"))
            replaced.append(ref)
    module = analysis.options.fsdp2_module
    imports = [analysis.import_for(r, module, "FSDPModule") for r in replaced[:1]]
    return Rewrite(edits, message, imports)


def _union_members(union: ast.expr) -> list[ast.expr]:
    """The operands of a ``|`` union, flattened."""
    if isinstance(union, ast.BinOp) and isinstance(union.op, ast.BitOr):
        return [*_union_members(union.left), *_union_members(union.right)]
    return [union]


def _union_of(analysis: FileAnalysis, member: ast.expr) -> ast.BinOp | None:
    """The whole ``|`` union ``member`` is an operand of, if any."""
    union = None
    node: ast.AST = member
    while isinstance(parent := analysis.names.parent.get(node), ast.BinOp) and isinstance(
        parent.op, ast.BitOr
    ):
        union = node = parent
    return union


def _union_removal(analysis: FileAnalysis, member: ast.expr) -> Edit:
    """``member`` and the ``|`` beside it removed from its union."""
    union = analysis.names.parent[member]
    assert isinstance(union, ast.BinOp)
    if union.left is member:
        return Edit(analysis.lines.start(member), analysis.lines.start(union.right), "")
    return Edit(analysis.lines.end(union.left), analysis.lines.end(member), "")


def _tuple_removals(analysis: FileAnalysis, kinds: ast.Tuple, drop: set[ast.expr]) -> list[Edit]:
    edits = []
    elements = kinds.elts
    for index, element in enumerate(elements):
        if element not in drop:
            continue
        start, end = analysis.span(element)
        if index + 1 < len(elements):
            edits.append(Edit(start, analysis.lines.start(elements[index + 1]), ""))
        else:
            edits.append(Edit(analysis.lines.end(elements[index - 1]), end, ""))
    return edits


def _guard_group(analysis: FileAnalysis, test: ast.expr) -> str:
    """The group of a type test and the FSDP1 code it guards."""
    return f"guard:{analysis.site_id(test)}"


def _removal(analysis: FileAnalysis, statement: ast.If) -> list[Edit]:
    """Deleting ``if isinstance(x, FSDP): ...`` (no ``else``), with the loops over a model's
    modules or parameters around it that hold nothing else (Wan's ``free_model``). The marker
    stays at the ``if`` line, at the indentation of what was deleted (``apply._dedented``)."""
    lines = analysis.lines
    removed: ast.stmt = statement
    while True:
        loop = analysis.names.parent.get(removed)
        if not (
            isinstance(loop, ast.For)
            and loop.body == [removed]
            and not loop.orelse
            and isinstance(loop.iter, ast.Call)
            and isinstance(loop.iter.func, ast.Attribute)
            and not lines.text[lines.line_start(lines.start(loop)) : lines.start(loop)].strip()
            and analysis.assumed.takes(MODULE_WALKS, loop.iter.func.attr, loop.iter)
        ):
            break
        removed = loop
    if removed is statement:
        return [imports.remove_statement(lines, analysis.names, statement)]
    first = lines.line_start(lines.start(statement))
    outer = lines.line_start(lines.start(removed))
    depth = len(lines.indent_at(first)) - len(lines.indent_at(outer))
    alone = imports.remove_statement(lines, analysis.names, removed).replacement == "pass"
    rest = (
        Edit(lines.start(statement), lines.end(removed), "pass")
        if alone
        else Edit(first + depth, lines.line_end(lines.end(removed) - 1), "")
    )
    return [Edit(outer, first, ""), Edit(first, first + depth, ""), rest]


def _dispatch_branch(analysis: FileAnalysis, call: ast.Call) -> tuple[int, int] | None:
    """The body of ``if isinstance(x, FSDP):`` when an ``elif``/``else if`` of the same chain
    tests ``x`` against an FSDP2 class: under FSDP2 only the other branch runs."""
    statement = analysis.names.parent.get(call)
    if not (isinstance(statement, ast.If) and statement.test is call):
        return None
    subject = analysis.source(call.args[0])
    branch = statement
    while len(branch.orelse) == 1 and isinstance(branch.orelse[0], ast.If):
        branch = branch.orelse[0]
        test = branch.test
        if (
            isinstance(test, ast.Call)
            and len(test.args) == 2
            and analysis.resolves_to(test.func, *TYPE_TESTS)
            and analysis.source(test.args[0]) == subject
            and any(analysis.fsdp2_name(n) == "FSDPModule" for n in ast.walk(test.args[1]))
        ):
            return analysis.lines.start(statement.body[0]), analysis.lines.end(statement.body[-1])
    return None


def _guarded_span(
    analysis: FileAnalysis, call: ast.expr, negated: bool = False
) -> tuple[int, int] | None:
    """The code that runs only when the check holds: the rest of an ``and``, the ``if`` body;
    for a negated check (``not``, ``or``, a check that is a negation itself), the ``else``
    and, after ``if not ...: return`` (any jump), the rest of the block."""
    spans: list[tuple[int, int]] = []
    child: ast.AST = call
    for ancestor in analysis.names.ancestors(call):
        if isinstance(ancestor, ast.UnaryOp) and isinstance(ancestor.op, ast.Not):
            negated = not negated
        elif isinstance(ancestor, ast.BoolOp):
            if isinstance(ancestor.op, ast.And if not negated else ast.Or):
                later = ancestor.values[ancestor.values.index(child) + 1 :]  # type: ignore[arg-type]
                if later:
                    spans.append((analysis.lines.start(later[0]), analysis.lines.end(later[-1])))
        elif isinstance(ancestor, (ast.If, ast.While)) and child is ancestor.test:
            if not negated:
                spans.append(
                    (analysis.lines.start(ancestor.body[0]), analysis.lines.end(ancestor.body[-1]))
                )
            else:
                spans += _denied_spans(analysis, ancestor)
            break
        elif isinstance(ancestor, ast.IfExp) and child is ancestor.test:
            spans.append(analysis.span(ancestor.orelse if negated else ancestor.body))
            break
        else:
            break
        child = ancestor
    if not spans:
        return None
    return min(s for s, _ in spans), max(e for _, e in spans)


def _denied_spans(analysis: FileAnalysis, statement: ast.If | ast.While) -> list[tuple[int, int]]:
    """What runs only when the test of ``statement`` is false: its ``else``, and the rest of
    its block when its body always jumps away."""
    spans = []
    if statement.orelse:
        spans.append(
            (analysis.lines.start(statement.orelse[0]), analysis.lines.end(statement.orelse[-1]))
        )
    if isinstance(statement, ast.If) and isinstance(
        statement.body[-1], (ast.Return, ast.Raise, ast.Continue, ast.Break)
    ):
        owner = analysis.names.parent.get(statement)
        for name in ("body", "orelse", "finalbody"):
            block = getattr(owner, name, None)
            if isinstance(block, list) and statement in block:
                rest = block[block.index(statement) + 1 :]
                if rest:
                    spans.append((analysis.lines.start(rest[0]), analysis.lines.end(rest[-1])))
    return spans
