"""FSDP1 names a module of the run re-exports, read once for the whole run.

A package that picks its FSDP per torch release (``from torch.distributed.fsdp import
FullyShardedDataParallel as FSDP`` in its ``__init__.py``) hands the name on: ``from pkg
import FSDP`` elsewhere is torch's class, and ``FSDP(...)`` there builds an FSDP1 model that a
file-by-file reading would not see (RLinf). ``find`` maps each such ``module.name`` to the
torch name it stands for; ``Names.qualified`` reads through the map. A chain (a module
re-exporting another's re-export) resolves to its end.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator

from fsdp2_port.codemods import fsdp1, sources
from fsdp2_port.codemods.names import Names, names_of

#: Statements whose blocks run as part of the module's own body.
_NESTED = (ast.If, ast.Try, getattr(ast, "TryStar", ast.Try), ast.With, ast.ExceptHandler)


def find(files: Iterable[sources.FsdpFile]) -> dict[str, str]:
    """``{"pkg.FSDP": "torch.distributed.fsdp.FullyShardedDataParallel", ...}`` for the
    module-level imports of the files given (``sources.fsdp_files``; torch's own modules
    excepted: their names are canonical already)."""
    bound: dict[str, str] = {}
    for file in files:
        module, tree = file.module, None
        if module and module.split(".")[0] != "torch":
            tree = file.tree
        if tree is None:
            continue
        imports = ast.Module(body=list(_module_level_imports(tree.body)), type_ignores=[])
        names = Names(imports, module, file.package)
        for bindings in names.scopes[imports].bindings.values():
            for binding in bindings:
                if binding.kind == "import" and binding.qualified:
                    bound[f"{module}.{binding.name}"] = binding.qualified
    found = {}
    for name, target in bound.items():
        seen = {name}
        while target in bound and target not in seen:
            seen.add(target)
            target = bound[target]
        if fsdp1.canonical(target) is not None:
            found[name] = target
    return found


def _module_level_imports(block: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The imports a module runs as it loads, in the blocks of its ``if``/``try``/``with``
    statements too (not in functions or classes): all ``find`` reads of a file, so that only
    they are bound."""
    for statement in block:
        if isinstance(statement, (ast.Import, ast.ImportFrom)):
            yield statement
        elif isinstance(statement, _NESTED):
            for field in ("body", "orelse", "finalbody", "handlers"):
                yield from _module_level_imports(getattr(statement, field, []))


def imported(data: bytes, module: str, package: bool, found: dict[str, str]) -> bool:
    """Whether a file imports one of the re-exported names (the text filter's part for a file
    that reaches FSDP1 only through another module of the run): read cheaply first, the name
    and its module's last part in the text, then its imports."""
    if not any(
        name.rpartition(".")[2].encode() in data
        and name.rpartition(".")[0].rpartition(".")[2].encode() in data
        for name in found
    ):
        return False
    tree = sources.tree_of(data)
    if tree is None:
        return True  # the analysis reports it
    return any(b.qualified in found for b in names_of(tree, module, package).imports())
