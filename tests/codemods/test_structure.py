"""The codemod's structure, read from its sources: no import cycle at import time, no module of
the project over ``MAX_LINES`` lines, and every list of names the codemod decides by in one
registry (``fsdp2_port.codemods.assumptions``).

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

from fsdp2_port.codemods import assumptions

ROOT = Path(__file__).resolve().parents[2]
CODEMODS = ROOT / "fsdp2_port" / "codemods"
#: Small modules named after what they do: one over this is split by topic.
MAX_LINES = 800
#: Modules over ``MAX_LINES`` while they are being split (each with why).
TOO_LONG_FOR_NOW: set[str] = set()
#: Module-level collections of names outside the registry: the codemod's own vocabulary and
#: tables in a rule's own terms, no list of names it decides by.
STRUCTURAL = {
    "codemods/cli.py:FORMATS": "the output formats the command offers",
    "codemods/flow.py:_BLOCKS": "the AST fields that hold statement lists",
    "codemods/rules/base.py:STAGES": "the stages a rule runs in",
    "codemods/tidy.py:_STAGES": "the fixer stages, with what their edits are",
    "codemods/writes.py:_HELD_SIGNALS": "the signals a write holds off",
    "codemods/rules/reader_values/slots.py:_ENUMS": "F2P013's kind of value of each FSDP1 enum",
    "codemods/rules/reader_values/slots.py:_CONFIGS": "F2P013's kind and fields of each config",
    "codemods/rules/reader_values/slots.py:_STATE_DICT_SLOTS": "slots, in F2P013's kinds",
    "codemods/rules/reader_values/slots.py:_READERS": "fsdp2_port's readers' slots, in its kinds",
    "codemods/rules/reader_values/slots.py:_FSDP2_SLOTS": "FSDP2's slots, in F2P013's kinds",
    "codemods/rules/state_dict/options.py:OPTIONS_OF_SETTINGS": "DCP's options for FSDP1's "
    "settings (tests/test_fsdp1_api_options.py checks them against torch)",
    "codemods/plan.py:_FORMS": "the rules' words for a site's forms",
    "codemods/plan.py:_REACH": "the rules' words for what reaches a site",
    "codemods/decide.py:_NOTHING": "a site that is nothing, in the rules' words",
}


def _module_names(package: Path) -> dict[str, Path]:
    """Every module of ``package`` (rule cases are user code the codemod reads, not modules)."""
    top = package
    while (top.parent / "__init__.py").exists():  # named as imported: from the top package
        top = top.parent
    found = {}
    for path in package.rglob("*.py"):
        parts = list(path.relative_to(top.parent).with_suffix("").parts)
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
        for path in (ROOT / "fsdp2_port").rglob("*.py")
        if "cases" not in path.relative_to(ROOT).parts
    }
    assert (
        "fsdp2_port/codemods/engine.py" in found and "fsdp2_port/compat/clip.py" in found
    )  # the walk finds them
    too_long = {path: count for path, count in found.items() if count > MAX_LINES}
    assert set(too_long) - TOO_LONG_FOR_NOW == set(), too_long
    assert set(too_long) >= TOO_LONG_FOR_NOW, "split: drop it from TOO_LONG_FOR_NOW"


def _strings(node: ast.AST) -> int:
    """The string constants a collection written at module level holds (nested ones too)."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return sum(_strings(e) for e in node.elts)
    if isinstance(node, ast.Dict):
        return sum(_strings(k) for k in node.keys if k is not None) + sum(
            _strings(v) for v in node.values
        )
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return sum(_strings(a) for a in node.args)
    if isinstance(node, ast.BinOp):
        return _strings(node.left) + _strings(node.right)
    if isinstance(node, (ast.GeneratorExp, ast.ListComp, ast.SetComp)):
        return sum(_strings(g.iter) for g in node.generators)
    return 0


def name_collections(package: Path) -> dict[str, int]:
    """``path:name`` -> its string count, for each module-level assignment of a collection of
    3 or more strings in ``package`` (rule cases aside)."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        if "cases" in path.relative_to(package).parts:
            continue
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                target = node.targets[0] if isinstance(node, ast.Assign) else node.target
                if (count := _strings(node.value)) >= 3:
                    found[f"{path.relative_to(package.parent)}:{ast.unparse(target)}"] = count
    return found


def test_every_list_of_names_is_in_the_registry() -> None:
    registry = "codemods/assumptions.py:"
    outside = {k for k in name_collections(CODEMODS) if not k.startswith(registry)}
    assert outside - STRUCTURAL.keys() == set(), sorted(outside - STRUCTURAL.keys())
    assert STRUCTURAL.keys() <= outside, "gone: drop it from STRUCTURAL"


def test_the_collection_reading_finds_names_in_any_spelling(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "m.py").write_text(
        "A = ('a', 'b', 'c')\n"
        "B = frozenset({'a', 'b', 'c'})\n"
        "C = {'a': 1, 'b': 2, 'c': 3}\n"
        "D = frozenset(f'{m}.x' for m in ('a', 'b', 'c'))\n"
        "E = X | {'a', 'b', 'c'}\n"
        "F = ('a', 'b')\n"  # two: a pair, no list
        "G = tuple(X)\n"
        "def f():\n    H = ('a', 'b', 'c')\n"  # not at module level
    )
    assert set(name_collections(package)) == {f"pkg/m.py:{n}" for n in "ABCDE"}


def test_the_registry_entries_say_what_they_are() -> None:
    entries = assumptions.ENTRIES
    declared = [
        value
        for value in vars(assumptions).values()
        if isinstance(value, (assumptions.NameList, assumptions.NameTable))
    ]
    assert len(entries) == len(declared) and len(entries) > 50
    names = [entry.name for entry in entries]
    assert len(names) == len(set(names)), "one name per entry"
    assert not assumptions.FACTS.keys() & assumptions.ASSUMPTIONS.keys()
    for entry in entries:
        assert entry.kind in assumptions.KINDS, entry.name
        assert entry.why and "\n" not in entry.why, entry.name
        listed = entry.names if isinstance(entry, assumptions.NameList) else tuple(entry.keys())
        assert listed and all(isinstance(n, str) and n and " " not in n for n in listed)
        if isinstance(entry, assumptions.NameList):
            assert len(set(entry.names)) == len(entry.names), f"{entry.name}: a name twice"
    guesses = assumptions.GUESSES
    assert guesses and all(g.kind in assumptions.ASSUMPTIONS and g.why for g in guesses)
    assert len({e.name for e in (*entries, *guesses)}) == len(entries) + len(guesses)
    used = {e.kind for e in (*entries, *guesses)}
    assert used == assumptions.KINDS.keys(), "every kind is used"


#: The decision and the semantic layer: no function over this complexity (radon's measure).
MAX_COMPLEXITY = 20
DECIDING = tuple(f"fsdp2_port/codemods/{part}" for part in ("plan.py", "decide.py", "semantic"))


def test_no_function_of_the_decision_or_the_semantic_layer_is_over_the_complexity_limit() -> None:
    from radon.complexity import cc_visit

    root = Path(__file__).resolve().parents[2]
    files = [
        path
        for part in DECIDING
        for path in ([root / part] if part.endswith(".py") else sorted((root / part).glob("*.py")))
    ]
    assert len(files) > 5
    over = {
        f"{path.relative_to(root)}:{block.fullname}": block.complexity
        for path in files
        for block in cc_visit(path.read_text())
        if block.complexity > MAX_COMPLEXITY
    }
    assert over == {}, over
