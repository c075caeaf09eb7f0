"""Reading and rebuilding call arguments while keeping each argument's own formatting."""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst


def bind(call: cst.Call, parameters: Sequence[str]) -> dict[str, cst.Arg] | None:
    """Map parameter names to the call's arguments; None if ``*args``/``**kwargs`` or unknown."""
    bound: dict[str, cst.Arg] = {}
    for index, arg in enumerate(call.args):
        if arg.star:
            return None
        if arg.keyword is None:
            if index >= len(parameters):
                return None
            bound[parameters[index]] = arg
        else:
            bound[arg.keyword.value] = arg
    if any(name not in parameters for name in bound):
        return None
    return bound


def as_keyword(name: str, arg: cst.Arg) -> cst.Arg:
    """``arg`` passed as ``name=value``, keeping its comma and surrounding whitespace."""
    if arg.keyword is not None and arg.keyword.value == name:
        return arg
    equal = arg.equal if isinstance(arg.equal, cst.AssignEqual) else _EQUAL
    return arg.with_changes(keyword=cst.Name(name), equal=equal)


def new_keyword(name: str, value: cst.BaseExpression) -> cst.Arg:
    return cst.Arg(value=value, keyword=cst.Name(name), equal=_EQUAL)


def rebuild(original: Sequence[cst.Arg], kept: Sequence[cst.Arg]) -> list[cst.Arg]:
    """``kept`` as the new argument list: the last one takes the original last one's ending.

    That ending (trailing comma or not, whitespace before the closing parenthesis) is what
    keeps a multi-line call's closing parenthesis where it was; a comment at the end of the
    new last argument's line stays.
    """
    kept = list(kept)
    if not kept or not original:
        return kept
    for i, arg in enumerate(kept[:-1]):
        if arg.comma is cst.MaybeSentinel.DEFAULT:
            kept[i] = arg.with_changes(comma=_COMMA)
    last, end = original[-1], kept[-1]
    if end is not last:
        kept[-1] = end.with_changes(
            comma=_ending(end.comma, last.comma), whitespace_after_arg=last.whitespace_after_arg
        )
    return kept


def insert_after(args: Sequence[cst.Arg], index: int, new: cst.Arg) -> list[cst.Arg]:
    """Insert ``new`` after ``args[index]``, which lends it its separator."""
    args = list(args)
    anchor = args[index]
    if index == len(args) - 1:
        new = new.with_changes(comma=anchor.comma, whitespace_after_arg=anchor.whitespace_after_arg)
        anchor = anchor.with_changes(comma=_COMMA, whitespace_after_arg=cst.SimpleWhitespace(""))
    else:
        new = new.with_changes(comma=_without_comment(anchor.comma))
    args[index] = anchor
    args.insert(index + 1, new)
    return args


def _ending(own, last):
    """``last`` (the original list's ending), keeping the comment after ``own``'s comma."""
    if isinstance(own, cst.Comma) and isinstance(own.whitespace_after, cst.ParenthesizedWhitespace):
        if isinstance(last, cst.Comma) and isinstance(
            last.whitespace_after, cst.ParenthesizedWhitespace
        ):
            return last.with_changes(
                whitespace_after=last.whitespace_after.with_changes(
                    first_line=own.whitespace_after.first_line
                )
            )
    return last


def _without_comment(comma):
    if isinstance(comma, cst.Comma) and isinstance(
        comma.whitespace_after, cst.ParenthesizedWhitespace
    ):
        return comma.with_changes(
            whitespace_after=comma.whitespace_after.with_changes(
                first_line=cst.TrailingWhitespace()
            )
        )
    return comma


def literal_bool(expr: cst.BaseExpression) -> bool | None:
    if isinstance(expr, cst.Name) and expr.value in ("True", "False"):
        return expr.value == "True"
    return None


def is_none(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "None"


def is_simple(expr: cst.BaseExpression) -> bool:
    """Names, attribute chains and literals: safe to evaluate twice."""
    if isinstance(expr, cst.Attribute):
        return is_simple(expr.value)
    return isinstance(expr, (cst.Name, cst.Integer, cst.Float, cst.SimpleString))


_EQUAL = cst.AssignEqual(
    whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")
)
_COMMA = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
