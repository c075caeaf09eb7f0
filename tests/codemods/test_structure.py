"""The codemod's structure, read from its sources: no import cycle at import time, and no
module of the project over ``MAX_LINES`` lines.

The import graph here is what Python executes while importing: statements at module level
(also inside ``if``/``try``/``with`` and class bodies, not in functions, not under
``if TYPE_CHECKING:``), and importing ``a.b.c`` also runs ``a`` and ``a.b``. A module's own
packages are already being imported when it runs, so an arrow to one counts only where the
module reads a name the package itself defines (``from package import Name``); a
``from package import submodule`` is an arrow to the submodule. (``tests/test_import_graph.py``
also counts lazy imports, for every package, but maps an import to its module alone.)
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CODEMODS = ROOT / "codemods"
#: Small modules named after what they do: one over this is split by topic.
MAX_LINES = 800
#: Modules over ``MAX_LINES`` while they are being split (each with why).
TOO_LONG_FOR_NOW = {
    "fsdp2_port/fsdp1/fsdp1_api.py",  # FSDP1's module APIs: its split by topic is under way
}


def _module_names(package: Path) -> dict[str, Path]:
    """Every module of ``package`` (rule cases are user code the codemod reads, not modules)."""
    found = {}
    for path in package.rglob("*.py"):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if "cases" in parts:
            continue
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _run_at_import(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements of ``body`` Python may execute while importing the module."""
    for statement in body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if isinstance(statement, ast.If) and ast.unparse(statement.test) in (
            "TYPE_CHECKING",
            "typing.TYPE_CHECKING",
        ):
            yield from _run_at_import(statement.orelse)
            continue
        yield statement
        for field in ("body", "orelse", "finalbody"):
            inner = getattr(statement, field, None)
            if isinstance(inner, list):
                yield from _run_at_import([s for s in inner if isinstance(s, ast.stmt)])
        for handler in getattr(statement, "handlers", ()):
            yield from _run_at_import(handler.body)
        for case in getattr(statement, "cases", ()):
            yield from _run_at_import(case.body)


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _arrows(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules importing ``name`` executes or reads, directly."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    own = set(_ancestors(name))
    out: set[str] = set()

    def runs(module: str) -> None:
        """Importing ``module`` runs it and its packages (own packages run already)."""
        for each in [*_ancestors(module), module]:
            if each in known and each not in own and each != name:
                out.add(each)

    for statement in _run_at_import(ast.parse(path.read_text()).body):
        if isinstance(statement, ast.Import):
            for alias in statement.names:
                runs(alias.name)
        elif isinstance(statement, ast.ImportFrom):
            base = statement.module or ""
            if statement.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - statement.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            runs(base)
            for alias in statement.names:
                if f"{base}.{alias.name}" in known:
                    runs(f"{base}.{alias.name}")
                elif base in own:  # a name defined by one of its own packages
                    out.add(base)
    return out


def import_time_graph(package: Path) -> dict[str, set[str]]:
    modules = _module_names(package)
    return {name: _arrows(name, path, set(modules)) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_in_the_codemods() -> None:
    assert cycles(import_time_graph(CODEMODS)) == []


def test_the_import_reading_sees_packages_and_names(tmp_path: Path) -> None:
    """The reading itself, on a small package with every kind of arrow it must tell apart."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "",
        # a sibling's import runs it; under TYPE_CHECKING and in a function it does not
        "a.py": (
            "from typing import TYPE_CHECKING\nfrom pkg import b\nif TYPE_CHECKING:\n"
            "    from pkg import c\ndef f():\n    import pkg.c\n"
        ),
        "b.py": "try:\n    import pkg.sub.leaf\nexcept ImportError:\n    pass\n",
        "c.py": "from pkg.a import x\n",
        # importing pkg.sub.leaf runs pkg.sub, whose __init__ imports d, which imports a
        "sub/__init__.py": "from . import d\nNAME = 1\n",
        "sub/d.py": "from pkg import a\n",
        # a submodule reading its package's own name, and one taking only a sibling
        "sub/leaf.py": "from pkg.sub import NAME\n",
        "sub/other.py": "from pkg.sub import leaf\n",
    }
    for relative, text in files.items():
        (package / relative).write_text(text)
    graph = import_time_graph(package)
    assert graph == {
        "pkg": set(),
        "pkg.a": {"pkg.b"},
        "pkg.b": {"pkg.sub", "pkg.sub.leaf"},
        "pkg.c": {"pkg.a"},
        "pkg.sub": {"pkg.sub.d"},
        "pkg.sub.d": {"pkg.a"},
        "pkg.sub.leaf": {"pkg.sub"},
        "pkg.sub.other": {"pkg.sub.leaf"},
    }
    assert cycles(graph) == [["pkg.a", "pkg.b", "pkg.sub", "pkg.sub.d", "pkg.sub.leaf"]]


def test_no_module_over_the_line_limit() -> None:
    found = {
        str(path.relative_to(ROOT)): len(path.read_text().splitlines())
        for package in ("codemods", "compat", "fsdp2_port")
        for path in (ROOT / package).rglob("*.py")
        if "cases" not in path.relative_to(ROOT).parts
    }
    assert "codemods/engine.py" in found and "compat/clip.py" in found  # the walk finds them
    too_long = {path: count for path, count in found.items() if count > MAX_LINES}
    assert set(too_long) - TOO_LONG_FOR_NOW == set(), too_long
    assert set(too_long) >= TOO_LONG_FOR_NOW, "split: drop it from TOO_LONG_FOR_NOW"
