"""What F2P008 knows of the file it analyses (``Walk``), and the names its topics share."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from fsdp2_port.codemods.analysis import FileAnalysis

#: The code of every site of the rule.
CODE = "F2P008"
_FSDP = "FullyShardedDataParallel."


def _expression_call(statement: ast.stmt) -> ast.Call | None:
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        return statement.value
    return None


def _block_of(analysis: FileAnalysis, statement: ast.stmt) -> list[ast.stmt] | None:
    parent = analysis.names.parent.get(statement)
    for field in ("body", "orelse", "finalbody"):
        block = getattr(parent, field, None)
        if isinstance(block, list) and statement in block:
            return block
    return None


@dataclass
class Walk:
    """One file under analysis: ``analysis``; ``handled``, the calls a site already covers;
    ``persistent``, whether the file sets a state-dict type that outlives a block
    (``set_state_dict_type``)."""

    analysis: FileAnalysis
    handled: set[ast.AST]
    persistent: bool
