"""``flow.may_reach``: which bindings of ``x`` the read marked ``use(x)`` can see. Each case
binds ``x`` to ``A`` (the binding asked about) and perhaps to other values; the answer is
checked against running the code on every input that matters."""

from __future__ import annotations

import ast
import contextlib
import itertools
import sys
import textwrap

import pytest

from fsdp2_port.codemods import flow
from fsdp2_port.codemods.names import Names
from fsdp2_port.codemods.text import LineIndex

CASES = {
    "overwritten in both branches": (
        """
        x = "A"
        if c1:
            x = "B"
        else:
            x = "C"
        use(x)
        """
    ),
    "overwritten in one branch": (
        """
        x = "A"
        if c1:
            x = "B"
        use(x)
        """
    ),
    "the other branch leaves": (
        """
        x = "A"
        for _ in range(1):
            if c1:
                x = "B"
            elif c2:
                continue
            else:
                return None
            use(x)
        """
    ),
    "nested: the read in a branch that binds first": (
        """
        x = "A"
        if c1:
            use(x)
        else:
            x = "B"
            if c2:
                use(x)
        """
    ),
    "bound in a nested branch, then again in its branch": (
        """
        if c1:
            if c2:
                x = "A"
            x = "B"
        else:
            x = "C"
        use(x)
        """
    ),
    "bound in a branch, a jump before it is bound again": (
        """
        for _ in range(1):
            if c1:
                x = "A"
                if c2:
                    break
                x = "B"
            else:
                x = "C"
            use(x)
        use(x)
        """
    ),
    "a loop brings it back": (
        """
        x = "B"
        for _ in range(2):
            use(x)
            x = "A"
        """
    ),
    "a loop, bound again before the read": (
        """
        for _ in range(2):
            x = "B"
            use(x)
            x = "A"
        """
    ),
    "in a with block": (
        """
        x = "A"
        with ctx():
            x = "B"
        use(x)
        """
    ),
    "bound again in a tuple": (
        """
        x = "A"
        x, y = "B", 1
        use(x)
        """
    ),
    "after the use only": (
        """
        use(x)
        x = "A"
        """
    ),
}


def _source(code: str) -> str:
    return "def f(c1, c2, use, ctx, x=None):\n" + textwrap.indent(code, "    ") + "\n"


def _run(code: str, c1: bool, c2: bool) -> set[tuple[int, str]]:
    """(line of the read, value it saw) for every read one call runs."""
    seen: set[tuple[int, str]] = set()

    def use(value: str) -> None:
        seen.add((sys._getframe(1).f_lineno, value))

    namespace: dict = {}
    exec(compile(_source(code), "<case>", "exec"), namespace)
    namespace["f"](c1, c2, use, contextlib.nullcontext)
    return seen


def _reaches(code: str) -> dict[int, bool]:
    """``may_reach`` of the binding ``x = "A"`` for each read ``use(x)``, by its line."""
    source = _source(code)
    tree = ast.parse(source)
    names, lines = Names(tree), LineIndex(source)
    target = next(
        t
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and getattr(node.value, "value", None) == "A"
        for t in node.targets
    )
    return {
        node.lineno: flow.may_reach(names, lines, target, node.args[0])
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "use"
    }


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_read_that_can_see_the_binding_is_never_denied(name: str) -> None:
    """Soundness: wherever running the code shows ``A`` at a read, ``may_reach`` says it may."""
    code = textwrap.dedent(CASES[name])
    answers = _reaches(code)
    for c1, c2 in itertools.product((False, True), repeat=2):
        for line, value in _run(code, c1, c2):
            assert value != "A" or answers[line], (name, c1, c2, line)


def test_proofs_where_every_path_binds_again() -> None:
    """Precision: the cases where no run shows ``A`` at a read are denied."""
    denied = {
        name for name, code in CASES.items() if not any(_reaches(textwrap.dedent(code)).values())
    }
    assert denied == {
        "overwritten in both branches",
        "the other branch leaves",
        "in a with block",
        "bound again in a tuple",
        "after the use only",
        "a loop, bound again before the read",
        "bound in a nested branch, then again in its branch",
    }
    partly = _reaches(textwrap.dedent(CASES["nested: the read in a branch that binds first"]))
    assert sorted(partly.items()) == [(5, True), (9, False)]


#: A parameter ``x`` (called with ``"A"``): whether its entry value may reach ``use(x)``.
PARAMETER_CASES = {
    "bound again before the read": ("x = 'B'\nuse(x)", False),
    "bound again in one branch": ("if c1:\n    x = 'B'\nuse(x)", True),
    "bound again in both branches": ("if c1:\n    x = 'B'\nelse:\n    x = 'C'\nuse(x)", False),
    "bound again after the read": ("use(x)\nx = 'B'", True),
    "a loop that binds after the read": ("for _ in range(2):\n    use(x)\n    x = 'B'", True),
    "read in a nested function": ("x = 'B'\ndef g():\n    use(x)\ng()", True),
}


@pytest.mark.parametrize("name", sorted(PARAMETER_CASES))
def test_a_parameter_reaches_until_every_path_binds_it_again(name: str) -> None:
    """A parameter is bound on entry: denied only where every path binds it again, and (by
    running the function) never where the entry value is what the read sees. The nested
    function's read is a closure's: always allowed, though this one sees ``B``."""
    code, expected = PARAMETER_CASES[name]
    source = "def f(c1, use, x):\n" + textwrap.indent(code, "    ") + "\n"
    tree = ast.parse(source)
    names, lines = Names(tree), LineIndex(source)
    parameter = next(a for a in ast.walk(tree) if isinstance(a, ast.arg) and a.arg == "x")
    reads = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "use"
    ]
    answers = {flow.may_reach(names, lines, parameter, read.args[0]) for read in reads}
    assert answers == {expected}
    namespace: dict = {}
    exec(compile(source, "<case>", "exec"), namespace)
    for c1 in (False, True):
        seen: list[str] = []
        namespace["f"](c1, seen.append, "A")
        assert "A" not in seen or expected, (name, c1)


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("x = 1\nf()\nuse(x)", ["f()", "use(x)"]),
        ("with c():\n    x = 1\n    f()\ng()\nuse(x)", ["f()", "g()", "use(x)"]),
        ("x = 1\nif c1:\n    use(x)", ["if c1:\n    use(x)"]),
        ("if c1:\n    x = 1\nuse(x)", None),  # the if may not bind it
        ("use(x)\nx = 1", None),
    ],
)
def test_between_lists_what_a_run_passes_from_a_statement_to_a_read(
    code: str, expected: list[str] | None
) -> None:
    found = flow.between(*_binding_and_read(code))
    assert (None if found is None else [ast.unparse(s) for s in found]) == expected


def test_between_steps_out_of_a_branch_only_when_asked():
    """A run that takes the branch passes the rest of it, then what follows the ``if``."""
    names, statement, read = _binding_and_read(
        "if c1:\n    x = 1\n    f()\nelse:\n    g()\nh()\nuse(x)"
    )
    assert flow.between(names, statement, read) is None
    found = flow.between(names, statement, read, branches=True)
    assert [ast.unparse(s) for s in found or ()] == ["f()", "h()", "use(x)"]


def _binding_and_read(code: str) -> tuple[Names, ast.Assign, ast.expr]:
    """The names of ``code``, its assignment and the argument of its ``use(...)``."""
    tree = ast.parse(code)
    statement = next(n for n in ast.walk(tree) if isinstance(n, ast.Assign))
    read = next(
        n.args[0]
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "use"
    )
    return Names(tree), statement, read
