"""The figures file, ``benchmarks/RESULTS.md``: each benchmark replaces its own blocks.

A block is the text between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->``, each marker on
a line of its own. A benchmark writes the block it names and nothing else: the text around the
blocks (what each table means, how to reproduce it) is written by hand and never touched.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Sequence
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def markers(name: str) -> tuple[str, str]:
    """The start and end marker lines of block ``name``."""
    return f"<!-- {name}:start -->", f"<!-- {name}:end -->"


def replace_block(text: str, name: str, body: str) -> str:
    """``text`` with block ``name`` holding ``body``; the rest of ``text`` byte for byte.

    Raises ValueError unless each marker occurs exactly once, start before end."""
    start, end = markers(name)
    if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
        raise ValueError(
            f"{name}: expected one {start!r} line followed by one {end!r} line in the results file"
        )
    head, rest = text.split(start)
    _, tail = rest.split(end)
    return f"{head}{start}\n{body.strip()}\n{end}{tail}"


def block(text: str, name: str) -> str:
    """The body of block ``name`` in ``text`` (without its markers)."""
    start, end = markers(name)
    return text.split(start, 1)[1].split(end, 1)[0].strip()


def write_block(name: str, body: str, path: Path = RESULTS) -> None:
    """Replace block ``name`` of ``path`` with ``body`` and say so on stdout."""
    text = path.read_text(encoding="utf-8")
    path.write_text(replace_block(text, name, body), encoding="utf-8")
    print(f"wrote block {name!r} of {path}")


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A markdown table; every row has as many cells as ``header``."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        if len(row) != len(header):
            raise ValueError(f"row {row!r} has {len(row)} cells, the header {len(header)}")
        lines.append("| " + " | ".join(str(cell) for cell in row) + " |")
    return "\n".join(lines)


def machine(torch_version: str | None = None) -> str:
    """One line naming where the figures were taken: CPUs, Python, torch when given."""
    parts = [
        f"{os.cpu_count()} CPUs",
        f"{platform.system()} {platform.machine()}",
        f"Python {sys.version_info.major}.{sys.version_info.minor}",
    ]
    if torch_version is not None:
        parts.append(f"torch {torch_version}")
    return "Measured on " + ", ".join(parts) + "."
