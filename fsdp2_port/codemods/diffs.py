"""Unified diffs of a file's old and new text, as ``diff -u`` writes them, aligned first on
the lines that occur once in each text (patience anchors)."""

from __future__ import annotations

import bisect
import difflib
from collections import Counter
from collections.abc import Sequence

from fsdp2_port.codemods.text import split_lines


def unified_diff(old: str, new: str, path: str) -> str:
    """A unified diff (three lines of context), aligned first on the lines that occur once in
    each text: time grows with the changed regions, not with the square of the file."""
    before, after = (path, path) if path.startswith("/") else (f"a/{path}", f"b/{path}")
    a, b = split_lines(old), split_lines(new)
    out: list[str] = []
    for group in _AnchoredMatcher(None, a, b).get_grouped_opcodes(3):
        if not out:
            out += [f"--- {before}\n", f"+++ {after}\n"]
        first, last = group[0], group[-1]
        out.append(f"@@ -{_range(first[1], last[2])} +{_range(first[3], last[4])} @@\n")
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                out += [" " + line for line in a[i1:i2]]
                continue
            out += ["-" + line for line in a[i1:i2]]
            out += ["+" + line for line in b[j1:j2]]
    return "".join(
        line if line.endswith(("\n", "\r")) else line + "\n\\ No newline at end of file\n"
        for line in out
    )


def _range(start: int, stop: int) -> str:
    """``start,length`` of a hunk, 1-based, as ``diff -u`` writes it."""
    length = stop - start
    if length == 1:
        return f"{start + 1}"
    return f"{start + 1 if length else start},{length}"


class _AnchoredMatcher(difflib.SequenceMatcher[str]):
    """difflib's matcher, run only between lines unique to both sequences (patience anchors,
    in order): what it compares pairwise stays as small as the regions between them."""

    a: Sequence[str]
    b: Sequence[str]
    matching_blocks: list[difflib.Match] | None

    def get_matching_blocks(self) -> list[difflib.Match]:
        if self.matching_blocks is None:
            a, b = self.a, self.b
            blocks: list[tuple[int, int, int]] = []
            i0 = j0 = 0
            for i, j in [*_anchors(a, b), (len(a), len(b))]:
                gap = difflib.SequenceMatcher(None, a[i0:i], b[j0:j], autojunk=False)
                blocks += [(i0 + x, j0 + y, n) for x, y, n in gap.get_matching_blocks() if n]
                if i < len(a):
                    blocks.append((i, j, 1))
                i0, j0 = i + 1, j + 1
            merged: list[tuple[int, int, int]] = []
            for x, y, n in blocks:
                if (
                    merged
                    and merged[-1][0] + merged[-1][2] == x
                    and merged[-1][1] + merged[-1][2] == y
                ):
                    merged[-1] = (merged[-1][0], merged[-1][1], merged[-1][2] + n)
                else:
                    merged.append((x, y, n))
            merged.append((len(a), len(b), 0))
            self.matching_blocks = [difflib.Match(*m) for m in merged]
        return self.matching_blocks


def _anchors(a: Sequence[str], b: Sequence[str]) -> list[tuple[int, int]]:
    """Pairs (i, j) of lines that occur exactly once in ``a`` and once in ``b``, equal, the
    longest run of them increasing in both (patience sorting)."""
    count_a = Counter(a)
    count_b = Counter(b)
    where_b = {line: j for j, line in enumerate(b) if count_b[line] == 1}
    pairs = [
        (i, where_b[line]) for i, line in enumerate(a) if count_a[line] == 1 and line in where_b
    ]
    tails: list[int] = []  # tails[k]: index in pairs of the smallest end of a run of length k+1
    ends: list[int] = []  # ends[k]: that pair's j
    back: list[int] = []
    for index, (_, j) in enumerate(pairs):
        k = bisect.bisect_left(ends, j)
        back.append(tails[k - 1] if k else -1)
        if k == len(tails):
            tails.append(index)
            ends.append(j)
        else:
            tails[k], ends[k] = index, j
    run: list[tuple[int, int]] = []
    at = tails[-1] if tails else -1
    while at >= 0:
        run.append(pairs[at])
        at = back[at]
    return run[::-1]
