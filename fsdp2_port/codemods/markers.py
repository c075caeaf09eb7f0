"""Marker comments: ``# TODO(fsdp2-port): F2Pnnn ...`` above a statement, ``# fsdp2-port: ignore``.

A marker sits on its own line directly above the statement it is about, at the statement's
indentation, so the statement's own line and any trailing comment stay untouched. At most one
marker per rule code per statement: a second run finds it and adds nothing.
"""

from __future__ import annotations

import re

from fsdp2_port.codemods.text import LineIndex

PREFIX = "# TODO(fsdp2-port): "
_IGNORE = re.compile(r"#\s*fsdp2-port:\s*ignore\s*$")
_NEWLINE = re.compile(r"\r\n|\r|\n")


def text(code: str, message: str) -> str:
    return f"{PREFIX}{code} {message}"


def existing_above(lines: LineIndex, anchor: int) -> dict[str, int]:
    """Rule code -> offset of each marker line directly above the line starting at ``anchor``."""
    found: dict[str, int] = {}
    line = lines.line_of(anchor) - 1 if anchor < len(lines.text) else len(lines.lines)
    while line >= 1:
        content = lines.lines[line - 1].strip()
        if not content.startswith(PREFIX):
            break
        found.setdefault(content[len(PREFIX) :].split(" ", 1)[0], lines.starts[line - 1])
        line -= 1
    return found


def ignored_lines(code: str) -> frozenset[int]:
    """1-based numbers of the lines that end in ``# fsdp2-port: ignore``."""
    if "fsdp2-port" not in code:
        return frozenset()
    return frozenset(
        number
        for number, line in enumerate(_NEWLINE.split(code), start=1)
        if "fsdp2-port" in line and _IGNORE.search(line)
    )
