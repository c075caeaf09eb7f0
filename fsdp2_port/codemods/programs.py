"""Which programs of the run a constructor's models can live in.

A model exists only in a process that ran its constructor. An *entry script* has a
module-level ``if __name__ == "__main__":`` and no file of the run imports it (``import``,
``from``, ``importlib.import_module``, ``runpy``, by a literal): it runs as its own program.
Its lines can meet a constructor's models only if the script reaches the constructor
itself, through the functions that hold it:

- the holder of a constructor is its innermost function (its class for ``__init__``, other
  dunders and ``forward``, which are reached through the class); a constructor in a class
  body or at module level is held by its module;
- a function or class is reached where its name is read (a name, an attribute, a string
  naming it), except in a file whose own function or class of that name every read there
  finds; a read inside another function or class is followed by that one's name, one
  at module level reaches its module; a function of an entry script is read only there
  (one read nowhere, ``_mp_fn`` for a launcher, runs in that script's program, unless a
  config names it); a test pytest collects is reached where its module is.

A constructor runs in the programs of the modules that reach it: an entry script's own, or,
in a whole program, those that import the module (``ProgramMap``). Any doubt answers "any
program": a holder never read in the run (called from outside it, or by a config: a config
file of the run's folders that names it counts as a read too), a module code outside the
run may import, a file that does not parse, too many names. Lines outside entry scripts can
always meet every model of the run, unless the run is a whole program.
"""

from __future__ import annotations

import ast
import os
import re
import weakref
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from fsdp2_port.codemods import sources, syntax, trees
from fsdp2_port.codemods.assumptions import PACKAGING_FILES
from fsdp2_port.codemods.semantic.programs import ConfigNames, ProgramMap, config_names

#: Functions reached through their class rather than by name.
_THROUGH_CLASS = re.compile(r"__\w+__|forward")
#: Import statements (parenthesized or continued ones whole) and calls that load a module by
#: a name or path given as a string; a docstring that shows one counts too.
_IMPORTS = re.compile(
    rb"^[ \t]*(?:from[ \t]+[\w.]+[ \t]+import[ \t]*(?:\([^)]*\)|[^\n]*(?:\\\n[^\n]*)*)"
    rb"|import[ \t]+[^\n]*(?:\\\n[^\n]*)*)"
    rb"|\b(?:import_module|__import__|run_path|run_module|spec_from_file_location)[ \t]*\([^)]*\)",
    re.MULTILINE,
)
#: A module-level ``if __name__ == "__main__":``.
_MAIN_GUARD = re.compile(
    rb"^if[ \t(]+(?:__name__[ \t]*==[ \t]*([\"'])__main__\1"
    rb"|([\"'])__main__\2[ \t]*==[ \t]*__name__)",
    re.MULTILINE,
)
#: Past this many names followed for one constructor, it may run in any program.
_MAX_NAMES = 64


@dataclass(frozen=True)
class Programs:
    """``entry``: the run's entry scripts; ``runs_in``: constructor id -> the entry scripts
    whose programs may run it (``None``: any program); ``never_run``: of the lines asked
    about, ``(path, line)`` of those no program of a whole program runs (``unreached``);
    ``map``: which programs each file runs in, by the run's imports (None: any)."""

    entry: frozenset[str] = frozenset()
    runs_in: Mapping[str, frozenset[str] | None] = field(default_factory=dict)
    never_run: frozenset[tuple[str, int]] = frozenset()
    map: ProgramMap | None = None
    #: Of the lines asked about, ``(path, line)`` -> the entry scripts whose programs may run
    #: it (``runs_in``; None: any program), as for constructors.
    lines_run_in: Mapping[tuple[str, int], frozenset[str] | None] = field(default_factory=dict)

    def runs_nowhere(self, path: str) -> bool:
        """In a whole program, no program runs ``path`` (``ProgramMap``: no root imports it)."""
        return (
            self.map is not None
            and not self.map.open
            and path in self.map.member_of
            and not self.map.member_of[path]
        )

    def may_meet(self, path: str, constructor: str, line: int | None = None) -> bool:
        """Whether the models of ``constructor`` may reach a line of ``path`` (``line``: that
        line, when it was asked about): one process runs both (``ProgramMap``), and the
        constructor's holder, and the line's, are reached there."""
        only = self.lines_run_in.get((path, line)) if line is not None else None
        if only is not None and self.map is not None and path in self.map.member_of:
            only = only & self.map.member_of[path]  # no program runs a file it never imports
        if only is not None:
            where = self.runs_in.get(constructor)
            home = _home(constructor)
            roots = self.map.member_of.get(home) if self.map is not None else None
            if where is not None:
                return not only.isdisjoint(where)
            return roots is None or not only.isdisjoint(roots)
        where = self.runs_in.get(constructor)
        if self.map is None or path not in self.map.member_of:
            return path not in self.entry or where is None or path in where
        home = _home(constructor)
        if home not in self.map.member_of:
            return True
        if where is None:
            return self.map.meet(path, home)
        return not (self.map.member_of[home] & where).isdisjoint(self.map.member_of[path])


def _home(constructor: str) -> str:
    """The file of a constructor id (``path:line:column``, ``fsdp2 path:line``)."""
    if constructor.startswith("fsdp2 "):
        return constructor[len("fsdp2 ") :].rsplit(":", 1)[0]
    return constructor.rsplit(":", 2)[0]


def entry_scripts(paths: Iterable[str]) -> frozenset[str]:
    """The run's entry scripts: their module-level names are their own (no module of the run
    imports them)."""
    paths = list(paths)
    return frozenset(_Run(paths).entry(paths))


def has_main_guard(data: bytes) -> bool:
    """A module-level ``if __name__ == "__main__":`` (an entry script, in a run of its own)."""
    return bool(_MAIN_GUARD.search(data))


def find(
    paths: Iterable[str],
    constructors: Iterable[tuple[str, str, int]],
    lines: Iterable[str],
    entry_scripts: frozenset[str] | None = None,
    unread: Iterable[tuple[str, int]] = (),
    program_map: ProgramMap | None = None,
    leaving: Iterable[tuple[str, int, str]] = (),
    rewritten: Iterable[tuple[str, int]] = (),
    configs: ConfigNames | None = None,
) -> Programs:
    """The run's programs, for constructors given as ``(id, path, line)`` and the files whose
    lines may meet models (``lines``); ``entry_scripts``: the run's, when already known;
    ``unread``: lines to test with ``unreached`` (a whole program's: nothing outside the run
    calls its functions), and the programs of each that some program runs; ``leaving``: the
    imports ``(path, line, module)`` the run rewrites to import another module; ``rewritten``:
    more lines to test with ``unreached`` only; ``configs``: what the run's config files
    spell, when already read (``semantic.programs.config_names``)."""
    run = _Run(list(paths), leaving, program_map, configs)
    if entry_scripts is not None:
        run.seed(entry_scripts)
    entry = run.entry(lines)
    unread = list(unread)
    asked = dict.fromkeys([*unread, *rewritten])
    never_run = frozenset(at for at in asked if run.unreached(*at))
    if not entry and (program_map is None or program_map.open):
        return Programs(never_run=never_run, map=program_map)
    return Programs(
        frozenset(entry),
        {cid: run.runs_in(path, line) for cid, path, line in constructors},
        never_run,
        program_map,
        {at: run.runs_in(*at) for at in unread if at not in never_run},
    )


class _Run:
    def __init__(
        self,
        paths: list[str],
        leaving: Iterable[tuple[str, int, str]] = (),
        program_map: ProgramMap | None = None,
        configs: ConfigNames | None = None,
    ) -> None:
        self.paths = paths
        #: Which programs each file runs in, by the run's imports (``semantic.programs``).
        self.map = program_map
        #: The lines of imports the run rewrites away from a module.
        self.leaving = {(path, line) for path, line, _ in leaving}
        self._data: dict[str, bytes] = {}
        self._trees: dict[str, ast.Module | None] = {}
        self._configs = configs
        self._entry: dict[str, bool] = {}
        self._loaded: dict[str, set[str]] | None = None
        self._unreached: dict[tuple[str, str], bool] = {}
        self._packaging: list[bytes] | None = None
        self._words: dict[bytes, list[str]] | None = None
        self._function_reads: dict[str, dict[str, set[int]] | None] = {}
        self._modules: frozenset[str] | None = None

    def data(self, path: str) -> bytes:
        if path not in self._data:
            try:
                self._data[path] = sources.read_bytes(path)
            except sources.UnreadableSource:
                self._data[path] = b""
        return self._data[path]

    def tree(self, path: str) -> ast.Module | None:
        if path not in self._trees:
            self._trees[path] = sources.tree_of(self.data(path))
        return self._trees[path]

    def holding(self, word: str) -> list[str]:
        """The files whose text has ``word`` as a word (from an index of every file's words,
        built once)."""
        if self._words is None:
            self._words = defaultdict(list)
            for path in self.paths:
                for found in set(_WORDS.findall(self.data(path))):
                    self._words[found].append(path)
        return self._words.get(word.encode(), [])

    def seed(self, entry: frozenset[str]) -> None:
        """Every path's status as an entry script, known already (``entry_scripts``)."""
        self._entry = {path: path in entry for path in self.paths}

    def entry(self, paths: Iterable[str]) -> set[str]:
        """Of ``paths``, the entry scripts (their statuses are kept: ``is_entry``)."""
        found = set()
        for path in paths:
            if path not in self._entry:
                stem = os.path.splitext(os.path.basename(path))[0]
                self._entry[path] = has_main_guard(self.data(path)) and not (
                    self.loaded().get(stem, set()) - {path}
                )
            if self._entry[path]:
                found.add(path)
        return found

    def loaded(self) -> dict[str, set[str]]:
        """Each word of the run's import statements and loader calls -> the files it is in."""
        if self._loaded is None:
            self._loaded = {}
            for path in self.paths:
                for statement in _IMPORTS.findall(self.data(path)):
                    for word in re.findall(rb"\w+", statement):
                        self._loaded.setdefault(word.decode(), set()).add(path)
        return self._loaded

    def is_entry(self, path: str) -> bool:
        if path not in self._entry:
            self.entry([path])
        return self._entry[path]

    def runs_in(self, path: str, line: int) -> frozenset[str] | None:
        """The entry scripts whose programs may run the constructor at ``path:line``."""
        tree = self.tree(path)
        if tree is None:
            return None
        modules: set[str] = set()
        todo: list[tuple[str | None, str]] = [(_holder(tree, line), path)]
        seen: set[tuple[str | None, str | None]] = set()
        while todo:
            name, home = todo.pop()
            if name is None:  # module-level code: it runs wherever the module runs
                roots = self._roots_of(home)
                if roots is None:
                    return None
                modules |= roots
                continue
            scope = home if self.is_entry(home) else None
            if (name, scope) in seen:
                continue
            seen.add((name, scope))
            if len(seen) > _MAX_NAMES or (scope is None and self._configured(name)):
                return None
            readers = [home] if scope else self.holding(name)
            function = _function_only(self.tree(home), name)
            found = False
            for reader in readers:
                tree = self.tree(reader)
                if tree is None:
                    return None
                if reader != home and _own_name(tree, name):
                    continue  # its reads are of its own function or class
                lines = self._function_reads_of(reader, tree, name) if function else None
                for holder in _readers_of(tree, name, lines):
                    found = True
                    todo.append((holder, reader))
            if not found:
                if self._configured(name):
                    return None
                if scope is None and _collected(home, name, "test"):
                    roots = self._roots_of(home)  # pytest runs it with its module
                    if roots is None:
                        return None
                    modules |= roots
                elif scope is None:
                    return None  # read by no line of the run: called from outside it
                else:
                    modules.add(home)  # an entry script's own, read nowhere: its program's
        return frozenset(modules)

    def _roots_of(self, path: str) -> frozenset[str] | None:
        """The programs that run ``path``'s module-level code: its own for an entry script,
        else those that import it (``ProgramMap.member_of``); None: any program (no map, or
        code outside the run may import it)."""
        if self.is_entry(path):
            return frozenset([path])
        return None if self.map is None else self.map.runs_of(path)

    def unreached(self, path: str, line: int) -> bool:
        """In a whole program, whether no program runs ``line``: it lies in a module-level
        function (no decorator) that no line of the run reads, or that only such functions
        read, and no config or packaging file (a console script) names; or in a method of a
        module-level class (no decorator) no line of the run names once the run is written
        (``_unbuilt``), or in a method no line of the run reads but its class's own unread
        methods (``_method_unread``). Anything else may run (a framework may call a method
        of a class with a base by a name the run never spells; code at module level; what
        pytest collects: ``_collected``)."""
        tree = self.tree(path)
        if tree is None:
            return False
        function = _module_function(tree, line)
        if function is not None:
            key = (path, function.name)
            if key not in self._unreached:
                self._unreached[key] = self._unread(path, function)
            return self._unreached[key]
        owner = _module_class(tree, line)
        if owner is None:
            return False
        key = (path, owner.name)
        if key not in self._unreached:
            self._unreached[key] = self._unbuilt(path, owner)
        if self._unreached[key]:
            return True
        method = _method_of(owner, line)
        return method is not None and self._method_unread(path, owner, method)

    def _method_unread(
        self, path: str, owner: ast.ClassDef, first: ast.FunctionDef | ast.AsyncFunctionDef
    ) -> bool:
        """No line of the run reads the method ``first`` of ``owner`` (a module-level class of
        ``path`` with no base, metaclass or decorator: nothing calls its methods by a
        convention), but other such methods of ``owner``: by its name as an attribute, a
        string or a name, in any file, or in a config or packaging file. A dunder,
        ``forward`` and a decorated method may be called by other means."""
        if owner.decorator_list or owner.keywords or _based(owner):
            return False
        if _collected(path, owner.name, "Test"):
            return False  # pytest calls its methods by their names
        todo = [first]
        seen: set[str] = set()
        while todo:
            method = todo.pop()
            if method.name in seen:
                continue
            seen.add(method.name)
            if method.decorator_list or _THROUGH_CLASS.fullmatch(method.name):
                return False
            if self._configured(method.name) or self._packaged(method.name):
                return False
            if len(seen) > _MAX_NAMES:
                return False
            for reader in self.holding(method.name):
                tree = self.tree(reader)
                if tree is None or reader != path:
                    if tree is None or _reads_of(tree, method.name):
                        return False
                    continue
                for line in _reads_of(tree, method.name):
                    holder = _method_of(owner, line)
                    if holder is None:
                        return False  # read outside the class's methods
                    todo.append(holder)
        return True

    def _unbuilt(self, path: str, owner: ast.ClassDef) -> bool:
        """No line of the run names the class ``owner`` of ``path`` once the run is written:
        only its own body and imports the run rewrites to another module spell it, and no
        config or packaging file does. A class with a base, a metaclass or a decorator may be
        registered where it is defined, and built by a framework from there: it may run."""
        registered = owner.decorator_list or owner.keywords or _based(owner)
        if registered or self._configured(owner.name) or self._packaged(owner.name):
            return False
        if _collected(path, owner.name, "Test"):
            return False
        for reader in self.holding(owner.name):
            tree = self.tree(reader)
            if tree is None:
                return False
            if reader == path:
                lines = _reads_of(tree, owner.name)
                if not all(_within(owner, line) for line in lines):
                    return False
            elif not (
                self._imports_elsewhere(reader, tree, owner.name) or _own_name(tree, owner.name)
            ):
                return False
        return True

    def _imports_elsewhere(self, path: str, tree: ast.Module, name: str) -> bool:
        """Whether ``path`` reads ``name`` only as the name ``from ... import name`` binds,
        each of those imports one the run rewrites to import another module."""
        imports = [
            s
            for s, _ in trees.statements(tree)
            if isinstance(s, ast.ImportFrom) and any(a.name == name for a in s.names)
        ]
        if not imports or any((path, s.lineno) not in self.leaving for s in imports):
            return False
        return not any(
            (isinstance(n, ast.Attribute) and n.attr == name)
            or (isinstance(n, ast.Constant) and n.value == name)
            or (isinstance(n, ast.alias) and n.asname is not None and n.name == name)
            for n in trees.nodes(tree, ast.Attribute, ast.Constant, ast.alias)
        )

    def _unread(self, path: str, first: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
        todo: list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef | None]] = [(path, first)]
        seen: set[tuple[str, str]] = set()
        while todo:
            home, function = todo.pop()
            if function is None or function.decorator_list:
                return False
            if (home, function.name) in seen:
                continue
            if self._configured(function.name) or self._packaged(function.name):
                return False
            if _collected(home, function.name, "test"):
                return False
            seen.add((home, function.name))
            if len(seen) > _MAX_NAMES:
                return False
            for reader in self.holding(function.name):
                tree = self.tree(reader)
                if tree is None:
                    return False
                if reader != home and _own_name(tree, function.name):
                    continue  # its reads are of its own function or class
                todo += [
                    (reader, _module_function(tree, r))
                    for r in self._function_reads_of(reader, tree, function.name)
                ]
        return True

    def _function_reads_of(self, path: str, tree: ast.Module, name: str) -> list[int]:
        """The lines of ``tree`` that may read the module-level function ``name``: as
        ``_reads_of``, but an attribute only on a name the file imports (``helpers.name``,
        ``pkg.helpers.name``) or on no name (``load().name``): ``wrapper.name(...)`` on a
        local object calls its class's method. A file that reads a module it may import
        (``import m``, or ``from pkg import m`` where the run has a module ``m``) other than as
        an attribute's object (``run(helpers)``) may read the function on any object."""
        if path not in self._function_reads:
            self._function_reads[path] = _function_read_index(tree, self._module_names())
        found = self._function_reads[path]
        return sorted(found.get(name, ())) if found is not None else _reads_of(tree, name)

    def _module_names(self) -> frozenset[str]:
        """The last parts of the run's module names (``helpers`` for ``pkg/helpers.py``)."""
        if self._modules is None:
            stems = {os.path.splitext(os.path.basename(p))[0] for p in self.paths}
            stems |= {os.path.basename(os.path.dirname(p)) for p in self.paths}
            self._modules = frozenset(stems)
        return self._modules

    def _packaged(self, name: str) -> bool:
        """Whether a packaging file above the run (``pyproject.toml``, ``setup.cfg``,
        ``setup.py``) names ``name``: a console script calls it from outside the run."""
        if self._packaging is None:
            self._packaging = list(_packaging_texts(self.paths))
        return _spelled(self._packaging, name)

    def _configured(self, name: str) -> bool:
        if self._configs is None:
            self._configs = config_names(self.paths)
        return name in self._configs.words


_WORDS = re.compile(rb"\w+")


def _word(word: str) -> re.Pattern[bytes]:
    return re.compile(rb"\b" + re.escape(word.encode()) + rb"\b")


def _spelled(texts: Iterable[bytes], word: str) -> bool:
    """Whether any of ``texts`` has ``word`` as a word."""
    pattern = _word(word)
    return any(pattern.search(text) for text in texts)


def _holder(tree: ast.Module, line: int) -> str | None:
    """The name that reaches the code at ``line``: its innermost function's (its class's for
    a dunder or ``forward``); ``None`` for a class body or module level."""
    holder: str | None = None
    body: list[ast.stmt] = tree.body
    classes: list[str] = []
    while True:
        inner = next(
            (
                s
                for s in body
                if s.lineno <= line <= (s.end_lineno or s.lineno)
                and isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            ),
            None,
        )
        if inner is None:
            blocks = [
                s for s in body if s.lineno <= line <= (s.end_lineno or s.lineno) and _blocks(s)
            ]
            if not blocks:
                return holder
            body = [b for block in _blocks(blocks[0]) for b in block]
            continue
        if isinstance(inner, ast.ClassDef):
            if any(_within(b, line) for b in inner.bases + inner.keywords):
                return inner.name  # a base class: reached when the class is instantiated
            classes.append(inner.name)
            body = inner.body
            continue
        if not any(_within(s, line) for s in inner.body):
            return holder  # decorators, defaults: evaluated where the function is defined
        holder = classes[-1] if _THROUGH_CLASS.fullmatch(inner.name) and classes else inner.name
        classes = []
        body = inner.body


def _within(node: ast.AST, line: int) -> bool:
    start = getattr(node, "lineno", None)
    return start is not None and start <= line <= (getattr(node, "end_lineno", None) or start)


def _blocks(statement: ast.stmt) -> list[list[ast.stmt]]:
    found = []
    for name in ("body", "orelse", "finalbody"):
        block = getattr(statement, name, None)
        if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
            found.append(block)
    for handler in getattr(statement, "handlers", ()):
        found.append(handler.body)
    for case in getattr(statement, "cases", ()):
        found.append(case.body)
    return found


def _based(owner: ast.ClassDef) -> bool:
    """A base other than ``object``."""
    return any(not (isinstance(b, ast.Name) and b.id == "object") for b in owner.bases)


def _collected(path: str, name: str, prefix: str) -> bool:
    """Whether pytest collects ``name`` from ``path`` (``test_*.py`` or ``*_test.py``; a
    function named ``test*``, a class ``Test*``): no line of the run calls it, pytest does."""
    file = os.path.basename(path)
    tests = file.startswith("test_") or file.endswith("_test.py")
    return tests and file.endswith(".py") and name.startswith(prefix)


def _module_class(tree: ast.Module, line: int) -> ast.ClassDef | None:
    """The module-level class whose body holds ``line`` (None elsewhere, and in its bases,
    keywords and decorators: those run when the module is imported)."""
    for statement in tree.body:
        if isinstance(statement, ast.ClassDef) and any(_within(s, line) for s in statement.body):
            return statement
    return None


def _method_of(owner: ast.ClassDef, line: int) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The method of ``owner`` whose body holds ``line``."""
    for statement in owner.body:
        if isinstance(statement, syntax.FUNCTIONS) and any(
            _within(s, line) for s in statement.body
        ):
            return statement
    return None


def _module_function(tree: ast.Module, line: int) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The module-level function whose body holds ``line`` (None at module level, in a class,
    in a decorator or a default: those run when the module is imported)."""
    for statement in tree.body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
            _within(s, line) for s in statement.body
        ):
            return statement
    return None


def _readers_of(tree: ast.Module, name: str, lines: list[int] | None = None) -> list[str | None]:
    """The holders (``_holder``) of each line of ``tree`` that reads ``name`` (``lines``:
    those lines, when known)."""
    known: dict[int, str | None] = trees.derived(tree, "holders", None, dict)
    lines = _reads_of(tree, name) if lines is None else lines
    for line in lines:
        if line not in known:
            known[line] = _holder(tree, line)
    return [known[line] for line in lines]


def _function_only(tree: ast.Module | None, name: str) -> bool:
    """``tree`` defines a module-level function ``name`` and no method of that name: code
    that reaches a line of it is code that reads the function (``_function_reads_of``)."""
    if tree is None:
        return False
    if not any(isinstance(s, syntax.FUNCTIONS) and s.name == name for s in tree.body):
        return False
    return not any(
        isinstance(item, syntax.FUNCTIONS) and item.name == name
        for s in tree.body
        if isinstance(s, ast.ClassDef)
        for item in s.body
    )


def _own_name(tree: ast.Module, name: str) -> bool:
    """``tree`` defines a function or class ``name`` at module level, imports nothing so
    named, and spells it only as a name: Python finds its own definition for each read."""
    if not any(
        isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and s.name == name
        for s in tree.body
    ):
        return False
    return not any(
        (isinstance(n, ast.Attribute) and n.attr == name)
        or (isinstance(n, ast.Constant) and isinstance(n.value, str) and _named(n.value) == name)
        or (isinstance(n, ast.alias) and name in (n.name.rsplit(".", 1)[-1], n.asname))
        for n in trees.nodes(tree, ast.Attribute, ast.Constant, ast.alias)
    )


def _named(text: str) -> str:
    """The name a string may spell: after its last ``.`` or ``:`` (``"pkg.mod:main"``)."""
    return re.split(r"[.:]", text)[-1]


def _reads_of(tree: ast.Module, name: str) -> list[int]:
    """The lines of ``tree`` that read ``name`` (a name, an attribute, a string naming it, an
    import under another name)."""
    return sorted(_read_index(tree).get(name, ()))


_READ_INDEXES: weakref.WeakKeyDictionary[ast.Module, dict[str, set[int]]] = (
    weakref.WeakKeyDictionary()
)


def _function_read_index(tree: ast.Module, modules: frozenset[str]) -> dict[str, set[int]] | None:
    """``_Run._function_reads_of``'s index of ``tree`` (None: any attribute may read it)."""
    imported: set[str] = set()
    may_be_modules: set[str] = set()
    for node in trees.nodes(tree, ast.Import, ast.ImportFrom):
        assert isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names:
            bound = (alias.asname or alias.name).partition(".")[0]
            imported.add(bound)
            if isinstance(node, ast.Import) or alias.name in modules:
                may_be_modules.add(bound)
    objects = {id(n.value) for n in trees.nodes(tree, ast.Attribute)}  # type: ignore[attr-defined]
    if any(
        isinstance(n, ast.Name) and n.id in may_be_modules and id(n) not in objects
        for n in trees.nodes(tree, ast.Name)
    ):
        return None

    def on_a_module(attribute: ast.Attribute) -> bool:
        root: ast.expr = attribute.value
        while isinstance(root, ast.Attribute):
            root = root.value
        return not isinstance(root, ast.Name) or root.id in imported

    return _indexed(tree, on_a_module)


def _read_index(tree: ast.Module) -> dict[str, set[int]]:
    """Each name ``tree`` reads -> its lines (``_reads_of``), found in one walk per tree."""
    found = _READ_INDEXES.get(tree)
    if found is None:
        found = _READ_INDEXES[tree] = _indexed(tree, lambda attribute: True)
    return found


def _indexed(tree: ast.Module, counts: Callable[[ast.Attribute], bool]) -> dict[str, set[int]]:
    """Each name ``tree`` reads -> its lines: names, the attributes ``counts`` keeps, strings
    (the name after their last ``.`` or ``:``: ``"pkg.mod:main"``), imports under another
    name."""
    found: dict[str, set[int]] = defaultdict(set)
    for node in trees.nodes(tree, ast.Name, ast.Attribute, ast.Constant, ast.alias):
        if isinstance(node, ast.Name):
            found[node.id].add(node.lineno)
        elif isinstance(node, ast.Attribute):
            if counts(node):
                found[node.attr].add(node.lineno)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found[_named(node.value)].add(node.lineno)
        elif isinstance(node, ast.alias) and node.asname:
            found[node.name].add(node.lineno)
    return found


def _packaging_texts(paths: list[str]) -> Iterable[bytes]:
    """The packaging files of the folders above the run's files, up to the file system's
    root (where console scripts name the functions they call)."""
    folders: set[str] = set()
    for directory in {os.path.dirname(os.path.abspath(p)) for p in paths}:
        while directory not in folders:
            folders.add(directory)
            directory = os.path.dirname(directory)
    for folder in sorted(folders):
        for name in PACKAGING_FILES:
            try:
                yield sources.read_bytes(os.path.join(folder, name))
            except sources.UnreadableSource:
                continue
