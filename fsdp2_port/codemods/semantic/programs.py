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

from fsdp2_port.codemods.semantic.modules import ModuleGraph

#: A module-level ``if __name__ == "__main__":``.
_MAIN_GUARD = re.compile(
    rb"^if[ \t(]+(?:__name__[ \t]*==[ \t]*([\"'])__main__\1"
    rb"|([\"'])__main__\2[ \t]*==[ \t]*__name__)",
    re.MULTILINE,
)
_TEST_MODULE = re.compile(r"(test_\w*|\w*_test|conftest)\.py")


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
    configs: Iterable[bytes] = (),
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

    def __init__(self, graph: ModuleGraph, paths: list[str], configs: Iterable[bytes]) -> None:
        self.graph = graph
        self.paths = paths
        self.everywhere = list(_configured(graph, list(configs)))
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


def _configured(graph: ModuleGraph, configs: list[bytes]) -> Iterable[str]:
    """The run's modules a config file names: ``pkg.models`` in ``_target_: pkg.models.X``; a
    top-level module only as the head of a dotted name (``models.build``), its name alone
    being too common a word."""
    if not configs:
        return
    for path, module in graph.modules.items():
        if not module.name:
            continue
        name = re.escape(module.name.encode())
        tail = rb"(?![\w])" if b"." in name else rb"\.[A-Za-z_]"
        pattern = re.compile(rb"(?<![\w.])" + name + tail)
        if any(pattern.search(text) for text in configs):
            yield path
