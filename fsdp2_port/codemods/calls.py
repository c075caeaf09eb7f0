"""Reading call arguments and editing them in place, one argument's text at a time.

An argument's text (its value, its ``name=``, the comment after its comma) moves or goes as
a unit; the rest of the call, its layout and its other comments, stay as they were.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass

from fsdp2_port.codemods.text import Edit, LineIndex


@dataclass(frozen=True)
class Argument:
    """One argument of a call: its node (the value, or the ``keyword``/``Starred``)."""

    node: ast.AST
    value: ast.expr
    keyword: str | None
    #: ``*args`` or ``**kwargs``.
    star: bool


def arguments(call: ast.Call) -> list[Argument]:
    """The arguments in source order (positional and keyword arguments can interleave)."""
    found = [
        Argument(a, a.value if isinstance(a, ast.Starred) else a, None, isinstance(a, ast.Starred))
        for a in call.args
    ]
    found += [Argument(k, k.value, k.arg, k.arg is None) for k in call.keywords]
    return sorted(found, key=lambda a: (a.node.lineno, a.node.col_offset))  # type: ignore[attr-defined]


def bind(call: ast.Call, parameters: Sequence[str]) -> dict[str, Argument] | None:
    """Parameter name -> argument; None with ``*args``/``**kwargs`` or an unknown keyword."""
    bound: dict[str, Argument] = {}
    positional = 0
    for argument in arguments(call):
        if argument.star:
            return None
        if argument.keyword is None:
            if positional >= len(parameters):
                return None
            bound[parameters[positional]] = argument
            positional += 1
        elif argument.keyword in parameters and argument.keyword not in bound:
            bound[argument.keyword] = argument
        else:
            return None
    return bound


def edit_arguments(
    lines: LineIndex, call: ast.Call, drop: set[ast.AST], replace: dict[ast.AST, str]
) -> list[Edit]:
    """Edits that delete the arguments in ``drop`` and replace those in ``replace``."""
    every = [a.node for a in arguments(call)]
    edits = [Edit(*lines.span(node), replace[node]) for node in every if node in replace]
    return edits + remove_items(lines, every, drop, lines.end(call))


def remove_items(lines: LineIndex, items: list[ast.AST], drop: set, limit: int) -> list[Edit]:
    """Edits that delete ``drop`` from a comma-separated list (call arguments, imported names)
    that ends before ``limit``.

    Consecutive deleted items go as one run with their separators: up to the next kept item,
    or, at the end of the list, from the last kept one. A run that stands on lines of its own
    goes with those whole lines (the comments on and between them included), so the rest
    keeps its layout; the lines between the run and the next kept item (comments about that
    item) stay.
    """
    text = lines.text
    edits = []
    index = 0
    while index < len(items):
        if items[index] not in drop:
            index += 1
            continue
        last = index
        while last + 1 < len(items) and items[last + 1] in drop:
            last += 1
        start = lines.start(items[index])
        starts_line = not text[lines.line_start(start) : start].strip()
        if last + 1 < len(items):
            following = lines.start(items[last + 1])
            if starts_line and not text[lines.line_start(following) : following].strip():
                after = _skip_comma(text, lines.end(items[last]), limit)
                edits.append(Edit(lines.line_start(start), lines.line_end(after - 1), ""))
            else:
                edits.append(Edit(start, following, ""))
        else:
            end = lines.end(items[last])
            after = _skip_comma(text, end, limit)
            line_end = lines.line_end(max(after - 1, end))
            rest = text[after:line_end].strip()
            own_lines = starts_line and (not rest or rest.startswith("#"))
            if own_lines and index > 0 and text[end:after].strip() == ",":
                edits.append(Edit(lines.line_start(start), line_end, ""))
            elif index > 0:
                edits.append(Edit(lines.end(items[index - 1]), end, ""))
            else:
                edits.append(Edit(start, after, ""))
        index = last + 1
    return edits


def _skip_comma(text: str, end: int, limit: int) -> int:
    """The offset after the comma (and blanks) that follow an argument, if there is one."""
    position = end
    while position < limit and text[position] in " \t":
        position += 1
    if position < limit and text[position] == ",":
        position += 1
        while position < limit and text[position] in " \t":
            position += 1
    return position


def is_none(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def literal_bool(node: ast.AST) -> bool | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, bool):
        return node.value
    return None


def is_simple(node: ast.AST) -> bool:
    """Names, attribute chains and constants: the same value if evaluated twice."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, (ast.Name, ast.Constant))


def parameter_for(
    parameters: ast.arguments, position: int | None, keyword: str | None
) -> ast.arg | None:
    """The parameter of a ``def`` that the argument at ``position`` (or by ``keyword``) fills;
    None where ``*args``/``**kwargs`` would take it or none matches."""
    positional = [*parameters.posonlyargs, *parameters.args]
    if position is not None:
        return positional[position] if position < len(positional) else None
    named = [*parameters.args, *parameters.kwonlyargs]
    return next((p for p in named if p.arg == keyword), None)


def condition(lines: LineIndex, fn: ast.expr, argument: str) -> str | None:
    """A one-argument predicate ``fn`` as the condition it tests on ``argument`` (an
    expression's text): a call of a named function, or a lambda's body with its parameter
    replaced (the lambda called, when its body rebinds names or spans lines); None for
    anything else."""
    if is_simple(fn) and not isinstance(fn, ast.Constant):
        return f"{lines.source(fn)}({argument})"
    if not isinstance(fn, ast.Lambda) or len(fn.args.args) != 1 or _other_parameters(fn):
        return None
    called = f"({lines.source(fn)})({argument})"
    if any(
        isinstance(n, (ast.Lambda, ast.comprehension, ast.NamedExpr)) for n in ast.walk(fn.body)
    ):
        return called
    parameter = fn.args.args[0].arg
    reads = sorted(
        (n for n in ast.walk(fn.body) if isinstance(n, ast.Name) and n.id == parameter),
        key=lambda n: (n.lineno, n.col_offset),
    )
    text = lines.source(fn.body)
    base = lines.start(fn.body)
    for read in reversed(reads):
        start, end = lines.start(read) - base, lines.end(read) - base
        text = text[:start] + argument + text[end:]
    return called if "\n" in text else f"({text})"


def _other_parameters(fn: ast.Lambda) -> bool:
    parameters = fn.args
    return bool(
        parameters.posonlyargs
        or parameters.kwonlyargs
        or parameters.vararg
        or parameters.kwarg
        or parameters.defaults
    )
