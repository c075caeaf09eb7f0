"""The run's modules as Python imports them: which files each import statement executes.

A file's module name is its dotted path under its *root*: the directory above its topmost
package (``a/b/c.py`` beside ``a/__init__.py`` and ``a/b/__init__.py`` is ``a.b.c``); a file
outside any package is a top-level module of its own directory. An absolute import is looked
up the way ``sys.path`` finds it, in this order, the first root that holds it winning:

1. the importing file's own root: a script's directory is ``sys.path[0]`` of its program, and
   a top-level module beside it is imported from there too; then the file's own folder, when
   it is a package's (a file of a package run as a script, ``python pkg/train.py``, has its
   folder for ``sys.path[0]``: ``from grad_norm import ...`` finds ``pkg/grad_norm.py``);
2. packaging roots above the file (a folder with ``pyproject.toml``, ``setup.py`` or
   ``setup.cfg``, and its ``src/``): an editable install puts them on ``sys.path``;
3. folders some file of the run puts on ``sys.path`` (``sys.path.insert(0, <a folder of
   __file__>)``), when the code spelling them can be read without running it;
4. only when none of those holds it: every other root of the run that does (a launcher's
   ``PYTHONPATH``): all of them are candidates.

A relative import resolves from the importing file's own folder. ``import a.b.c`` executes
``a/__init__.py``, ``a/b/__init__.py`` and ``a/b/c.py``; ``from a.b import c`` also executes
``a/b/c.py`` when that is a module. ``importlib.import_module("<literal>")`` and
``__import__("<literal>")`` import like a statement. An import the run holds no file for is
outside the run (torch, an installed library) and has no edge.
"""

from __future__ import annotations

import ast
import functools
import os
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace

from fsdp2_port.codemods import sources, trees
from fsdp2_port.codemods.assumptions import PACKAGING_FILES
from fsdp2_port.codemods.semantic import module_level, summaries
from fsdp2_port.codemods.semantic.loaders import (
    computed_loads,
    is_loader_call,
    loads_any,
    mentions,
    mentions_loaders,
    path_additions,
)


@dataclass(frozen=True)
class Module:
    """One file of the run as a module: its dotted ``name`` under ``root`` (a key only where
    a part is no identifier: no import finds it by that name), and whether it is a
    package's ``__init__.py``."""

    path: str
    name: str
    root: str
    package: bool


@dataclass(frozen=True)
class RunModules:
    """What the plan needs of the run's modules: the first parts of their canonical names
    (``tops``: a dotted name with any other first part is a library's), and the imports found
    on several roots at once (``aliases``: ``ModuleGraph.aliases``)."""

    tops: frozenset[str] = frozenset()
    aliases: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: The run is the whole program (``--whole-program``): no code outside it calls its
    #: functions.
    whole_program: bool = False
    #: The module-level functions and classes of the run, by qualified name: names its
    #: modules bind once, by ``def`` or ``class`` (``ModuleGraph.definitions``).
    definitions: frozenset[str] = frozenset()
    #: The run's module-level classes -> the qualified names of their bases.
    classes: Mapping[str, frozenset[str]] = field(default_factory=dict)
    #: Some file of the run spells ``add_param_group`` (``ModuleGraph.adds_param_groups``).
    adds_param_groups: bool = True

    def defines(self, qualified: str) -> bool:
        """Whether ``qualified`` names a function or class of the run (itself, or each name a
        module handing it on may stand for: ``aliases``)."""
        if qualified in self.definitions:
            return True
        found = self.aliases.get(qualified, ())
        return bool(found) and all(name in self.definitions for name in found)

    def subclasses(self, name: str) -> frozenset[str]:
        """The run's classes that derive from the class ``name``, however many bases up."""
        found: set[str] = set()
        todo = [name]
        while todo:
            base = todo.pop()
            for cls, bases in self.classes.items():
                if base in bases and cls not in found:
                    found.add(cls)
                    todo.append(cls)
        return frozenset(found)

    def library(self, qualified: str) -> str | None:
        """The library a dotted name belongs to (its first part), None for the run's own
        modules, builtins, or when the run's modules are not known."""
        top = qualified.partition(".")[0]
        if not self.tops or top in self.tops or top == "builtins":
            return None
        return top


@dataclass(frozen=True)
class Naming:
    """How the run names one file (``ModuleGraph.canonical``), whether it is a package's
    ``__init__.py``, and its ``renames`` (``ModuleGraph.renames``)."""

    name: str = ""
    package: bool = False
    renames: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Import:
    """What one import of a file executes: the run's files it loads (``targets``, parents'
    ``__init__`` first), where it is (``line``), and whether it runs only when a function is
    called (``lazy``) or only by a loader call (``dynamic``)."""

    module: str
    level: int
    line: int
    targets: tuple[str, ...]
    lazy: bool = False
    dynamic: bool = False
    #: The folder it was found on (None: outside the run, or on several roots at once).
    root: str | None = None


@dataclass
class ModuleGraph:
    """The run's files, their module names and the import edges between them."""

    modules: dict[str, Module]
    imports: dict[str, tuple[Import, ...]] = field(default_factory=dict)
    #: Folders some file puts on ``sys.path`` (rule 3).
    extra_roots: tuple[str, ...] = ()
    #: Files that load modules by a name computed at run time (``import_module(name)``,
    #: ``runpy.run_path(path)``): they may execute any file of the run.
    loads_any: frozenset[str] = frozenset()
    #: Files whose module-level code does more than define: it calls a function or class of
    #: the run, loops, enters a ``with`` (``module_level.acts_on_import``); an unreadable file too.
    acts_on_import: frozenset[str] = frozenset()
    #: What the run's functions do with their arguments (``summaries.find``).
    effects: dict[str, dict[int, frozenset[str]]] = field(default_factory=dict)
    #: Each file's module-level ``from <run module> import name [as alias]``:
    #: ``(alias, the run file it imports from, name)`` (a name handed on, ``reexports``).
    handed_on: dict[str, tuple[tuple[str, str, str], ...]] = field(default_factory=dict)
    #: The module-level names each module binds once, by ``def`` or ``class``, qualified.
    definitions: frozenset[str] = frozenset()
    #: The run's module-level classes -> the qualified names of their bases.
    classes: dict[str, frozenset[str]] = field(default_factory=dict)
    #: Some file of the run spells ``add_param_group``: an optimizer may be given parameters
    #: after it is built.
    adds_param_groups: bool = True
    _importers: dict[str, set[str]] | None = None
    _tops: dict[str, list[str]] | None = None
    _closures: dict[str, frozenset[str]] = field(default_factory=dict)

    def without(self, leaving: Iterable[tuple[str, int, str]]) -> ModuleGraph:
        """The graph once the imports ``(path, line, module)`` are gone (the run rewrites them
        to import other modules)."""
        gone = set(leaving)
        if not gone:
            return self
        imports = {
            path: tuple(e for e in found if (path, e.line, e.module) not in gone)
            for path, found in self.imports.items()
        }
        return replace(self, imports=imports, _importers=None, _closures={})

    # -- queries -----------------------------------------------------------------------------
    def module(self, path: str) -> Module:
        return self.modules[path]

    def canonical(self, path: str) -> str:
        """The module name that tells ``path`` apart from every other file of the run: its
        dotted name, with ``@n`` after the first part where several roots of the run hold a
        module or package of that name (``grad_norm@1``, ``grad_norm@2``)."""
        module = self.modules[path]
        if not module.name:
            return ""
        top, dot, rest = module.name.partition(".")
        return self._top(module.root, top) + dot + rest

    def run_modules(self, whole_program: bool = False) -> RunModules:
        tops = frozenset(self.canonical(p).partition(".")[0] for p in self.modules)
        return RunModules(
            frozenset(t for t in tops if t),
            self.aliases(),
            whole_program,
            self.definitions,
            self.classes,
            self.adds_param_groups,
        )

    def naming(self, path: str) -> Naming:
        return Naming(self.canonical(path), self.modules[path].package, self.renames(path))

    def renames(self, path: str) -> dict[str, str]:
        """The absolute imports of ``path`` whose dotted name is not the canonical name of the
        file they find (``canonical``: another root holds the same name; a namespace package's
        folder) -> that canonical name; a chain read through one (``ns.mod.f``) follows it."""
        out = {}
        for entry in self.imports.get(path, ()):
            if entry.level or entry.root is None or not entry.targets:
                continue
            canonical = self.canonical(entry.targets[-1])
            if canonical and canonical != entry.module:
                out[entry.module] = canonical
        return out

    def reexports(self) -> dict[str, str]:
        """Names a module of the run hands on from another (``from .fsdp import
        shard_model`` in ``dist/__init__.py``: ``dist.shard_model`` -> ``dist.fsdp.shard_model``),
        by canonical names, a chain followed to its end."""
        out: dict[str, str] = {}
        for path, found in self.handed_on.items():
            module = self.canonical(path)
            for alias, source, name in found:
                out[f"{module}.{alias}"] = f"{self.canonical(source)}.{name}"
        for key in list(out):
            seen = {key}
            while out[key] in out and out[key] not in seen:
                seen.add(out[key])
                out[key] = out[out[key]]
        return out

    def aliases(self) -> dict[str, tuple[str, ...]]:
        """Absolute imports found on several roots at once (none of the importer's own holds
        them) -> the canonical names of every file they may find; and names a module hands on
        (``reexports``) -> where they are defined."""
        out: dict[str, set[str]] = defaultdict(set)
        for name, target in self.reexports().items():
            out[name].add(target)
        for found in self.imports.values():
            for entry in found:
                if not entry.level and entry.root is None and len(entry.targets) > 1:
                    out[entry.module] |= {
                        self.canonical(t)
                        for t in entry.targets
                        if self.modules[t].name == entry.module
                    }
        return {module: tuple(sorted(names)) for module, names in out.items()}

    def _top(self, root: str, top: str) -> str:
        holders = self._holders().get(top, ())
        if len(holders) < 2 or root not in holders:
            return top
        return f"{top}@{holders.index(root) + 1}"

    def _holders(self) -> dict[str, list[str]]:
        """Each first part of a module name -> the roots that hold it, sorted."""
        if self._tops is None:
            found: dict[str, set[str]] = defaultdict(set)
            for module in self.modules.values():
                if module.name:
                    found[module.name.partition(".")[0]].add(module.root)
            self._tops = {top: sorted(roots) for top, roots in found.items()}
        return self._tops

    def importers(self, path: str) -> frozenset[str]:
        """The files of the run with an import that executes ``path``."""
        if self._importers is None:
            self._importers = defaultdict(set)
            for source, found in self.imports.items():
                for entry in found:
                    for target in entry.targets:
                        if target != source:
                            self._importers[target].add(source)
        return frozenset(self._importers.get(path, ()))

    def closure(self, path: str) -> frozenset[str]:
        """Every file a program that runs ``path`` executes by importing, ``path`` included
        (lazy and loader imports too: they run whenever their function does)."""
        found = self._closures.get(path)
        if found is None:
            seen = {path}
            todo = [path]
            while todo:
                for entry in self.imports.get(todo.pop(), ()):
                    for target in entry.targets:
                        if target not in seen:
                            seen.add(target)
                            todo.append(target)
            found = self._closures[path] = frozenset(seen)
        return found


def build(
    paths: Iterable[str],
    texts: Mapping[str, str | bytes | None],
    mapper: Mapper | None = None,
) -> ModuleGraph:
    """The graph of the files ``paths`` (as the run spells them: every path in the graph is
    one of these) whose sources are ``texts`` (None: unreadable, no edges from it), with
    what its functions do with their arguments (``summaries``). ``mapper(read, arguments)``
    reads the files (``read(*args)`` for each, in order): the run's workers, or ``map``."""
    spelled = {os.path.abspath(p): p for p in paths}
    index = _Index(list(spelled))
    modules = {a: index.module(a) for a in spelled}
    text = {a: texts.get(p) for a, p in spelled.items()}
    adding = {a: _parse(t) for a, t in text.items() if mentions(t, "sys.path")}
    extra = _path_roots({a: t for a, t in adding.items() if t is not None}, text)
    loading = frozenset(a for a in spelled if mentions_loaders(text[a]))
    run = _Run(os.urandom(8).hex(), tuple(spelled), extra, loading)
    facts = (mapper or _in_turn)(read, [(a, t, run) for a, t in text.items()])
    graph = _assembled(modules, facts, extra, spelled)
    graph.adds_param_groups = any(
        t is None or mentions(t, "add_param_group") for t in text.values()
    )
    return graph


def _in_turn(function: Callable[..., Facts], arguments: list[tuple]) -> list[Facts]:
    """A ``Mapper`` in this process."""
    return [function(*args) for args in arguments]


def _assembled(
    modules: Mapping[str, Module],
    facts: list[Facts],
    extra: tuple[str, ...],
    spelled: Mapping[str, str],
) -> ModuleGraph:
    """The graph of the files' ``facts``, by the run's spelling of their paths."""
    parsed = [f for f in facts if f.parsed]
    stars = {f.path: f.star_names for f in parsed}
    names = {m.name for m in modules.values()}
    graph = ModuleGraph(
        {spelled[a]: _respelled_module(m, spelled[a]) for a, m in modules.items()},
        {spelled[f.path]: tuple(_respelled(i, spelled) for i in f.imports) for f in parsed},
        extra_roots=extra,
        loads_any=frozenset(spelled[f.path] for f in parsed if f.loads_any),
        acts_on_import=frozenset(spelled[f.path] for f in facts if f.acts_on_import),
        handed_on={
            spelled[f.path]: _starred(f.handed_on, spelled, stars, modules[f.path].name, names)
            for f in parsed
            if f.handed_on
        },
    )
    graph.definitions = frozenset(
        f"{module}.{name}"
        for f in parsed
        if (module := graph.canonical(spelled[f.path]))
        for name in f.definitions
    )
    graph.classes = {c: bases for f in parsed for c, bases in f.classes}
    graph.effects = summaries.find([f.functions for f in parsed], graph.classes)
    return graph


#: ``mapper(function, arguments)``: ``[function(*args) for args in arguments]``, in order.
Mapper = Callable[[Callable[..., "Facts"], list[tuple]], list["Facts"]]


@dataclass(frozen=True)
class _Run:
    """What reading one file of the run needs to know of the others: their paths (absolute),
    the folders files put on ``sys.path``, and the files that may call a loader."""

    #: Tells this run from any other of the process (``_resolving``'s memo).
    token: str
    paths: tuple[str, ...]
    extra: tuple[str, ...]
    loading: frozenset[str]


@dataclass(frozen=True)
class Facts:
    """What one file tells the graph (``read``): no tree, so it travels back from a worker."""

    path: str
    parsed: bool = False
    imports: tuple[Import, ...] = ()
    loads_any: bool = False
    #: An unreadable file counts as one that acts (``ModuleGraph.acts_on_import``).
    acts_on_import: bool = True
    handed_on: tuple[tuple[str, str, str], ...] = ()
    functions: tuple[summaries.Function, ...] = ()
    classes: tuple[tuple[str, frozenset[str]], ...] = ()
    definitions: tuple[str, ...] = ()
    #: Of its ``definitions``, those ``from <it> import *`` binds (``module_level.star_names``).
    star_names: tuple[str, ...] = ()


def read(path: str, text: str | bytes | None, run: _Run) -> Facts:
    """The facts of the file ``path`` (absolute) of ``run`` whose source is ``text``."""
    with trees.shared():  # one parse and one walk for every reading below
        tree = _parse(text)
        if tree is None:
            return Facts(path)
        resolver, graph = _resolving(run)
        module = graph.canonical(path)
        bindings = _bindings(path, tree, resolver, graph)
        return Facts(
            path,
            True,
            tuple(resolver.imports(path, tree)),
            path in run.loading and loads_any(path, tree),
            module_level.acts_on_import(tree),
            tuple(resolver.handed_on(path, tree)),
            summaries.read(tree, module, bindings),
            summaries.classes(tree, module, bindings),
            definitions := module_level.definitions(tree),
            module_level.star_names(tree, definitions),
        )


@functools.lru_cache(maxsize=1)
def _resolving(run: _Run) -> tuple[_Resolver, ModuleGraph]:
    """The resolver of ``run``'s imports, and its modules (for their canonical names): made
    once per process that reads files of the run."""
    index = _Index(list(run.paths))
    modules = {a: index.module(a) for a in run.paths}
    return _Resolver(index, modules, run.extra, run.loading), ModuleGraph(modules)


def _path_roots(
    parsed: Mapping[str, ast.Module], texts: Mapping[str, str | bytes | None]
) -> tuple[str, ...]:
    """The folders the files put on ``sys.path`` (``path_additions``), in order, once each."""
    found = (
        path_additions(path, tree)
        for path, tree in parsed.items()
        if mentions(texts.get(path), "sys.path")
    )
    return tuple(dict.fromkeys(r for roots in found for r in roots))


def _bindings(
    path: str, tree: ast.Module, resolver: _Resolver, graph: ModuleGraph
) -> dict[str, str]:
    """The names the file's imports bind (in any scope) -> the qualified names they stand
    for, a module of the run by its canonical name."""

    def named(dotted: str, level: int = 0) -> str | None:
        root, targets = resolver.resolve(path, dotted, level)
        if root is not None and targets:
            return graph.canonical(targets[-1])
        return dotted if not level else None

    out: dict[str, str] = {}
    for node, _ in trees.statements(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    found = named(alias.name)
                    if found:
                        out[alias.asname] = found
                else:
                    head = alias.name.partition(".")[0]
                    out[head] = named(head) or head
        elif isinstance(node, ast.ImportFrom):
            base = named(node.module or "", node.level) if (node.module or node.level) else None
            for alias in node.names:
                if alias.name != "*" and base:
                    out[alias.asname or alias.name] = f"{base}.{alias.name}"
    return out


def _respelled(entry: Import, spelled: Mapping[str, str]) -> Import:
    return replace(entry, targets=tuple(spelled[t] for t in entry.targets))


def _respelled_module(module: Module, path: str) -> Module:
    return Module(path, module.name, module.root, module.package)


def _parse(text: str | bytes | None) -> ast.Module | None:
    if text is None:
        return None
    if isinstance(text, bytes):
        return sources.tree_of(text)
    try:
        return trees.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return None


class _Index:
    """Which files and folders the run holds, and where packaging roots are."""

    def __init__(self, paths: list[str]) -> None:
        self.files = frozenset(paths)
        self.folders: set[str] = set()
        for path in paths:
            folder = os.path.dirname(path)
            while folder not in self.folders and os.path.dirname(folder) != folder:
                self.folders.add(folder)
                folder = os.path.dirname(folder)
        self._packaging: dict[str, tuple[str, ...]] = {}
        self._found: dict[tuple[str, str], tuple[str, ...] | None] = {}

    def is_package_folder(self, folder: str) -> bool:
        return os.path.join(folder, "__init__.py") in self.files

    def module(self, path: str) -> Module:
        folder, base = os.path.split(path)
        stem = base[:-3] if base.endswith(".py") else base
        package = stem == "__init__"
        parts = [] if package else [stem]
        while self.is_package_folder(folder):
            folder, name = os.path.split(folder)
            parts.insert(0, name)
        return Module(path, ".".join(parts), folder, package)

    def packaging_roots(self, folder: str) -> tuple[str, ...]:
        """Packaging roots at or above ``folder``, nearest first (with their ``src/``)."""
        found = self._packaging.get(folder)
        if found is None:
            parent = os.path.dirname(folder)
            above = self.packaging_roots(parent) if parent != folder else ()
            here: tuple[str, ...] = ()
            if any(os.path.isfile(os.path.join(folder, f)) for f in PACKAGING_FILES):
                source = os.path.join(folder, "src")
                here = (folder, source) if source in self.folders else (folder,)
            found = self._packaging[folder] = here + above
        return found

    def find(self, root: str, dotted: str) -> tuple[str, ...] | None:
        """The files ``import <dotted>`` executes when found on ``root`` (the package
        ``__init__``s on the way, then the module), or None when ``root`` does not hold it.
        A folder without ``__init__.py`` is a namespace package: it executes nothing."""
        key = (root, dotted)
        if key not in self._found:
            self._found[key] = self._find(root, dotted)
        return self._found[key]

    def _find(self, root: str, dotted: str) -> tuple[str, ...] | None:
        parts = dotted.split(".")
        folder = root
        executed: list[str] = []
        for part in parts[:-1]:
            folder = os.path.join(folder, part)
            if folder not in self.folders:
                return None
            if self.is_package_folder(folder):
                executed.append(os.path.join(folder, "__init__.py"))
        last = os.path.join(folder, parts[-1])
        if self.is_package_folder(last):
            return (*executed, os.path.join(last, "__init__.py"))
        if last + ".py" in self.files:
            return (*executed, last + ".py")
        if last in self.folders:
            return tuple(executed)  # a namespace package
        return None


class _Resolver:
    def __init__(
        self,
        index: _Index,
        modules: dict[str, Module],
        extra: tuple[str, ...],
        loading: frozenset[str] = frozenset(),
    ) -> None:
        self.index = index
        self.modules = modules
        self.extra = extra
        #: The files whose text names a loader (``mentions_loaders``): only they may call one.
        self.loading = loading
        self.roots = tuple(dict.fromkeys(m.root for m in modules.values()))

    def imports(self, path: str, tree: ast.Module) -> Iterator[Import]:
        loads = path in self.loading
        for node, lazy in _import_nodes(tree, loads):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    root, targets = self.resolve(path, alias.name)
                    yield Import(alias.name, 0, node.lineno, targets, lazy, root=root)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                root, targets = self.resolve(path, base, node.level)
                yield Import(base, node.level, node.lineno, targets, lazy, root=root)
                for alias in node.names:
                    # ``from a import b`` also executes ``a/b.py`` when that is a module
                    if alias.name == "*" or root is None:
                        continue
                    dotted = f"{base}.{alias.name}" if base else alias.name
                    sub = self.index.find(root, dotted) or ()
                    extra = tuple(t for t in sub if t not in targets)
                    if extra:
                        yield Import(dotted, node.level, node.lineno, extra, lazy, root=root)
            else:
                name = node.args[0].value  # type: ignore[attr-defined]
                root, targets = self.resolve(path, name)
                yield Import(name, 0, node.lineno, targets, True, True, root)  # type: ignore[attr-defined]
        if loads:
            yield from self._loaded(path, tree)

    def _loaded(self, path: str, tree: ast.Module) -> Iterator[Import]:
        """What the file's loader calls by a computed name or path may load."""
        for call, load in computed_loads(path, tree):
            if load is None:
                continue
            kind, value = load
            loaded: tuple[str, ...] = ()
            found_on = None
            if kind == "prefix":
                found_on, loaded = self.resolve(path, value[:-1])
                if found_on is None:
                    continue
                loaded += self._under(os.path.join(found_on, *value[:-1].split(".")))
            elif kind == "file":
                loaded = (value,) if value in self.index.files else ()
            else:
                loaded = self._under(value)
            yield Import(value + "*", 0, call.lineno, loaded, True, True, found_on)

    def _under(self, folder: str) -> tuple[str, ...]:
        """The run's files under ``folder``."""
        return tuple(sorted(f for f in self.index.files if f.startswith(folder + os.sep)))

    def handed_on(self, path: str, tree: ast.Module) -> Iterator[tuple[str, str, str]]:
        """``(alias, source file, name)`` of each module-level ``from M import name`` of a
        module ``M`` of the run that is not itself a module (a function, a class, a value);
        ``("*", source file, "*")`` for ``from M import *``."""
        for node in tree.body:
            if not isinstance(node, ast.ImportFrom):
                continue
            root, targets = self.resolve(path, node.module or "", node.level)
            if (
                root is None
                or not targets
                or (targets[-1].endswith("__init__.py") and not (node.module))
            ):
                continue
            source = targets[-1]
            base = node.module or ""
            for alias in node.names:
                dotted = f"{base}.{alias.name}" if base else alias.name
                if alias.name == "*":
                    yield "*", source, "*"  # each of its ``star_names`` (``_assembled``)
                elif not self.index.find(root, dotted):
                    yield alias.asname or alias.name, source, alias.name

    def resolve(self, path: str, dotted: str, level: int = 0) -> tuple[str | None, tuple[str, ...]]:
        """``(root, files)``: the run's files ``from <level dots><dotted> import ...`` in
        ``path`` executes, and the folder it found them on (None when none, or several)."""
        if level:
            folder = os.path.dirname(path)
            for _ in range(level - 1):
                folder = os.path.dirname(folder)
            if not dotted:
                init = os.path.join(folder, "__init__.py")
                return folder, ((init,) if init in self.index.files else ())
            found = self.index.find(folder, dotted)
            return (folder, found) if found is not None else (None, ())
        if not dotted or not all(p.isidentifier() for p in dotted.split(".")):
            return None, ()
        own, folder = self.modules[path].root, os.path.dirname(path)
        for root in (own, folder, *self.index.packaging_roots(folder), *self.extra):
            found = self.index.find(root, dotted)
            if found is not None:
                return root, found
        candidates = [(r, self.index.find(r, dotted)) for r in self.roots]
        held = [(r, found) for r, found in candidates if found]
        if len(held) == 1:
            return held[0]
        return None, tuple(dict.fromkeys(t for _, found in held for t in found))


def _import_nodes(tree: ast.Module, loads: bool) -> Iterator[tuple[ast.AST, bool]]:
    """Import statements and, when the file may call a loader (``loads``), loader calls by
    literal, in source order, with whether they run only when a function runs (a loader call
    always counts as such)."""
    found: list[tuple[ast.AST, bool]] = [
        (statement, lazy)
        for statement, lazy in trees.statements(tree)
        if isinstance(statement, (ast.Import, ast.ImportFrom))
    ]
    if loads:
        found += [(c, True) for c in trees.nodes(tree, ast.Call) if is_loader_call(c)]
    return iter(sorted(found, key=lambda pair: _start(pair[0])))


def _start(node: ast.AST) -> tuple[int, int]:
    return node.lineno, node.col_offset  # type: ignore[attr-defined]


def _starred(
    handed_on: tuple[tuple[str, str, str], ...],
    spelled: Mapping[str, str],
    stars: Mapping[str, tuple[str, ...]],
    module: str,
    modules: set[str],
) -> tuple[tuple[str, str, str], ...]:
    """``handed_on`` by the run's spelling of the paths, ``from M import *`` as each name it
    binds of those ``M`` defines (a name bound later wins, as in Python), but for a name of a
    submodule of ``module`` (``modules``: the run's module names): that spells the module."""
    out: dict[str, tuple[str, str, str]] = {}
    for alias, source, name in handed_on:
        if name == "*":
            bound = [(n, n) for n in stars.get(source, ()) if f"{module}.{n}" not in modules]
        else:
            bound = [(alias, name)]
        for each, defined in bound:
            out[each] = (each, spelled[source], defined)
    return tuple(out.values())
