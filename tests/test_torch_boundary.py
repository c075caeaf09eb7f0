"""One torch boundary: private torch only through ``fsdp2_port/fsdp1/torch_internals.py``.

The source of ``fsdp2_port`` and ``compat`` is scanned with ``ast`` for private torch names:

- imports of a ``torch`` module or name with a leading-underscore component
  (``from torch.optim.optimizer import _global_optimizer_pre_hooks``,
  ``import torch.distributed.fsdp._runtime_utils``), also through ``importlib.import_module``;
- attribute chains rooted in a name imported from torch (``torch.utils._foreach_utils``,
  ``ShardingStrategy._HYBRID_SHARD_ZERO2``), ``getattr``/``hasattr``/``setattr`` with a literal
  name included;
- ``x._name`` on any other object, unless ``_name`` is defined by our own classes (in a class
  body, or assigned to ``self`` in one of their methods) and is not a name torch_internals
  lists; on ``self`` in a class derived from a torch class, ``_name`` is torch's when the torch
  class's module mentions it (``self._last_lr`` in an ``LRScheduler``), also when a class
  body of ours defines it (an override of a private hook);
- string spellings of the private names torch_internals pins (``"_fsdp_wrapped_module."``).

Dunders are public. Objects of other libraries (``sys._getframe``, ``os._exit``) are not
torch's. Outside torch_internals every finding fails, naming file, line and name; inside it,
every private name must be listed in ``ENTRY_POINTS`` (a component of an entry's module or
name, or a pinned value), and every entry must be used.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from fsdp2_port.fsdp1.torch_internals import ENTRY_POINTS

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("fsdp2_port",)
#: the codemods run without torch: FSDP1's private names there are data about user code
NOT_SCANNED = "fsdp2_port/codemods"
BOUNDARY = "fsdp2_port/fsdp1/torch_internals.py"
#: first components of the modules that are ours
OURS = {"fsdp2_port", "tests"}
#: ``(file, name)`` known to be found outside the boundary, and why each stays. Each must
#: still be found (one that is not is taken off this list).
KNOWN: dict[tuple[str, str], str] = {}
_REFLECTION = {"getattr", "hasattr", "setattr", "delattr"}
_IMPORTERS = {"importlib.import_module", "import_module", "__import__"}
_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*\.?$")


def _private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def _listed() -> set[str]:
    """Every name component ``ENTRY_POINTS`` lists (modules, names, pinned values)."""
    names: set[str] = set()
    for entry in ENTRY_POINTS.values():
        names.update(entry.module.split("."))
        names.update(entry.name.split("."))
        if entry.value is not None:
            names.add(entry.value)
    return names


LISTED = _listed()
PINNED_VALUES = {e.value for e in ENTRY_POINTS.values() if e.value is not None}


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    name: str
    #: the private components that make it private torch
    private: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.name}"


# -- our classes ---------------------------------------------------------------------------------


@dataclass
class _Class:
    bases: list[str]  # dotted origins of imported bases, or names of our classes
    body: set[str]  # names its body defines
    on_self: set[str]  # names its methods assign to self


def _imports(tree: ast.AST) -> dict[str, str]:
    """Local name -> the dotted origin it is bound to by an import (relative: ``.``-prefixed)."""
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    bound[a.asname] = a.name
                else:
                    top = a.name.split(".")[0]
                    bound[top] = top
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            for a in node.names:
                bound[a.asname or a.name] = f"{base}.{a.name}" if node.module else base + a.name
    return bound


def _chain(node: ast.expr) -> tuple[ast.expr, list[str]]:
    """``a.b.c`` -> (``a``, ["b", "c"])."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return node, parts[::-1]


def _dotted(node: ast.expr, imports: dict[str, str]) -> str | None:
    """The dotted origin of an import-rooted expression, else None."""
    root, parts = _chain(node)
    if isinstance(root, ast.Name) and root.id in imports:
        return ".".join([imports[root.id], *parts])
    return None


def _self_assigned(method: ast.AST, self_name: str) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(method):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        for t in targets:
            if (
                isinstance(t, ast.Attribute)
                and isinstance(t.value, ast.Name)
                and t.value.id == self_name
            ):
                names.add(t.attr)
    return names


def _first_param(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    args = [*fn.args.posonlyargs, *fn.args.args]
    decorators = {ast.unparse(d) for d in fn.decorator_list}
    if not args or "staticmethod" in decorators:
        return None
    return args[0].arg


def _classes(trees: dict[str, ast.Module]) -> dict[str, list[_Class]]:
    found: dict[str, list[_Class]] = {}
    for tree in trees.values():
        imports = _imports(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            bases = [_dotted(b, imports) or ast.unparse(b) for b in node.bases]
            body: set[str] = set()
            on_self: set[str] = set()
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    body.add(item.name)
                    self_name = _first_param(item)
                    if self_name is not None:
                        on_self |= _self_assigned(item, self_name)
                elif isinstance(item, ast.ClassDef):
                    body.add(item.name)
                elif isinstance(item, ast.Assign):
                    body.update(t.id for t in item.targets if isinstance(t, ast.Name))
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    body.add(item.target.id)
            found.setdefault(node.name, []).append(_Class(bases, body, on_self))
    return found


def _torch_bases(name: str, classes: dict[str, list[_Class]], seen: frozenset = frozenset()) -> set:
    """The torch classes among the ancestors of our class ``name``."""
    out: set[str] = set()
    for cls in classes.get(name, []):
        for base in cls.bases:
            if base.split(".")[0] == "torch":
                out.add(base)
            elif base in classes and base not in seen:
                out |= _torch_bases(base, classes, seen | {name})
    return out


@functools.cache
def _resolve(dotted: str) -> object:
    module, _, attr = dotted.rpartition(".")
    return getattr(importlib.import_module(module), attr)


@functools.cache
def _module_source(module: str) -> str:
    try:
        return inspect.getsource(sys.modules[module])
    except (KeyError, OSError, TypeError):
        return ""


@functools.cache
def _torch_mentions(base: str, name: str) -> str | None:
    """``module.Class.name`` if the torch class ``base`` (or a torch class it derives from)
    defines or mentions ``name``, else None."""
    cls = _resolve(base)
    for k in inspect.getmro(cls) if isinstance(cls, type) else ():
        module = getattr(k, "__module__", "") or ""
        if module.split(".")[0] != "torch":
            continue
        if name in vars(k) or re.search(rf"\b{re.escape(name)}\b", _module_source(module)):
            return f"{module}.{k.__qualname__}.{name}"
    return None


# -- the scan ------------------------------------------------------------------------------------


class _Scanner(ast.NodeVisitor):
    def __init__(
        self, path: str, tree: ast.Module, classes: dict[str, list[_Class]], ours: set[str]
    ) -> None:
        self.path = path
        self.imports = _imports(tree)
        self.classes = classes
        self.ours = ours
        self.findings: list[Finding] = []
        #: name -> our class it is ``self`` of, in the current scope
        self.selves: list[dict[str, str]] = [{}]
        self.class_stack: list[str] = []

    def _add(self, node: ast.AST, name: str, private: tuple[str, ...]) -> None:
        self.findings.append(Finding(self.path, getattr(node, "lineno", 0), name, private))

    # scopes

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        torch_bases = _torch_bases(node.name, self.classes)
        for item in node.body:  # overriding a private name of a torch base touches it
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and _private(item.name):
                for base in sorted(torch_bases):
                    mention = _torch_mentions(base, item.name)
                    if mention:
                        self._add(item, mention, (item.name,))
        self.class_stack.append(node.name)
        for child in node.body:
            self._visit_in_class(child)
        for d in (*node.decorator_list, *node.bases, *node.keywords):
            self.visit(d)
        self.class_stack.pop()

    def _visit_in_class(self, child: ast.stmt) -> None:
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = _first_param(child)
            scope = dict(self.selves[-1])
            for a in ast.walk(child.args):
                if isinstance(a, ast.arg):
                    scope.pop(a.arg, None)
            if first is not None:
                scope[first] = self.class_stack[-1]
            self.selves.append(scope)
            self.generic_visit(child)
            self.selves.pop()
        else:
            self.visit(child)

    def _visit_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        scope = dict(self.selves[-1])
        for a in ast.walk(node.args):
            if isinstance(a, ast.arg):
                scope.pop(a.arg, None)
        self.selves.append(scope)
        self.generic_visit(node)
        self.selves.pop()

    visit_FunctionDef = _visit_function
    visit_AsyncFunctionDef = _visit_function
    visit_Lambda = _visit_function

    # imports

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            parts = a.name.split(".")
            if parts[0] == "torch" and any(_private(p) for p in parts):
                self._add(node, a.name, tuple(p for p in parts if _private(p)))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level or not node.module or node.module.split(".")[0] != "torch":
            return
        for a in node.names:
            parts = [*node.module.split("."), a.name]
            if any(_private(p) for p in parts):
                self._add(node, ".".join(parts), tuple(p for p in parts if _private(p)))

    # attributes

    def visit_Attribute(self, node: ast.Attribute) -> None:
        root, parts = _chain(node)
        first = next((i for i, p in enumerate(parts) if _private(p)), None)
        if first == len(parts) - 1:
            self._judge(node, root, parts)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = ast.unparse(node.func)
        literal = (
            node.args[1].value
            if len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            else None
        )
        if func in _REFLECTION and literal is not None and _private(literal):
            root, parts = _chain(node.args[0])
            if not any(_private(p) for p in parts):  # else the receiver itself is reported
                self._judge(node, root, [*parts, literal])
        if func in _IMPORTERS and node.args and isinstance(node.args[0], ast.Constant):
            target = node.args[0].value
            if isinstance(target, str) and target.split(".")[0] == "torch":
                private = tuple(p for p in target.split(".") if _private(p))
                if private:
                    self._add(node, target, private)
        self.generic_visit(node)

    def _judge(self, node: ast.AST, root: ast.expr, parts: list[str]) -> None:
        """``root.parts...``, whose last part is the first private one."""
        name = parts[-1]
        if isinstance(root, ast.Name) and root.id in self.imports:
            origin = ".".join([self.imports[root.id], *parts])
            if origin.split(".")[0] == "torch":
                self._add(node, origin, tuple(p for p in origin.split(".") if _private(p)))
            return  # ours (or relative) or another library's
        if isinstance(root, ast.Name) and root.id in self.selves[-1]:
            own = self.selves[-1][root.id]
            for base in sorted(_torch_bases(own, self.classes)):
                mention = _torch_mentions(base, name)
                if mention:
                    self._add(node, mention, (name,))
                    return
            return
        if name not in self.ours or name in LISTED:
            self._add(node, ".".join([ast.unparse(root), *parts]), (name,))

    # strings

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and _DOTTED.match(node.value):
            parts = [p for p in node.value.split(".") if p]
            private = tuple(p for p in parts if p in PINNED_VALUES)
            if private:
                self._add(node, node.value, private)
            elif self.path == BOUNDARY and any(_private(p) for p in parts):
                self._add(node, node.value, tuple(p for p in parts if _private(p)))


def scan(sources: dict[str, str]) -> list[Finding]:
    """Every private torch use in ``sources`` (path -> text), torch_internals' included."""
    trees = {path: ast.parse(text, filename=path) for path, text in sources.items()}
    classes = _classes(trees)
    ours: set[str] = set()
    for own in classes:  # names our classes define, less those a torch base owns
        bases = _torch_bases(own, classes)
        for cls in classes[own]:
            for name in cls.body | cls.on_self:
                if not any(_torch_mentions(b, name) for b in bases):
                    ours.add(name)
    findings: list[Finding] = []
    for path, tree in trees.items():
        scanner = _Scanner(path, tree, classes, ours)
        scanner.visit(tree)
        findings.extend(scanner.findings)
    return findings


def _sources() -> dict[str, str]:
    return {
        p.relative_to(ROOT).as_posix(): p.read_text(encoding="utf-8")
        for d in SCANNED
        for p in sorted((ROOT / d).rglob("*.py"))
        if not p.relative_to(ROOT).as_posix().startswith(NOT_SCANNED)
    }


@pytest.fixture(scope="module")
def findings() -> list[Finding]:
    return scan(_sources())


def test_no_private_torch_outside_torch_internals(findings):
    leaks = [
        f
        for f in findings
        if f.path != BOUNDARY and not any((f.path, p) in KNOWN for p in f.private)
    ]
    assert not leaks, (
        "private torch outside fsdp2_port/fsdp1/torch_internals.py; reach it through an entry "
        "point there:\n" + "\n".join(map(str, leaks))
    )


def test_known_leaks_are_still_there(findings):
    """A leak listed in KNOWN and since fixed is taken off the list."""
    found = {(f.path, p) for f in findings for p in f.private}
    assert set(KNOWN) <= found, f"fixed, take off KNOWN: {sorted(set(KNOWN) - found)}"


def test_torch_internals_lists_every_private_name_it_uses(findings):
    unlisted = [
        f for f in findings if f.path == BOUNDARY and not all(p in LISTED for p in f.private)
    ]
    assert not unlisted, "not in ENTRY_POINTS:\n" + "\n".join(map(str, unlisted))


def test_every_entry_point_is_used():
    """An entry nothing reaches any more is taken out of the table."""
    sources = _sources()
    keys: set[str] = set()
    boundary_attributes: set[str] = set()
    for path, text in sources.items():
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and node.args:
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    keys.add(arg.value)
            if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
                keys.add(str(node.slice.value))
            if isinstance(node, ast.keyword) and isinstance(node.value, ast.Constant):
                if node.arg == "only_without":
                    keys.add(str(node.value.value))
            if path == BOUNDARY and isinstance(node, ast.Attribute):
                boundary_attributes.add(node.attr)
    unused = [
        key
        for key, entry in ENTRY_POINTS.items()
        if key not in keys
        and not (entry.kind == "attribute" and entry.name.split(".")[-1] in boundary_attributes)
    ]
    assert not unused, f"entry points nothing uses: {unused}"


# -- the scanner itself ---------------------------------------------------------------------------

_SAMPLE = """
import os
import sys
import importlib
import torch
import torch.distributed.fsdp._runtime_utils
from torch.optim.optimizer import _global_optimizer_pre_hooks
from torch.distributed.fsdp import ShardingStrategy
from torch.optim.lr_scheduler import LRScheduler
from fsdp2_port.train import grad_norm


class Mine:
    _limit = 3

    def __init__(self):
        self._count = 0

    def run(self, state, mesh, other):
        self._count += 1
        os._exit(0)
        sys._getframe(1)
        grad_norm._by_device_and_dtype([])
        other._count, other._limit
        torch.utils._foreach_utils._has_foreach_support([], "cpu")
        mesh._get_root_mesh()
        getattr(state, "_handle")
        ShardingStrategy._HYBRID_SHARD_ZERO2
        importlib.import_module("torch.distributed.fsdp._init_utils")
        return state._handle, "_fsdp_wrapped_module.", "a._flat_param", "_private_but_ours"


class Schedule(LRScheduler):
    def step(self):
        self._last_lr = [0.0]
        self._mine = 1

    def _get_closed_form_lr(self):
        return self._mine
"""


def test_the_scanner_finds_what_it_must_and_nothing_else():
    found = {(f.line, f.name) for f in scan({"sample.py": _SAMPLE})}
    lines = _SAMPLE.splitlines()

    def at(text: str) -> int:
        return next(i + 1 for i, line in enumerate(lines) if text in line)

    want = {
        (at("import torch.distributed.fsdp._runtime"), "torch.distributed.fsdp._runtime_utils"),
        (
            at("import _global_optimizer_pre_hooks"),
            "torch.optim.optimizer._global_optimizer_pre_hooks",
        ),
        (at("torch.utils._foreach_utils._has"), "torch.utils._foreach_utils"),
        (at("mesh._get_root_mesh"), "mesh._get_root_mesh"),
        (at('getattr(state, "_handle")'), "state._handle"),
        (
            at("ShardingStrategy._HYBRID"),
            "torch.distributed.fsdp.ShardingStrategy._HYBRID_SHARD_ZERO2",
        ),
        (at("importlib.import_module"), "torch.distributed.fsdp._init_utils"),
        (at("return state._handle"), "state._handle"),
        (at("return state._handle"), "_fsdp_wrapped_module."),
        (at("return state._handle"), "a._flat_param"),
        (at("self._last_lr"), "torch.optim.lr_scheduler.LRScheduler._last_lr"),
        (
            at("def _get_closed_form_lr"),
            "torch.optim.lr_scheduler.LRScheduler._get_closed_form_lr",
        ),
    }
    assert found == want, (sorted(found - want), sorted(want - found))
