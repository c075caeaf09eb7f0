"""One file parsed once: its tree, text positions and names, and the questions every stage
asks about them (which FSDP1/FSDP2 name a chain is, where a node is). No plan, no rules."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass, field

from fsdp2_port.codemods import fsdp1, trees
from fsdp2_port.codemods.names import names_of
from fsdp2_port.codemods.semantic.modules import RunModules
from fsdp2_port.codemods.spreads import Keys
from fsdp2_port.codemods.text import LineIndex
from fsdp2_port.codemods.visibility import Visibility

from .assumed import Assumed


@dataclass
class Source:
    """What a file is, for the analysis: its text, path and dotted module name."""

    path: str
    text: str
    module_name: str = ""
    is_package: bool = False
    #: FSDP1 names other modules of the run re-export (``reexports.find``).
    reexports: Mapping[str, str] = field(default_factory=dict)
    #: Which of its module-level names only it reads (``visibility.find``).
    seen: Visibility = field(default_factory=Visibility)
    #: The keys of the run's keyword-argument dicts (``spreads.find``).
    spreads: Mapping[str, Keys] = field(default_factory=dict)
    #: Its imports the run reads by another module name (``ModuleGraph.renames``).
    renames: Mapping[str, str] = field(default_factory=dict)
    #: The run's modules (``ModuleGraph.run_modules``): what is a library's.
    run_modules: RunModules = field(default_factory=RunModules)
    #: What the run's functions do with their arguments (``summaries.find``).
    effects: Mapping[str, Mapping[int, frozenset[str]]] = field(default_factory=dict)


class ParsedFile:
    def __init__(self, source: Source, strict: bool = False) -> None:
        """``strict``: the analysis takes no assumption (``assumed``)."""
        self.path = source.path
        #: Where every test of a name against an assumption's entry goes (``assumed``).
        self.assumed = Assumed(source.path, strict)
        self.text = source.text
        self.module_name = source.module_name
        self.tree = trees.parse(source.text, source.path)
        self.lines = LineIndex(source.text)
        self.spreads = source.spreads
        self.run_modules = source.run_modules
        self.effects = source.effects
        #: The text of nodes the analysis made, not read from the file (``written``).
        self.made: dict[ast.AST, str] = {}
        self.names = names_of(
            self.tree,
            source.module_name,
            source.is_package,
            source.reexports,
            source.seen,
            source.renames,
        )

    # -- names ---------------------------------------------------------------------------------
    def fsdp1_name(self, node: ast.AST) -> str | None:
        """Canonical FSDP1 name of a Name/Attribute chain (``FullyShardedDataParallel`` ...)."""
        if not isinstance(node, (ast.Name, ast.Attribute)):
            return None
        return fsdp1.first(self.names.qualified(node))

    def fsdp2_name(self, node: ast.AST) -> str | None:
        """``fully_shard``, ``FSDPModule`` ... when the chain resolves to an FSDP2 export."""
        if not isinstance(node, (ast.Name, ast.Attribute)):
            return None
        for name in sorted(self.names.qualified(node)):
            found = fsdp1.fsdp2(name)
            if found is not None:
                return found
        return None

    def is_fsdp_class(self, node: ast.AST) -> bool:
        return self.fsdp1_name(node) == "FullyShardedDataParallel"

    def resolves_to(self, node: ast.AST, *qualified: str) -> bool:
        return bool(self.names.qualified(node) & set(qualified))

    def callee_effects(self, call: ast.Call) -> Mapping[int, frozenset[str]]:
        """What the run's function a call calls does with each argument position
        (``summaries``): by its qualified name, a function of this file, ``self``'s method."""
        func = call.func
        names = set(self.names.qualified(func))
        module = self.module_name
        if isinstance(func, ast.Name) and any(
            b.kind == "def" for b in self.names.bindings_of(func)
        ):
            names.add(f"{module}.{func.id}")
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            owner = self.names.class_of(call)
            if func.value.id == "self" and owner is not None:
                names.add(f"{module}.{owner.name}.{func.attr}")
        found: dict[int, frozenset[str]] = {}
        for name in names:
            for position, effects in self.effects.get(name, {}).items():
                found[position] = found.get(position, frozenset()) | effects
        return found

    # -- text and positions --------------------------------------------------------------------
    def source(self, node: ast.AST) -> str:
        made = self.made.get(node)
        return made if made is not None else self.lines.source(node)

    def written(self, text: str, at: ast.AST, parent: ast.AST) -> ast.expr:
        """An expression the analysis makes (``kwargs["key"]``) from ``text``: placed at
        ``at`` under ``parent`` for the questions rules ask of nodes (scopes, names), its
        ``source`` and its parts' their own text."""
        node = ast.parse(text, mode="eval").body
        for part in ast.walk(node):
            ast.copy_location(part, at)
            part.end_lineno, part.end_col_offset = at.end_lineno, at.end_col_offset  # type: ignore[attr-defined]
            self.made[part] = ast.unparse(part)
            for child in ast.iter_child_nodes(part):
                self.names.parent[child] = part
        self.names.parent[node] = parent
        self.made[node] = text
        return node

    def span(self, node: ast.AST) -> tuple[int, int]:
        return self.lines.span(node)

    def site_id(self, node: ast.AST) -> str:
        """``path:line:column`` of ``node``: how sites and constructors are named in a run."""
        start = self.lines.start(node)
        return f"{self.path}:{self.lines.line_of(start)}:{self.lines.column(start)}"
