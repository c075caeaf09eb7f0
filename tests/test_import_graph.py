"""The three parts' imports form no cycle and point the way the design card says:
``fsdp2_port.compat`` -> the runtime (shared maths), ``fsdp2_port.cli`` ->
``fsdp2_port.codemods``, the proof harness (``fsdp2_port.prove``) may import the compat
package; the codemods import neither (they run without torch); nothing imports ``tests``.

Read with ``ast`` from the source, every import counted wherever it is (a lazy import inside
a function is still an arrow), except under ``if TYPE_CHECKING:``.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("fsdp2_port",)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {
        _module_name(p): p
        for package in PACKAGES
        for p in (ROOT / package).rglob("*.py")
        if "cases" not in p.relative_to(ROOT).parts
    }


def _type_checking_only(tree: ast.Module) -> set[ast.AST]:
    hidden: set[ast.AST] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in (
            "TYPE_CHECKING",
            "typing.TYPE_CHECKING",
        ):
            for child in node.body:
                hidden.update(ast.walk(child))
    return hidden


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules ``name`` imports (a ``from package import module`` counts the
    module; ``from module import name`` the module)."""
    tree = ast.parse(path.read_text())
    hidden = _type_checking_only(tree)
    out: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if node in hidden:
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(name, path, known) for name, path in modules.items()}


def _parents_excluded(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """A package's ``__init__`` importing its own submodules is how Python packages work;
    a submodule importing its package is where a real cycle would start, so only the former
    edge is dropped."""
    return {
        name: {t for t in targets if not t.startswith(name + ".")}
        for name, targets in graph.items()
    }


def test_no_import_cycle() -> None:
    graph = _parents_excluded(_graph())
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                cycles.append([*stack[stack.index(target) :], target])
            elif target not in state:
                visit(target)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)


def _part(module: str) -> str:
    """Which of the three parts a module belongs to: ``codemods``, ``compat`` or ``runtime``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in ("codemods", "compat") else "runtime"


def test_arrows_point_the_designed_way() -> None:
    wrong = []
    for name, targets in _graph().items():
        top = _part(name)
        for target in targets:
            other = _part(target)
            allowed = (
                other == top
                or (top == "compat" and other == "runtime")
                or (name == "fsdp2_port.cli" and other == "codemods")
                or (name.startswith("fsdp2_port.prove.") and other == "compat")
            )
            if not allowed:
                wrong.append(f"{name} -> {target}")
    assert not wrong, wrong


def test_the_graph_reading_finds_what_it_should() -> None:
    """The reading itself: known arrows are seen (or the tests above could pass vacuously)."""
    graph = _graph()
    assert any(
        t.startswith("fsdp2_port.codemods.rules.") for t in graph["fsdp2_port.codemods.registry"]
    )
    assert "fsdp2_port.train.grad_norm" in graph["fsdp2_port.train.clip"]
    assert "codemods" in {_part(t) for t in graph["fsdp2_port.cli"]}
