"""The finding record: one rewritten or flagged site, as printed by ``--format json``."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

Severity = Literal["safe", "review"]
Action = Literal["rewritten", "flagged"]


@dataclass(frozen=True)
class Finding:
    """``line`` and ``column`` (both 1-based) point into the migrated output.

    ``severity`` is ``safe`` only for rewrites that keep what the program computes; every
    ``review`` finding also has a marker comment in the output, above its statement.
    """

    path: str
    line: int
    column: int
    code: str
    message: str
    severity: Severity
    action: Action

    def as_dict(self) -> dict[str, object]:
        return asdict(self)

    def as_text(self) -> str:
        return (
            f"{self.path}:{self.line}:{self.column}: "
            f"{self.code} [{self.severity}, {self.action}] {self.message}"
        )
