"""F2P001: imports nothing reads any more, once per file, after every other clean-up.

An FSDP1 import that nothing reads any more (names, string annotations, ``__all__``) is
removed from a file the migration changes, and so is any other the migration left unread (one
the input already left unread stays): the other names of its statement keep their text and
comments; a statement left empty goes with its lines (``pass`` if it was alone in its block).
In a package's ``__init__.py`` only imports inside functions go: its own are its exports.
Where new imports go: ``fsdp2_port.codemods.imports``.
"""

from __future__ import annotations

import ast
import re
from typing import ClassVar

from fsdp2_port.codemods import fsdp1, imports, markers
from fsdp2_port.codemods.assumptions import FSDP1_MODULES
from fsdp2_port.codemods.names import Names
from fsdp2_port.codemods.rules.base import Code, Fixes, Tidying

_FSDP1_MODULES = frozenset(
    {fsdp1.PACKAGE, *(f"{fsdp1.PACKAGE}.{module}" for module in FSDP1_MODULES)}
)


class ImportsRule:
    """Runs once per file, on the text the other clean-ups (F2P012, F2P013) leave."""

    STAGE: ClassVar[str] = "after_fixes"
    CODE: ClassVar[str] = "F2P001"
    CODES: ClassVar[dict[str, Code]] = {
        "F2P001": Code(
            summary="FSDP1 imports left unused are removed; FSDP2 imports are added where needed",
            topic="imports",
            rewritten=(
                "FSDP1 imports nothing reads any more are removed from the files the migration "
                "changes (their statement's other names, comments and layout kept); new imports "
                "go right after the statement that imported what they replace (a lazy import "
                "stays lazy), once; in a "
                "package's `__init__.py` only imports inside functions are removed (its own are "
                "its exports)"
            ),
            marked="—",
            proven_by=(
                "tests/test_plain_rewrite.py::test_plain_rewrite_trains_as_fsdp1_did",
                "tests/test_migrated_scripts.py::test_the_migration_trains_like_the_original",
                "tests/test_multifile_programs.py::test_the_migrated_program_trains_like_the_original",
                "tests/test_type_tests_and_scaler.py::test_type_tests_configs_and_scaler_run_as_fsdp1_did",
            ),
        ),
    }
    NEEDS: ClassVar[tuple[str, ...]] = ("F2P002", "F2P003")
    EMITS: ClassVar[dict[str, str]] = {}

    def fix(self, tidying: Tidying) -> Fixes:
        names, lines = tidying.names, tidying.lines
        ignored = markers.ignored_lines(lines.text)
        fsdp1_names, left = unused(
            names, lines.text, tidying.original, tidying.is_package_init, ignored
        )
        found = [
            (
                tidying.to_input(lines.start(alias)),
                f"{what} {_imported_name(statement, alias)} removed",
            )
            for what, removed in (
                ("unused FSDP1 import", fsdp1_names),
                ("import the migration left unused", left),
            )
            for statement, alias in removed
        ]
        return Fixes(edits=imports.removals(lines, names, fsdp1_names + left), findings=found)


def unused(
    names: Names, text: str, original: str, is_package_init: bool, ignored: frozenset[int]
) -> tuple[list[tuple[ast.stmt, ast.alias]], list[tuple[ast.stmt, ast.alias]]]:
    """The import aliases nothing in the module (``text``) reads, in a package's
    ``__init__.py`` only those inside functions (the module's own are its exports): the FSDP1
    ones, and the others the migration left unused: their name is a word ``original`` has more
    often, so a rewrite removed what read it (``partial`` of a wrap policy). An import unused in
    the input stays, and so does every import of a file the migration does not change."""
    uses = names.uses()
    changed = text != original
    fsdp1_names, left = [], []
    for binding in names.imports():
        qualified = binding.qualified or ""
        statement = binding.statement
        if statement is None or statement.lineno in ignored or uses.get(binding):
            continue
        if is_package_init and names.function_of(statement) is None:
            continue
        alias = binding.node
        assert isinstance(alias, ast.alias)
        full = alias.name if isinstance(statement, ast.Import) else names.through(qualified)
        if fsdp1.canonical(full) is not None or full in _FSDP1_MODULES:
            if changed:  # a file the migration leaves as it is keeps even a stale import
                fsdp1_names.append((statement, alias))
        elif changed and _count(binding.name, original) > _count(binding.name, text):
            left.append((statement, alias))
    return fsdp1_names, left


def _count(word: str, text: str) -> int:
    return len(re.findall(rf"\b{re.escape(word)}\b", text))


def _imported_name(statement: ast.stmt, alias: ast.alias) -> str:
    if isinstance(statement, ast.ImportFrom):
        return f"{statement.module}.{alias.name}"
    return alias.name
