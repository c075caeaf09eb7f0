"""Which FSDP kind a value has where a type test guards the code that reads it.

``known_fsdp1``: annotated as FSDP1, or reached only where ``isinstance(x, FSDP)`` (or
``hasattr(x, "<an FSDP1-only attribute>")``) holds. ``unreached_by_fsdp2``: reached only where
a test rules FSDP2 out (an FSDP1 type test, ``not isinstance(x, FSDPModule)``, a version helper
of the file: ``fsdp_version(x) == 1``). Tests are read through ``not``, ``and`` and ``or``, in
``if``/``elif``/``else``, conditional expressions, ``and`` chains and early jumps.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from typing import Any

from fsdp2_port.codemods import syntax
from fsdp2_port.codemods.assumptions import FSDP1_ONLY_ATTRIBUTES, NOT_FSDP_WRAPPERS
from fsdp2_port.codemods.parsed import ParsedFile

#: The comparisons a version helper's answer is read with.
_COMPARE: dict[type, Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Is: operator.is_,
    ast.IsNot: operator.is_not,
}
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


class TypeTests:
    def __init__(self, parsed: ParsedFile) -> None:
        self.parsed = parsed
        #: A version helper's answers per type (``_type_answers``), None when it is none.
        self._answers: dict[ast.AST, dict[str, object] | None] = {}

    def known_fsdp1(self, expr: ast.AST) -> bool:
        """Known to be an FSDP1 module without knowing which: annotated so, or guarded by an
        FSDP1 type test (``guarded_fsdp1``)."""
        if isinstance(expr, ast.Name):
            for binding in self.parsed.names.bindings_of(expr):
                annotation = getattr(binding.node, "annotation", None)
                if annotation is not None and self._mentions_fsdp1(annotation):
                    return True
        return self.guarded_fsdp1(expr)

    def guarded_fsdp1(self, expr: ast.AST) -> bool:
        """Reached only when ``isinstance(expr, FSDP)`` (or ``hasattr(expr, "<FSDP1-only
        attribute>")``) holds: later in an ``and``, in the body of an ``if`` (or conditional
        expression) whose test asserts it, in the ``else`` of one that denies it, or after
        ``if not isinstance(expr, FSDP): return`` (any jump) in the same block. An FSDP2 model
        never gets there while the test names FSDP1."""
        return self.guarded(expr, self._tests_fsdp1)

    def guarded_other_wrapper(self, expr: ast.AST) -> bool:
        """Reached only where ``isinstance(expr, DDP)`` (DataParallel, any of the wrappers
        that are never FSDP) holds, at the places of ``guarded_fsdp1``: no FSDP model gets
        there, whichever the run builds."""
        return self.guarded(expr, self._tests_other_wrapper)

    def unreached_by_fsdp2(self, expr: ast.AST) -> bool:
        """Reached only where a test rules FSDP2 out for ``expr`` (the places of
        ``guarded_fsdp1``): an FSDP1 type test, ``not isinstance(expr, FSDPModule)``, or a
        version helper of this file (``fsdp_version(expr) == 1``, after ``if fsdp_version(expr)
        == 2: return``). FSDP1, DDP or a plain module may get there, an FSDP2 model never: code
        there holds no model of the run (it is no proof of FSDP1: ``known_fsdp1`` does not
        read it)."""
        return self.guarded(expr, self._excludes_fsdp2)

    def denied_fsdp1(self, expr: ast.AST) -> bool:
        """Reached only where ``isinstance(expr, FSDP)`` fails (the places of
        ``guarded_fsdp1``: the ``else`` of ``if isinstance(expr, FSDP):``). The test migrates
        with the models it sees (F2P005), so no sharded model gets there, before the
        migration or after it."""
        return self.guarded(expr, self._denies_fsdp1)

    def guarded(self, expr: ast.AST, tests: Callable[[ast.AST, str, bool], bool]) -> bool:
        """Whether ``expr`` is reached only where ``tests(test, text, holds)`` says a test's
        outcome implies its property."""
        text = self.parsed.source(expr)
        child: ast.AST = expr
        for ancestor in self.parsed.names.ancestors(expr):
            if isinstance(ancestor, ast.BoolOp) and isinstance(ancestor.op, ast.And):
                earlier = ancestor.values[: ancestor.values.index(child)]  # type: ignore[arg-type]
                if any(tests(v, text, True) for v in earlier):
                    return True
            if isinstance(ancestor, (ast.If, ast.IfExp)):
                body = ancestor.body if isinstance(ancestor, ast.If) else [ancestor.body]
                orelse = ancestor.orelse if isinstance(ancestor, ast.If) else [ancestor.orelse]
                if child in body and tests(ancestor.test, text, True):
                    return True
                if child in orelse and tests(ancestor.test, text, False):
                    return True
            for block in syntax.blocks(ancestor):
                if child in block and any(
                    syntax.rules_out_then_jumps(s, text, tests) for s in block[: block.index(child)]
                ):
                    return True
            if isinstance(ancestor, (*_FUNCTIONS, ast.Lambda, ast.ClassDef)):
                break
            child = ancestor
        return False

    def _mentions_fsdp1(self, annotation: ast.AST) -> bool:
        return any(
            isinstance(n, (ast.Name, ast.Attribute)) and self.parsed.is_fsdp_class(n)
            for n in ast.walk(annotation)
        )

    def _tests_fsdp1(self, test: ast.AST, text: str, holds: bool) -> bool:
        """Whether ``test`` being ``holds`` implies ``isinstance(<text>, FSDP)`` (``holds``
        True) or its negation (False): through ``not``, and ``and`` (``or``) for True (False)."""
        return syntax.implies(test, holds, lambda part, h: self._is_fsdp1(part, text, h))

    def _is_fsdp1(self, test: ast.AST, text: str, holds: bool) -> bool:
        """``isinstance(<text>, FSDP)`` or ``hasattr(<text>, "<FSDP1-only attribute>")``,
        holding."""
        if not (
            holds
            and isinstance(test, ast.Call)
            and isinstance(test.func, ast.Name)
            and len(test.args) == 2
            and self.parsed.source(test.args[0]) == text
        ):
            return False
        if test.func.id == "hasattr":  # hasattr(m, "_fsdp_wrapped_module"): FSDP1 only
            second = test.args[1]
            return isinstance(second, ast.Constant) and second.value in FSDP1_ONLY_ATTRIBUTES
        return test.func.id == "isinstance" and self._mentions_fsdp1(test.args[1])

    def _denies_fsdp1(self, test: ast.AST, text: str, holds: bool) -> bool:
        """Whether ``test`` being ``holds`` implies ``not isinstance(<text>, FSDP)``: a failed
        ``isinstance(<text>, <kinds naming FSDP>)``, through ``not``, ``and`` (``or`` for
        False)."""

        def failed(part: ast.AST, holds: bool) -> bool:
            tested = syntax.isinstance_arguments(part)
            return (
                not holds
                and tested is not None
                and self.parsed.source(tested[0]) == text
                and self._mentions_fsdp1(tested[1])
            )

        return syntax.implies(test, holds, failed)

    def _tests_other_wrapper(self, test: ast.AST, text: str, holds: bool) -> bool:
        """Whether ``test`` being ``holds`` implies ``isinstance(<text>, DDP)``: through ``not``
        and ``and`` (``or`` for False)."""

        def wrapped(part: ast.AST, holds: bool) -> bool:
            tested = syntax.isinstance_arguments(part)
            if not holds or tested is None or self.parsed.source(tested[0]) != text:
                return False
            kinds = tested[1]
            parts = kinds.elts if isinstance(kinds, ast.Tuple) else [kinds]
            qualified = [self.parsed.names.qualified(p) for p in parts]
            return bool(parts) and all(q and q <= NOT_FSDP_WRAPPERS.members for q in qualified)

        return syntax.implies(test, holds, wrapped)

    def _excludes_fsdp2(self, test: ast.AST, text: str, holds: bool) -> bool:
        """Whether ``test`` being ``holds`` implies that ``<text>`` is no FSDP2 module: an
        FSDP1 type test, a denied ``isinstance(<text>, FSDPModule)``, a comparison of a version
        helper's answer (``_type_answers``), through ``not``, ``and`` and ``or``."""

        def excludes(part: ast.AST, holds: bool) -> bool:
            if self._is_fsdp1(part, text, holds):
                return True
            tested = syntax.isinstance_arguments(part)
            if tested is not None and not holds and self.parsed.source(tested[0]) == text:
                return self._fsdp2_only(tested[1])
            return self._version_excludes_fsdp2(part, text, holds)

        return syntax.implies(test, holds, excludes)

    def _fsdp2_only(self, kinds: ast.AST) -> bool:
        """``FSDPModule`` (alone or with more FSDP2 names in a tuple)."""
        parts = kinds.elts if isinstance(kinds, ast.Tuple) else [kinds]
        return bool(parts) and all(self.parsed.fsdp2_name(p) == "FSDPModule" for p in parts)

    def _version_excludes_fsdp2(self, test: ast.AST, text: str, holds: bool) -> bool:
        """``f(<text>) <op> <int>`` for a helper ``f`` of this file that answers a constant per
        type: whether the comparison being ``holds`` rules out the FSDP2 answer."""
        if not (
            isinstance(test, ast.Compare)
            and len(test.ops) == 1
            and isinstance(test.left, ast.Call)
            and isinstance(test.left.func, ast.Name)
            and len(test.left.args) == 1
            and not test.left.keywords
            and self.parsed.source(test.left.args[0]) == text
            and isinstance(test.comparators[0], ast.Constant)
        ):
            return False
        answers = self._type_answers(test.left.func)
        compare = _COMPARE.get(type(test.ops[0]))
        if answers is None or compare is None:
            return False
        try:
            return bool(compare(answers["fsdp2"], test.comparators[0].value)) != holds
        except TypeError:  # a comparison the answers do not support
            return False

    def _type_answers(self, func: ast.Name) -> dict[str, object] | None:
        """What a helper of this file returns for an FSDP2 module and for anything else (and for
        an FSDP1 module when it tests for one), when its body is only ``if isinstance(<param>,
        <FSDP1 class>): return <c>`` / ``elif isinstance(<param>, FSDPModule): return <c>`` /
        ``else: return <c>`` (in any order, as ``if``/``elif`` or as ``if``s that return, then a
        last ``return``)."""
        bindings = self.parsed.names.bindings_of(func)
        if len(bindings) != 1 or bindings[0].kind != "def":
            return None
        function = bindings[0].node
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return None
        if function.decorator_list or len(syntax.positional(function)) != 1:
            return None
        if function in self._answers:
            return self._answers[function]
        parameter = syntax.positional(function)[0]
        body = list(function.body)
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]  # the docstring
        answers: dict[str, object] = {}
        while body:
            statement = body.pop(0)
            if isinstance(statement, ast.Return) and isinstance(statement.value, ast.Constant):
                answers.setdefault("other", statement.value.value)
                break
            if not (
                isinstance(statement, ast.If)
                and len(statement.body) == 1
                and isinstance(statement.body[0], ast.Return)
                and isinstance(statement.body[0].value, ast.Constant)
            ):
                answers = {}
                break
            kind = self._tested_kind(statement.test, parameter)
            if kind is None or kind in answers:
                answers = {}
                break
            answers[kind] = statement.body[0].value.value
            body = [*statement.orelse, *body]
        # FSDP1's test may be gone (--drop-fsdp1-branches deletes it): FSDP1 modules then get
        # the last answer, which changes nothing about FSDP2's
        found = answers if {"fsdp2", "other"} <= set(answers) else None
        self._answers[function] = found
        return found

    def _tested_kind(self, test: ast.AST, parameter: str) -> str | None:
        """``isinstance(<parameter>, <FSDP1 class>)`` -> "fsdp1", ``..., FSDPModule)`` ->
        "fsdp2"; None for any other test."""
        tested = syntax.isinstance_arguments(test)
        if tested is None or not (isinstance(tested[0], ast.Name) and tested[0].id == parameter):
            return None
        kinds = tested[1]
        parts = kinds.elts if isinstance(kinds, ast.Tuple) else [kinds]
        if parts and all(
            isinstance(p, (ast.Name, ast.Attribute)) and self.parsed.is_fsdp_class(p) for p in parts
        ):
            return "fsdp1"
        return "fsdp2" if self._fsdp2_only(kinds) else None
