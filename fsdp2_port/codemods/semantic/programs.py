"""Which programs each file of the run runs in.

A model lives only in a process that ran its constructor, and a line runs only in a process
that imported its module. A *program* starts at a root file and runs what its imports execute
(``ModuleGraph.closure``). The roots:

- an entry script: a module-level ``if __name__ == "__main__":`` and no file of the run
  importing it;
- a test module (``test_*.py``, ``*_test.py``, ``conftest.py``), which pytest runs with the
  ``conftest.py`` files of its folder and the folders above;
- in a whole program (``--whole-program``), every file no other file of the run imports and
  whose module-level code does more than define (``ModuleGraph.acts_on_import``): a module run
  by ``python -m``, ``torchrun`` or a launcher needs no main guard, but one that only defines
  functions and classes that nothing imports runs nothing.

A file that loads modules by a name computed at run time (``import_module(name)``) may run any
file, and a module a config file of the run names (``pkg.models.build``) may be loaded by any
program. Unless the run is the whole program, a file that is not an entry script may also be
imported by code outside the run: such files are *open*, and two open files may meet in a
program the run does not hold.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from fsdp2_port.codemods import sources
from fsdp2_port.codemods.assumed import either_way
from fsdp2_port.codemods.assumptions import CONFIG_SUFFIXES, SKIPPED_DIRS
from fsdp2_port.codemods.semantic.modules import ModuleGraph

#: A module-level ``if __name__ == "__main__":``.
_MAIN_GUARD = re.compile(
    rb"^if[ \t(]+(?:__name__[ \t]*==[ \t]*([\"'])__main__\1"
    rb"|([\"'])__main__\2[ \t]*==[ \t]*__name__)",
    re.MULTILINE,
)
_TEST_MODULE = re.compile(r"(test_\w*|\w*_test|conftest)\.py")
#: Past this size, a file in a folder of config files only is data.
_MAX_CONFIG_BYTES = 1 << 20


def has_main_guard(data: bytes) -> bool:
    """A module-level ``if __name__ == "__main__":``."""
    return bool(_MAIN_GUARD.search(data))


@dataclass(frozen=True)
class ProgramMap:
    """``member_of``: each file -> the roots whose programs run it; ``open``: the files code
    outside the run may import; ``entry``: the entry scripts."""

    member_of: Mapping[str, frozenset[str]] = field(default_factory=dict)
    open: frozenset[str] = frozenset()
    entry: frozenset[str] = frozenset()

    def runs_of(self, path: str) -> frozenset[str] | None:
        """The roots whose programs run ``path`` (None: any, for a file code outside the run
        may import, or one the map does not hold)."""
        if path in self.open or path not in self.member_of:
            return None
        return self.member_of[path]

    def meet(self, first: str, second: str) -> bool:
        """Whether one process may run lines of both files."""
        if first in self.open and second in self.open:
            return True
        return not self.member_of.get(first, frozenset()).isdisjoint(
            self.member_of.get(second, frozenset())
        )


def find(
    graph: ModuleGraph,
    texts: Mapping[str, bytes],
    configs: ConfigNames | None = None,
    *,
    whole_program: bool = False,
) -> ProgramMap:
    """The programs of the run whose files are ``graph``'s (``texts``: their bytes; ``configs``:
    the texts of the run's config files)."""
    paths = list(graph.modules)
    entry = frozenset(
        p for p in paths if has_main_guard(texts.get(p, b"")) and not graph.importers(p)
    )
    tests = [p for p in paths if _TEST_MODULE.fullmatch(os.path.basename(p))]
    roots = set(entry) | set(tests)
    if whole_program:  # run by ``python -m``, ``torchrun``, a launcher: if it does anything
        roots |= {p for p in paths if not graph.importers(p) and p in graph.acts_on_import}
    runs: dict[str, set[str]] = {p: set() for p in paths}
    reached = _Reached(graph, paths, configs)
    for root in roots:
        for path in reached(root):
            runs[path].add(root)
    opened = frozenset() if whole_program else frozenset(p for p in paths if p not in entry)
    return ProgramMap({p: frozenset(r) for p, r in runs.items()}, opened, entry)


class _Reached:
    """The files a program that starts at a root runs: what its imports execute, the
    ``conftest.py`` files pytest loads with a test, modules a config names; every file when
    one of them loads modules by a name computed at run time."""

    def __init__(self, graph: ModuleGraph, paths: list[str], configs: ConfigNames | None) -> None:
        self.graph = graph
        self.paths = paths
        self.everywhere = [
            p for p, m in graph.modules.items() if configs is not None and configs.name(m.name)
        ]
        self.conftests = {
            os.path.dirname(os.path.abspath(p)): p
            for p in paths
            if os.path.basename(p) == "conftest.py"
        }

    def __call__(self, root: str) -> set[str]:
        graph = self.graph
        reached = set(graph.closure(root))
        for conftest in _conftests(root, self.conftests):
            reached |= graph.closure(conftest)
        if reached & graph.loads_any:
            return set(self.paths)
        for loaded in self.everywhere:
            reached |= graph.closure(loaded)
        return reached


def _conftests(path: str, conftests: Mapping[str, str]) -> list[str]:
    """The ``conftest.py`` files (``conftests``: by folder) pytest loads with a test module:
    its folder's and those of the folders above it."""
    if not _TEST_MODULE.fullmatch(os.path.basename(path)):
        return []
    found = []
    folder = os.path.dirname(os.path.abspath(path))
    while True:
        if folder in conftests and conftests[folder] != path:
            found.append(conftests[folder])
        parent = os.path.dirname(folder)
        if parent == folder:
            return found
        folder = parent


@dataclass(frozen=True)
class ConfigNames:
    """What the run's config files spell (``config_names``): their words, and each run of
    dotted words cut at each dot (``pkg``, ``pkg.models``, ``pkg.models.build``)."""

    words: frozenset[str] = frozenset()
    dotted: frozenset[str] = frozenset()
    #: The first words of dotted runs whose second word starts like a name (``models`` of
    #: ``models.build``).
    heads: frozenset[str] = frozenset()

    def name(self, module: str) -> bool:
        """Whether a config names the module ``module`` (``pkg.models`` in ``_target_:
        pkg.models.X``); a top-level module only as the head of a dotted name
        (``models.build``), its name alone being too common a word."""
        if not module:
            return False
        return module in (self.dotted if "." in module else self.heads)

    def merged(self, other: ConfigNames) -> ConfigNames:
        return ConfigNames(
            self.words | other.words, self.dotted | other.dotted, self.heads | other.heads
        )


def config_names(paths: list[str]) -> ConfigNames:
    """What the config files of the run (``config_texts``) spell. Below the run's folders
    (a Hydra ``conf/`` tree), a function counts only as the end of a dotted name
    (``_target_: pkg.train.build``): alone, it is too common a word (``wrap: 1`` in docs)."""
    near: list[bytes] = []
    below: list[bytes] = []
    for text, deeper in config_texts(paths):
        (below if deeper else near).append(text)
    return spelled_in(near).merged(spelled_in(below, dotted_only=True))


def spelled_in(texts: Iterable[bytes], dotted_only: bool = False) -> ConfigNames:
    """What ``texts`` spell (``ConfigNames``); ``dotted_only``: their words only where they end
    a dotted name."""
    words: set[str] = set()
    dotted: set[str] = set()
    heads: set[str] = set()
    for text in texts:
        if not dotted_only:
            words.update(w.decode() for w in _WORD.findall(text))
        for run in _DOTTED.findall(text):
            parts = run.decode().split(".")
            dotted.update(".".join(parts[: i + 1]) for i in range(len(parts)))
            if len(parts) > 1 and _NAME_START.match(parts[1]):
                heads.add(parts[0])
            if dotted_only and len(parts) > 1:
                words.add(parts[-1])
    return ConfigNames(frozenset(words), frozenset(dotted), frozenset(heads))


_WORD = re.compile(rb"\w+")
_DOTTED = re.compile(rb"[\w.]+")
_NAME_START = re.compile(r"[A-Za-z_]")


def config_texts(paths: list[str]) -> Iterable[tuple[bytes, bool]]:
    """The texts of the config files of the folders the run's files are in, and of the folders
    below them that hold none of its files (a Hydra ``conf/`` tree; there, a file over
    ``_MAX_CONFIG_BYTES`` is data, not a config), each with whether it is below."""
    run_dirs = {os.path.dirname(os.path.abspath(p)) for p in paths}
    todo = [(d, False) for d in sorted(run_dirs, reverse=True)]
    while todo:
        directory, below = todo.pop()
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError:
            continue
        folders = []
        for entry in entries:
            name = entry.name
            if entry.is_dir(follow_symlinks=False):
                if entry.path not in run_dirs and not either_way(SKIPPED_DIRS, name):
                    folders.append((entry.path, True))
            elif (
                either_way(CONFIG_SUFFIXES, name, member=name.endswith(CONFIG_SUFFIXES.names))
                and entry.is_file()
                and not (below and entry.stat().st_size > _MAX_CONFIG_BYTES)
            ):
                try:
                    yield sources.read_bytes(entry.path), below
                except sources.UnreadableSource:
                    continue
        todo += reversed(folders)
