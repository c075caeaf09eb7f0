"""Marker comments: ``# TODO(fsdp2-port): F2Pnnn ...`` above a statement, ``# fsdp2-port: ignore``.

A marker sits on its own line directly above the statement it is about (in the statement's
``leading_lines``), so the statement's own line and any trailing comment stay untouched. At most
one marker per rule code per statement: a second run finds it and adds nothing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import libcst as cst

PREFIX = "# TODO(fsdp2-port): "
_IGNORE = re.compile(r"#\s*fsdp2-port:\s*ignore\s*$")
_NEWLINE = re.compile(r"\r\n|\r|\n")  # libcst's line breaks (str.splitlines has more)


def text(code: str, message: str) -> str:
    return f"{PREFIX}{code} {message}"


def codes(leading_lines: Sequence[cst.EmptyLine]) -> set[str]:
    """Rule codes of the markers already above a statement."""
    found = set()
    for line in leading_lines:
        if line.comment is not None and line.comment.value.startswith(PREFIX):
            found.add(line.comment.value[len(PREFIX) :].split(" ", 1)[0])
    return found


def add(statement: cst.CSTNode, code: str, message: str) -> cst.CSTNode:
    """``statement`` with a marker for ``code`` above it, unless one is there already."""
    lines = list(getattr(statement, "leading_lines", ()))
    if code in codes(lines):
        return statement
    marker = cst.EmptyLine(indent=True, comment=cst.Comment(text(code, message)))
    return statement.with_changes(leading_lines=[*lines, marker])


def ignored_lines(code: str) -> frozenset[int]:
    """1-based numbers of the lines that end in ``# fsdp2-port: ignore``."""
    if "fsdp2-port" not in code:
        return frozenset()
    return frozenset(
        number
        for number, line in enumerate(_NEWLINE.split(code), start=1)
        if "fsdp2-port" in line and _IGNORE.search(line)
    )
