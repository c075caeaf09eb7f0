"""Dispatches between FSDP versions: an ``if``/``elif`` chain with an FSDP1 constructor in one
branch and FSDP2 in another (``if cfg.strategy == "fsdp": FSDP(...) elif ... "fsdp2":
fully_shard(...)``).

Such code offers both versions on purpose (a library with a config switch): its FSDP1 branch
is kept as it is unless the run asks to drop FSDP1 branches. A branch counts as FSDP2 when it
reads one of FSDP2's names (``fully_shard``, ``FSDPModule``, ``MixedPrecisionPolicy``,
``CPUOffloadPolicy``, ``OffloadPolicy``), from torch or re-exported by another module under
that name (verl imports them from its ``fsdp_utils``); a type dispatch (``isinstance(m,
FSDP)``) builds nothing and is F2P005's.
"""

from __future__ import annotations

import ast

from fsdp2_port.codemods.analysis import FileAnalysis
from fsdp2_port.codemods.assumptions import FSDP2_NAMES


def in_fsdp1_branch(analysis: FileAnalysis, call: ast.Call) -> bool:
    """Whether ``call`` lies in a branch of an ``if`` chain another branch of which uses
    FSDP2 (at any depth of ``if``s around it, inside its function)."""
    node: ast.AST = call
    while True:
        parent = analysis.names.parent.get(node)
        if parent is None or isinstance(
            parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
        ):
            return False
        if isinstance(parent, ast.If) and node is not parent.test:
            branches = _chain(analysis, parent)
            # None: ``node`` is an ``elif`` (its own level asked already)
            mine = next((b for b in branches if any(node is s for s in b)), None)
            if mine is not None and any(
                _uses_fsdp2(analysis, b) for b in branches if b is not mine
            ):
                return True
        node = parent


def _chain(analysis: FileAnalysis, statement: ast.If) -> list[list[ast.stmt]]:
    """The branches of the whole ``if``/``elif``/``else`` chain ``statement`` belongs to."""
    top = statement
    while True:
        parent = analysis.names.parent.get(top)
        if isinstance(parent, ast.If) and parent.orelse == [top] and analysis.is_elif(top):
            top = parent
        else:
            break
    branches: list[list[ast.stmt]] = []
    current: ast.If | None = top
    while current is not None:
        branches.append(current.body)
        rest = current.orelse
        if len(rest) == 1 and isinstance(rest[0], ast.If) and analysis.is_elif(rest[0]):
            current = rest[0]
        else:
            if rest:
                branches.append(rest)
            current = None
    return branches


def _uses_fsdp2(analysis: FileAnalysis, statements: list[ast.stmt]) -> bool:
    return any(
        _is_fsdp2(analysis, node) for statement in statements for node in ast.walk(statement)
    )


def _is_fsdp2(analysis: FileAnalysis, node: ast.AST) -> bool:
    if analysis.fsdp2_name(node) is not None:
        return True
    if not isinstance(node, (ast.Name, ast.Attribute)):
        return False
    return any(q.rsplit(".", 1)[-1] in FSDP2_NAMES for q in analysis.names.qualified(node))
