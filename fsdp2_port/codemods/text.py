"""Source text as the codemods see it: positions, edits, and their application.

- Lines break where CPython's tokenizer breaks them (``\\r\\n``, ``\\r``, ``\\n``), so ``ast``
  line numbers and ours agree on every file, CRLF and old-Mac endings included.
- ``ast`` columns are UTF-8 byte offsets; findings report character columns (1-based), as
  ruff and flake8 do. ``LineIndex`` converts between the two and to string offsets.
- An ``Edit`` replaces ``text[start:end]``. ``apply`` refuses overlapping edits instead of
  guessing an order: two rules touching the same characters is a bug, reported as such.
  Everything outside the edits is kept byte for byte: that is what "faithful text" means.
"""

from __future__ import annotations

import ast
import bisect
import itertools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")


def split_lines(text: str) -> list[str]:
    """Lines with their endings, split where CPython's tokenizer splits them."""
    return _LINE.findall(text)


class LineIndex:
    """Offsets of line starts in one text, for ``ast`` positions <-> string offsets."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.lines = split_lines(text)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))

    def offset(self, lineno: int, byte_col: int) -> int:
        """String offset of an ``ast`` position (1-based line, UTF-8 byte column)."""
        start = self.starts[lineno - 1]
        line = self.lines[lineno - 1] if lineno - 1 < len(self.lines) else ""
        if line.isascii():
            return start + byte_col
        return start + len(line.encode("utf-8")[:byte_col].decode("utf-8", "replace"))

    def start(self, node: ast.AST) -> int:
        return self.offset(node.lineno, node.col_offset)  # type: ignore[attr-defined]

    def end(self, node: ast.AST) -> int:
        return self.offset(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]

    def span(self, node: ast.AST) -> tuple[int, int]:
        return self.start(node), self.end(node)

    def source(self, node: ast.AST) -> str:
        start, end = self.span(node)
        return self.text[start:end]

    def line_of(self, offset: int) -> int:
        """1-based line number of a string offset (the last line for the end of the text)."""
        return max(1, min(bisect.bisect_right(self.starts, offset), len(self.lines)))

    def column(self, offset: int) -> int:
        """1-based character column of a string offset."""
        return offset - self.starts[self.line_of(offset) - 1] + 1

    def line_start(self, offset: int) -> int:
        return self.starts[self.line_of(offset) - 1]

    def line_end(self, offset: int) -> int:
        """Offset just after the line ending of the line that holds ``offset``."""
        return self.starts[min(self.line_of(offset), len(self.starts) - 1)]

    def indent_at(self, offset: int) -> str:
        """The leading whitespace of the line that holds ``offset``."""
        start = self.line_start(offset)
        line = self.text[start : self.line_end(offset)]
        return line[: len(line) - len(line.lstrip(" \t\f"))]

    def newline(self) -> str:
        """The file's own line ending (its first one; ``\\n`` for a one-line file)."""
        for line in self.lines:
            stripped = line.rstrip("\r\n")
            if stripped != line:
                return line[len(stripped) :]
        return "\n"


@dataclass(frozen=True, order=True)
class Edit:
    """Replace ``text[start:end]`` with ``replacement`` (an insertion when start == end)."""

    start: int
    end: int
    replacement: str


class OverlappingEdits(ValueError):
    """Two edits touch the same characters: a bug in the rules, never silently resolved."""


def without_subsumed(edits: Sequence[Edit]) -> list[Edit]:
    """``edits`` less the deletions that fall inside another edit's replaced span (a block's
    dedent of a line inside a call that another rewrite replaces whole): their text is gone
    either way. Everything else is kept, so real collisions still raise. O(n log n)."""
    spans = sorted({(e.start, e.end) for e in edits if e.end > e.start})
    starts = [s for s, _ in spans]
    reach = list(itertools.accumulate((e for _, e in spans), max))  # furthest end so far
    longest: dict[int, int] = {}
    for s, e in spans:
        longest[s] = max(longest.get(s, e), e)

    def inside(edit: Edit) -> bool:
        before = bisect.bisect_left(starts, edit.start)  # spans starting strictly earlier
        if before and reach[before - 1] >= edit.end:
            return True
        return longest.get(edit.start, -1) > edit.end  # same start, reaching further

    return [e for e in edits if not (e.replacement == "" and e.end > e.start and inside(e))]


def apply(text: str, edits: Iterable[Edit]) -> str:
    """``text`` with every edit made. Insertions at one offset keep the order given."""
    return apply_tracked(text, list(edits))[0]


def apply_tracked(text: str, edits: Sequence[Edit]) -> tuple[str, list[int]]:
    """``apply``, plus where each edit's replacement starts in the new text (in input order)."""
    ordered = sorted(range(len(edits)), key=lambda i: (edits[i].start, edits[i].end, i))
    out = []
    starts = [0] * len(edits)
    position = 0
    length = 0
    for index in ordered:
        edit = edits[index]
        if edit.start < position:
            raise OverlappingEdits(f"edits overlap at offset {edit.start}: {edit!r}")
        kept = text[position : edit.start]
        out.append(kept)
        length += len(kept)
        starts[index] = length
        out.append(edit.replacement)
        length += len(edit.replacement)
        position = edit.end
    out.append(text[position:])
    return "".join(out), starts


def forward(offset: int, edits: Sequence[Edit]) -> int:
    """Where ``offset`` of the old text lands in the new one (edits ending at or before it
    count; ``offset`` must not lie inside a replaced range)."""
    return offset + sum(
        len(e.replacement) - (e.end - e.start)
        for e in edits
        if (e.end <= offset and e.start < offset) or e.end < offset
    )


def back(offset: int, edits: Sequence[Edit], starts: Sequence[int]) -> int:
    """The old-text offset of a new-text offset that lies outside every replacement."""
    shift = 0
    for edit, start in zip(edits, starts):
        if start + len(edit.replacement) <= offset and not (
            edit.start == edit.end and start == offset
        ):
            shift += len(edit.replacement) - (edit.end - edit.start)
    return offset - shift
