"""The finding record: one rewritten or marked site, as ``--format json`` prints it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

Severity = Literal["safe", "review"]
Action = Literal["rewritten", "flagged"]


@dataclass(frozen=True)
class Finding:
    """``line`` and ``column`` (1-based, characters) point at the node in the *input*, as
    ruff and flake8 report them; ``marker_line`` is the line of its marker in the output.

    ``severity`` is ``safe`` only for rewrites that keep what the program computes; every
    ``review`` finding has a marker comment in the output, above its statement.
    """

    path: str
    line: int
    column: int
    code: str
    message: str
    severity: Severity
    action: Action
    marker_line: int | None = None

    def as_dict(self) -> dict[str, object]:
        return asdict(self)

    def as_text(self) -> str:
        marker = f" (marker at line {self.marker_line})" if self.marker_line is not None else ""
        return (
            f"{self.path}:{self.line}:{self.column}: "
            f"{self.code} [{self.severity}, {self.action}] {self.message}{marker}"
        )
