"""Which modules and files a file loads by a name or path computed at run time, and which
folders it puts on ``sys.path``, as far as its code spells them without running it."""

from __future__ import annotations

import ast
import os
from collections import defaultdict
from collections.abc import Iterator, Mapping

from fsdp2_port.codemods import trees
from fsdp2_port.codemods.assumptions import FILE_RUNNERS, MODULE_LOADERS


def mentions(data: str | bytes | None, word: str) -> bool:
    """Whether a file's text (None: unreadable) has ``word`` in it."""
    if isinstance(data, bytes):
        return word.encode() in data
    return data is not None and word in data


def mentions_loaders(data: str | bytes | None) -> bool:
    """Whether a file's text names a loader (``MODULE_LOADERS``, ``FILE_RUNNERS``): a file that
    does not cannot call one (``computed_loads`` matches a call by that name)."""
    return any(mentions(data, name) for name in (*MODULE_LOADERS, *FILE_RUNNERS))


def loads_any(path: str, tree: ast.Module) -> bool:
    """A loader call whose module or file is computed at run time, with neither a package
    prefix nor a folder written out (``computed_loads``)."""
    return any(load is None for _, load in computed_loads(path, tree))


#: What a loader call by a computed name loads: ``("prefix", "models.")`` (any module under
#: that package), ``("file", path)``, ``("folder", path)`` (any file under it).
Load = tuple[str, str]


def computed_loads(path: str, tree: ast.Module) -> Iterator[tuple[ast.Call, Load | None]]:
    """Loader calls by a computed name or path (``import_module(f"models.{name}")``,
    ``spec_from_file_location(name, ROOT / "scripts" / "train.py")``), each with what it
    loads as far as the code spells it, None when it may be anything."""
    reader = _PathReader(path, tree)
    for node in trees.nodes(tree, ast.Call):
        if not isinstance(node, ast.Call) or not node.args or is_loader_call(node):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name in MODULE_LOADERS or name == "run_module":
            prefix = _prefix(node.args[0], reader.bound)
            yield node, ("prefix", prefix) if prefix is not None else None
        elif name in FILE_RUNNERS:
            where = next((k.value for k in node.keywords if k.arg == "location"), None)
            if where is None:
                where = node.args[1] if name == "spec_from_file_location" else node.args[0]
                if name == "spec_from_file_location" and len(node.args) < 2:
                    yield node, None
                    continue
            file = reader.value(where)
            folder = None if file is not None else reader.folder_of_pattern(where)
            if file is not None:
                yield node, ("file", file)
            elif folder is not None:
                yield node, ("folder", folder)
            else:
                yield node, None


def _prefix(node: ast.expr, bound: Mapping[str, list[ast.expr]]) -> str | None:
    """The absolute package prefix (``a.b.``) a module name expression starts with."""
    if isinstance(node, ast.Name) and len(bound.get(node.id, ())) == 1:
        node = bound[node.id][0]
    first: ast.expr | None = None
    if isinstance(node, ast.JoinedStr) and node.values:
        first = node.values[0]
    elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        first = node.left
    if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
        return None
    text = first.value
    if not text.endswith(".") or text.startswith("."):
        return None
    parts = text[:-1].split(".")
    return text if all(p.isidentifier() for p in parts) else None


def is_loader_call(node: ast.AST) -> bool:
    """``importlib.import_module("a.b")`` / ``__import__("a")``: an absolute name, literally."""
    if not isinstance(node, ast.Call) or not node.args:
        return False
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    first = node.args[0]
    return (
        name in MODULE_LOADERS
        and isinstance(first, ast.Constant)
        and isinstance(first.value, str)
        and not first.value.startswith(".")
    )


def path_additions(path: str, tree: ast.Module) -> Iterator[str]:
    """Folders the statements ``sys.path.insert(i, X)`` / ``sys.path.append(X)`` in ``path``
    add, for the ``X`` that read without running (``_PathReader``)."""
    reader = _PathReader(path, tree)
    for statement, _ in trees.statements(tree):
        node = statement.value if isinstance(statement, ast.Expr) else None
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("insert", "append")
            and dotted(node.func.value) == "sys.path"
            and node.args
        ):
            continue
        value = reader.value(node.args[-1])
        if value is not None:
            yield os.path.normpath(value)


def dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = dotted(node.value)
        return f"{head}.{node.attr}" if head else ""
    return ""


class _PathReader:
    """The value of a path expression read without running it: a literal absolute path, or
    one made from ``__file__`` with ``os.path``'s ``dirname``/``abspath``/``realpath``/
    ``normpath``/``join``, ``pathlib``'s ``Path(...)``, ``.parent``, ``.parents[i]``,
    ``.resolve()``, ``/``, ``str()``, through names bound once in the file."""

    def __init__(self, path: str, tree: ast.Module) -> None:
        self.path = path
        self.bound: dict[str, list[ast.expr]] = defaultdict(list)
        for node, _ in trees.statements(tree):
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                if isinstance(node.targets[0], ast.Name):
                    self.bound[node.targets[0].id].append(node.value)

    def value(self, node: ast.AST, depth: int = 8) -> str | None:
        if depth < 0:
            return None
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value if os.path.isabs(node.value) else None
        if isinstance(node, ast.Name):
            if node.id == "__file__":
                return self.path
            values = self.bound.get(node.id, ())
            return self.value(values[0], depth - 1) if len(values) == 1 else None
        if isinstance(node, ast.Subscript):
            return self._parents(node, depth)
        if isinstance(node, ast.Attribute) and node.attr == "parent":
            inner = self.value(node.value, depth - 1)
            return os.path.dirname(inner) if inner is not None else None
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            return self._joined([node.left, node.right], depth)
        if isinstance(node, ast.Call):
            return self._called(node, depth)
        return None

    def folder_of_pattern(self, node: ast.AST) -> str | None:
        """The folder of a path whose last part is computed (``join(root, "data",
        f"{name}.py")``, ``ROOT / "gates" / name``): every file under it may be the one
        meant."""
        parts: list[ast.expr] = []
        if isinstance(node, ast.Name) and len(self.bound.get(node.id, ())) == 1:
            node = self.bound[node.id][0]
        if isinstance(node, ast.Call) and dotted(node.func).rsplit(".", 1)[-1] == "join":
            parts = list(node.args)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            parts = [node.left, node.right]
        if len(parts) < 2 or isinstance(parts[-1], ast.Constant):
            return None
        return self._joined(parts[:-1], 8)

    def _parents(self, node: ast.Subscript, depth: int) -> str | None:
        base, index = node.value, node.slice
        if not (
            isinstance(base, ast.Attribute)
            and base.attr == "parents"
            and isinstance(index, ast.Constant)
            and isinstance(index.value, int)
        ):
            return None
        inner = self.value(base.value, depth - 1)
        if inner is None:
            return None
        for _ in range(index.value + 1):
            inner = os.path.dirname(inner)
        return inner

    def _called(self, node: ast.Call, depth: int) -> str | None:
        last = dotted(node.func).rsplit(".", 1)[-1]
        if isinstance(node.func, ast.Attribute) and node.func.attr in ("resolve", "absolute"):
            return self.value(node.func.value, depth - 1) if not node.args else None
        if last in ("Path", "PurePath", "str", "abspath", "realpath", "normpath", "fspath"):
            return self.value(node.args[0], depth - 1) if len(node.args) == 1 else None
        if last == "dirname" and len(node.args) == 1:
            inner = self.value(node.args[0], depth - 1)
            return os.path.dirname(inner) if inner is not None else None
        if last == "join" and node.args:
            return self._joined(list(node.args), depth)
        return None

    def _joined(self, parts: list[ast.expr], depth: int) -> str | None:
        head = self.value(parts[0], depth - 1)
        rest = [
            p.value if isinstance(p, ast.Constant) and isinstance(p.value, str) else None
            for p in parts[1:]
        ]
        if head is None or any(r is None for r in rest):
            return None
        return os.path.normpath(os.path.join(head, *rest))  # type: ignore[arg-type]
