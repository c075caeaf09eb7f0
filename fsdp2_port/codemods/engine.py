"""A run over many files: analyse each once, decide for all of them together, apply each once.

1. *Read* (in parallel with ``jobs > 1``): every file's imports, as Python resolves them, and
   what its functions do with their arguments (``semantic.modules.read``); the module graph
   and the summaries across files are put together from those facts (``modules.build``).
   *Analyse* (in parallel too): read, skip files with no FSDP1 text, decode,
   parse, and let the rules add sites to the file's plan. A file that cannot be read,
   decoded or parsed yields an error and is left untouched; the others go on. When the run
   builds FSDP1 models, skipped files that call FSDP1's module APIs on anything (a base class,
   a helper library: a model may reach them unseen) are analysed too, and so are those whose
   functions the analysed ones pass models to, until no new one is reached.
2. *Decide* (``decide.decide``): one plan for the run, whole models or nothing, with models
   followed across files through the functions each file exports, and each entry script's
   lines held to the constructors its own program runs (``programs``).
3. *Apply* (in parallel): every decided rewrite and marker, then the imports. Results come
   back in the order of the paths given. Before it, each file's rewrites are made once to see
   which of its functions now take FSDP1 values only to readers, and what its reads of each
   attribute take (F2P013's ``accepting``): the other files' calls may then pass those
   values, and their stores put them in such attributes, written without FSDP1 (F2P013).
4. *Write* (``write=True``): all changed files or none (``writes``: compare-and-swap on the
   bytes step 1 read); an internal error in one file leaves every file of the run as it was.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import dataclass, field, replace

from fsdp2_port.codemods import (
    diffs,
    fsdp1,
    programs,
    reexports,
    sources,
    spreads,
    trees,
    visibility,
    writes,
)
from fsdp2_port.codemods.assumptions import NORM_SOURCES
from fsdp2_port.codemods.decide import decide
from fsdp2_port.codemods.findings import Finding
from fsdp2_port.codemods.options import Options
from fsdp2_port.codemods.plan import Decisions, FilePlan, Position, Scope, Site
from fsdp2_port.codemods.refs import Passed, Returned, groups_owner
from fsdp2_port.codemods.rules.reader_values.across import Across
from fsdp2_port.codemods.rules.reader_values.values import accepting
from fsdp2_port.codemods.semantic import modules
from fsdp2_port.codemods.semantic import programs as semantic_programs
from fsdp2_port.codemods.semantic.modules import ModuleGraph, Naming, RunModules
from fsdp2_port.codemods.semantic.programs import ProgramMap
from fsdp2_port.codemods.semantic.resolve import Resolver
from fsdp2_port.codemods.semantic.summaries import RETURNED
from fsdp2_port.codemods.spreads import Keys
from fsdp2_port.codemods.visibility import Visibility

from .assumed import Assumption

Progress = Callable[[str, int, int, str], None]


@dataclass
class FileResult:
    path: str
    findings: list[Finding] = field(default_factory=list)
    diff: str = ""
    changed: bool = False
    parsed: bool = False
    error: str | None = None
    #: The assumptions its analysis took (``assumed``).
    assumptions: tuple[Assumption, ...] = ()
    #: Where ``changed``: the fsdp2_port names its new text imports at run time (``summary``).
    runtime: tuple[str, ...] = ()


@dataclass
class _Analysed:
    path: str
    text: str = ""
    encoding: str = "utf-8"
    #: sha256 of the bytes read: the file is written only while it still holds them
    digest: str = ""
    plan: FilePlan | None = None
    module_name: str = ""
    package_init: bool = False
    #: Its imports the run reads by another module name (``ModuleGraph.renames``).
    renames: Mapping[str, str] = field(default_factory=dict)
    error: str | None = None
    #: Skipped by the text filter, but calls FSDP1's module APIs on something.
    acts_on_a_model: bool = False
    #: FSDP1 names other modules of the run re-export (``reexports.find``).
    reexports: dict[str, str] = field(default_factory=dict)
    #: Which of its module-level names only it reads (``visibility.find``).
    visibility: Visibility = field(default_factory=Visibility)


@dataclass(frozen=True)
class _Run:
    """What the whole run tells each of its files."""

    #: FSDP1 names modules of the run re-export (``reexports.find``).
    reexports: dict[str, str]
    #: Each file's ``Visibility`` (``visibility.find``).
    visibility: dict[str, Visibility]
    #: The keys of the run's keyword-argument dicts (``spreads.find``).
    spreads: dict[str, Keys]
    #: How the run names each file (``ModuleGraph.naming``).
    naming: dict[str, Naming]
    #: The run's modules (``ModuleGraph.run_modules``).
    modules: RunModules = field(default_factory=RunModules)
    #: What the run's functions do with their arguments (``ModuleGraph.effects``).
    effects: dict[str, dict[int, frozenset[str]]] = field(default_factory=dict)

    @functools.cached_property
    def norm_words(self) -> tuple[bytes, ...]:
        """The names under which a file can get a gradient norm a clip returns: torch's
        functions (``NORM_SOURCES``) and the run's that return one (``summaries``)."""
        found = {name.rpartition(".")[2] for name in NORM_SOURCES}
        found |= {
            name.rpartition(".")[2]
            for name, effects in self.effects.items()
            if "norm" in effects.get(RETURNED, ())
        }
        return tuple(sorted(w.encode() for w in found))

    def reduces_a_norm(self, data: bytes) -> bool:
        """Whether a file may all-reduce a norm a clip returned (F2P014): its text spells
        ``all_reduce`` and a name under which it can get one."""
        return b"all_reduce" in data and any(word in data for word in self.norm_words)


def module_name(path: str) -> tuple[str, bool]:
    """``(dotted module name, is a package's __init__)`` from the packages around ``path``."""
    directory, name = os.path.split(os.path.abspath(path))
    stem = name[:-3] if name.endswith(".py") else name
    parts = [] if stem == "__init__" else [stem]
    while os.path.isfile(os.path.join(directory, "__init__.py")):
        directory, package = os.path.split(directory)
        parts.insert(0, package)
    return ".".join(parts), stem == "__init__"


def analyse_text(
    text: str,
    path: str,
    codes: Sequence[str],
    options: Options,
    name: str = "",
    package: bool = False,
    reexports: Mapping[str, str] | None = None,
    seen: Visibility | None = None,
    spread_keys: Mapping[str, Keys] | None = None,
    renames: Mapping[str, str] | None = None,
    run_modules: RunModules | None = None,
    effects: Mapping[str, Mapping[int, frozenset[str]]] | None = None,
) -> FilePlan:
    """The plan of one source text (raises ``SyntaxError`` when it does not parse)."""
    from fsdp2_port.codemods import registry
    from fsdp2_port.codemods.analysis import FileAnalysis, Source

    analysis = FileAnalysis(
        Source(
            path,
            text,
            name,
            package,
            dict(reexports or {}),
            seen or Visibility(),
            dict(spread_keys or {}),
            dict(renames or {}),
            run_modules or RunModules(),
            dict(effects or {}),
        ),
        options,
    )
    for rule in registry.rules_for(codes):
        rule.analyze(analysis)
    plan = analysis.finish()
    kept = [s for s in plan.sites if s.code in codes]
    plan.sites = [replace(s, index=i) for i, s in enumerate(kept)]
    return plan


def migrate_text(
    text: str,
    path: str,
    codes: Sequence[str],
    options: Options,
    name: str = "",
    package: bool = False,
) -> tuple[str, list[Finding]]:
    """One text on its own (a run of one file): the migrated text and its findings."""
    from fsdp2_port.codemods.apply import apply_plan
    from fsdp2_port.codemods.tidy import tidy

    seen = visibility.of_text(text)
    plan = analyse_text(text, path, codes, options, name, package, seen=seen)
    decisions = decide([plan])
    applied = apply_plan(text, decisions.plans[path], decisions)
    return tidy(
        text,
        applied,
        path,
        name,
        package,
        codes=codes,
        seen=seen,
    )


_RUN_OF_WORKER: tuple[list[str], Options, _Run] | None = None


def _pool(
    workers: int, codes: Sequence[str], options: Options, run: _Run
) -> contextlib.AbstractContextManager[Executor | None]:
    """``workers`` processes for the files of ``run`` (``_enter_run``), or none for one."""
    if workers < 2:
        return contextlib.nullcontext()
    return ProcessPoolExecutor(
        workers, initializer=_enter_run, initargs=(list(codes), options, run)
    )


def _enter_run(codes: list[str], options: Options, run: _Run) -> None:
    """A worker process's initializer: the run all its tasks belong to, given once per
    process rather than with every task."""
    global _RUN_OF_WORKER
    _RUN_OF_WORKER = (codes, options, run)


def _analyse_in_worker(path: str, every: bool) -> _Analysed:
    assert _RUN_OF_WORKER is not None, "a worker of the run's pool (_enter_run)"
    codes, options, run = _RUN_OF_WORKER
    return _analyse(path, codes, options, every, run)


def _analyser(
    pool: Executor | None, codes: Sequence[str], options: Options, run: _Run
) -> Callable[[str, bool], _Analysed]:
    """``_analyse(path, every)`` for the files of ``run``, in ``pool``'s workers or here."""
    if pool is not None:
        return _analyse_in_worker
    return lambda path, every: _analyse(path, codes, options, every, run)


def _analyse(
    path: str,
    codes: Sequence[str],
    options: Options,
    every: bool = False,
    run: _Run | None = None,
) -> _Analysed:
    """``every``: also a file with no FSDP1 text (one the run passes models to); ``run``:
    what the whole run tells the file."""
    result = _Analysed(path, reexports=run.reexports if run else {})
    try:
        data = sources.read_bytes(path)
        result.module_name, result.package_init = module_name(path)
        if run is not None:
            result.visibility = run.visibility[path]
            naming = run.naming[path]
            result.module_name, result.package_init = naming.name, naming.package
            result.renames = naming.renames
        if not (
            every
            or fsdp1.might_need_migration(data)
            or (run is not None and run.reduces_a_norm(data))
            or reexports.imported(data, result.module_name, result.package_init, result.reexports)
        ):
            result.acts_on_a_model = fsdp1.might_act_on_a_model(data)
            return result
        source = sources.decode(data)
    except sources.UnreadableSource as error:
        result.error = str(error)
        return result
    result.text, result.encoding = source.text, source.encoding
    result.digest = writes.sha(data)
    try:
        result.plan = analyse_text(
            source.text,
            path,
            codes,
            options,
            result.module_name,
            result.package_init,
            result.reexports,
            result.visibility,
            run.spreads if run else None,
            result.renames,
            run.modules if run else None,
            run.effects if run else None,
        )
    except SyntaxError as error:
        result.error = _syntax_error(error, source.text)
    except (ValueError, RecursionError) as error:
        result.error = f"cannot parse: {error}"
    return result


_NEWER_SYNTAX = re.compile(
    r"^[ \t]*type[ \t]+\w+[ \t]*(\[[^\]\n]*\])?[ \t]*="  # PEP 695 type alias (3.12)
    r"|^[ \t]*(async[ \t]+)?def[ \t]+\w+[ \t]*\["  # PEP 695 generic function (3.12)
    r"|^[ \t]*class[ \t]+\w+[ \t]*\["  # PEP 695 generic class (3.12)
    r"|\bexcept[ \t]*\w[^:\n]*,[^:\n]*:[ \t]*$",  # PEP 758 unparenthesized except (3.14)
    re.MULTILINE,
)


def _syntax_error(error: SyntaxError, text: str) -> str:
    """``cannot parse: ...`` with a real position (a NUL byte has none from ``ast``) and a
    hint when the text uses syntax newer than this interpreter (best effort)."""
    line, column = error.lineno, error.offset
    if line is None and "\0" in text:
        at = text.index("\0")
        line = text.count("\n", 0, at) + 1
        column = at - (text.rfind("\n", 0, at) + 1) + 1
        return f"cannot parse: a NUL byte (line {line}, column {column})"
    message = f"cannot parse: {error.msg} (line {line}, column {column})"
    if _NEWER_SYNTAX.search(text) or _nested_fstring_quotes(text):
        version = ".".join(map(str, sys.version_info[:2]))
        message += f"; needs a newer Python than {version}? (this one runs the codemod)"
    return message


def _nested_fstring_quotes(text: str) -> bool:
    """A PEP 701 f-string reusing its own quote inside a replacement field (3.12)."""
    return bool(re.search(r"""\bf(["'])[^"'\n]*\{[^}\n]*\1[^\n]*\1[^}\n]*\}""", text))


def _accepting(item: _Analysed, decisions: Decisions) -> Across:
    """What the file's functions and attribute reads take without FSDP1 once its rewrites
    are made (none when they cannot be: ``_apply`` reports that)."""
    from fsdp2_port.codemods.apply import InternalError, apply_plan
    from fsdp2_port.codemods.names import names_of
    from fsdp2_port.codemods.text import LineIndex

    assert item.plan is not None
    try:
        text = apply_plan(item.text, decisions.plans[item.path], decisions).text
        tree = trees.parse(text)
    except (InternalError, SyntaxError):
        return Across()
    names = names_of(
        tree,
        item.module_name,
        item.package_init,
        item.reexports,
        item.visibility,
        item.renames,
    )
    return accepting(names, LineIndex(text))


def _apply(
    item: _Analysed,
    decisions: Decisions,
    codes: Sequence[str],
    accepts: Across | None = None,
) -> tuple[FileResult, str | None]:
    """The file's result and its new text (None when unchanged or on an internal error);
    ``accepts``: what other files' functions take without FSDP1."""
    from fsdp2_port.codemods.apply import InternalError, apply_plan
    from fsdp2_port.codemods.summary import runtime_names
    from fsdp2_port.codemods.tidy import tidy

    assert item.plan is not None
    result = FileResult(item.path, parsed=True, assumptions=item.plan.assumptions)
    try:
        applied = apply_plan(item.text, decisions.plans[item.path], decisions)
        text, result.findings = tidy(
            item.text,
            applied,
            item.path,
            item.module_name,
            item.package_init,
            reexports=item.reexports,
            codes=codes,
            seen=item.visibility,
            accepts=accepts,
            renames=item.renames,
        )
    except InternalError as error:
        result.error = f"internal error: {error} (please report)"
        return result, None
    result.changed = text != item.text
    if not result.changed:
        return result, None
    result.diff = diffs.unified_diff(item.text, text, item.path)
    result.runtime = runtime_names(text)
    return result, text


def migrate_files(
    paths: Sequence[str],
    codes: Sequence[str],
    options: Options,
    *,
    write: bool = False,
    force: bool = False,
    jobs: int = 1,
    progress: Progress | None = None,
) -> Iterator[FileResult]:
    """Results in the order of ``paths``, whatever ``jobs`` is (worker processes: at most
    ``jobs``, the number of paths and of CPUs).

    With ``write``, the run is one transaction: when a file of it cannot be migrated (an
    internal error) or written, is read-only (without ``force``) or no longer holds the bytes
    the run read, no file is changed, every changed file's result says why and none is
    ``changed``.
    """
    workers = min(jobs, len(paths), _cpus())
    with _fewer_collections(), trees.shared():  # each text parsed once for the whole run
        analysed, work, outcomes = _analysed_and_applied(paths, codes, options, workers, progress)
    by_path = {item.path: outcome for item, outcome in zip(work, outcomes)}
    if write:
        _write(work, by_path, force)
    for item in analysed:
        if item.plan is None or item.error is not None:
            yield FileResult(item.path, parsed=item.plan is not None, error=item.error)
        else:
            yield by_path[item.path][0]


@contextlib.contextmanager
def _fewer_collections() -> Iterator[None]:
    """Python's cyclic garbage collector run less often during a run (and in the workers it
    forks): the run's syntax trees are millions of objects without cycles, which each full
    collection walks again; at the default thresholds that is a third of a run's time."""
    before = gc.get_threshold()
    gc.set_threshold(100_000, 50, 100)
    try:
        yield
    finally:
        gc.set_threshold(*before)


def _analysed_and_applied(
    paths: Sequence[str],
    codes: Sequence[str],
    options: Options,
    workers: int,
    progress: Progress | None,
) -> tuple[list[_Analysed], list[_Analysed], list[tuple[FileResult, str | None]]]:
    """Every file analysed, the run decided, and the new text of each file that has a plan.

    The ``workers`` processes start once what the run tells every file is known: by then this
    process has parsed the files that mention FSDP (``reexports.find``), and they inherit
    those trees and the run (``_enter_run``).
    """
    graph, texts, configs = _semantic(paths, workers, progress)
    program_map = semantic_programs.find(graph, texts, configs, whole_program=options.whole_program)
    entry = program_map.entry
    naming = {path: graph.naming(path) for path in paths}
    run_modules = graph.run_modules(options.whole_program)
    files = sources.fsdp_files(paths, lambda path: (naming[path].name, naming[path].package))
    seen = visibility.find(paths, entry, whole_program=options.whole_program)
    run = _Run(reexports.find(files), seen, spreads.find(files), naming, run_modules, graph.effects)
    with _pool(workers, codes, options, run) as pool:
        analyse = _analyser(pool, codes, options, run)
        analysed = _map(pool, analyse, [(p, False) for p in paths], progress, "analysing")
        _analyse_receivers(analysed, pool, analyse, progress, run, graph)
        plans = [a.plan for a in analysed if a.plan is not None]
        unread = [p for p in map(_unread, analysed) if p is not None]
        leaving = [(plan.path, line, module) for plan in plans for line, module in plan.leaves]
        if leaving:  # the programs as they will be once the run is written
            program_map = semantic_programs.find(
                graph.without(leaving), texts, configs, whole_program=options.whole_program
            )
        run_programs = _programs(
            paths, [*plans, *unread], entry, options.whole_program, program_map, leaving, configs
        )
        decisions = decide([*plans, *unread], run_programs, run_modules)
        work = [a for a in analysed if a.plan is not None and a.error is None]
        accepts = Across()
        if "F2P013" in codes and len(work) > 1:
            for found in _map(
                pool, _accepting, [(a, _for(decisions, a.path)) for a in work], None, ""
            ):
                accepts |= found
        outcomes = _map(
            pool,
            _apply,
            [(a, _for(decisions, a.path), list(codes), accepts) for a in work],
            progress,
            "applying",
        )
        return analysed, work, outcomes


def _cpus() -> int:
    """The CPUs this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _unread(item: _Analysed) -> FilePlan | None:
    """A file of the run that cannot be read (it does not parse here: a syntax error, or a
    newer Python's) but whose text may call FSDP1 on a model: what it does cannot be seen, so
    it holds every model its program may reach, like a line no model can be tied to."""
    if item.plan is not None or item.error is None:
        return None
    try:
        data = sources.read_bytes(item.path)
    except sources.UnreadableSource:
        data = b""
    if not (fsdp1.might_need_migration(data) or fsdp1.might_act_on_a_model(data)):
        return None
    message = f"{item.path} cannot be read ({item.error}): it may call FSDP1 on any model"
    site = Site("F2P099", Position(item.path, 1, 1, 0, 0, 0, ""), message, "RUN")
    return FilePlan(item.path, [site])


def _write(
    work: list[_Analysed], outcomes: dict[str, tuple[FileResult, str | None]], force: bool
) -> None:
    """Write every changed file of the run, or none (each changed result says why not, and
    is no longer ``changed``)."""
    changed = [(a, *outcomes[a.path]) for a in work if outcomes[a.path][1] is not None]
    locked = [] if force else [r for _, r, _ in changed if sources.read_only(r.path)]
    for result in locked:
        result.error = "read-only: not rewritten (--force rewrites it)"
    failed = [path for path, (result, _) in outcomes.items() if result.error]
    problem: str | None = None
    if locked and len(locked) == len(failed):
        problem = f"{locked[0].path} is read-only" + (
            f" (and {len(locked) - 1} more)" if len(locked) > 1 else ""
        )
    elif failed:
        problem = f"{failed[0]} could not be migrated" + (
            f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
        )
    else:
        problem = writes.write_all(
            [(a.path, text or "", a.encoding, a.digest) for a, _, text in changed]
        )
    if problem is not None:
        for _, result, _ in changed:
            result.changed = False
            if result.error is None:
                result.error = f"not written: {problem}; a run is written whole or not at all"


def _analyse_receivers(
    analysed: list[_Analysed],
    pool: Executor | None,
    analyse: Callable[[str, bool], _Analysed],
    progress: Progress | None,
    run: _Run,
    graph: ModuleGraph,
) -> None:
    """Analyse, in place, the skipped files of the run that the analysed ones pass FSDP1
    models to (``save(model)`` of a module the text filter skipped) or functions that wrap
    their argument in one (``T5Encoder(shard_fn=partial(shard_model, ...))``), and those that
    call the analysed ones' functions that return models (``model = shard(net)``) or wrap
    their argument, then those the new ones pass them to or get them from, and so on
    (``modules``: ``ModuleGraph.run_modules``)."""
    skipped = {a.path: i for i, a in enumerate(analysed) if a.plan is None and a.error is None}
    if skipped and any(
        a.plan.constructors or a.plan.fsdp2_models for a in analysed if a.plan is not None
    ):
        acting = [path for path in skipped if analysed[skipped[path]].acts_on_a_model]
        arguments = [(path, True) for path in acting]
        for path, result in zip(acting, _map(pool, analyse, arguments, progress, "analysing")):
            analysed[skipped.pop(path)] = result
    while skipped:
        plans = [a.plan for a in analysed if a.plan is not None]
        resolver = Resolver(plans, run.modules)
        wrapping = {r.function for plan in plans for r in plan.sharded if isinstance(r, Passed)}
        callees = {
            name
            for plan in plans
            for passing in plan.passes
            if resolver.models(passing.refs)
            or not wrapping.isdisjoint(resolver.functions(passing.refs))
            for name in resolver.spellings(passing.callee)
        }
        owners = {owner for callee in callees for owner in _owners(callee)}
        owners |= _optimizer_owners(plans, run.modules)
        wanted = [path for path in skipped if run.naming[path].name in owners]
        wanted += [
            p for p in _callers_of_builders(skipped, plans, resolver, graph) if p not in wanted
        ]
        if not wanted:
            return
        arguments = [(path, True) for path in wanted]
        for path, result in zip(wanted, _map(pool, analyse, arguments, progress, "analysing")):
            analysed[skipped.pop(path)] = result


def _optimizer_owners(plans: list[FilePlan], modules: RunModules) -> set[str]:
    """The modules of the classes whose instances give a site its ``self.param_groups``
    (``refs.GROUPS``): the class of the method, and its subclasses."""
    classes: set[str] = set()
    for plan in plans:
        for site in plan.sites:
            for ref in site.reach.deferred:
                owner = groups_owner(ref.function) if isinstance(ref, Returned) else None
                if owner is not None:
                    classes |= {owner, *modules.subclasses(owner)}
    return {name.rpartition(".")[0] for name in classes}


def _callers_of_builders(
    skipped: Mapping[str, int], plans: list[FilePlan], resolver: Resolver, graph: ModuleGraph
) -> list[str]:
    """The skipped files that may call a function of an analysed file returning a model, or
    one whose parameter an FSDP1 constructor wraps (``shard_model(model)``): they import that
    file (through any chain of imports) and spell the function's name."""
    homes = {plan.path: graph.canonical(plan.path) for plan in plans}
    builders: dict[str, set[str]] = {}  # a function's name -> the files that define one
    for plan in plans:
        home = homes[plan.path] + "."
        for name, refs in plan.exports.items():
            if name.startswith(home) and resolver.models(refs):
                builders.setdefault(name.rsplit(".", 1)[-1], set()).add(plan.path)
        for ref in plan.sharded:  # a function or class that wraps its argument, by its name
            if isinstance(ref, Passed) and ref.function.startswith(home):
                spelled = ref.function[len(home) :].removesuffix(".__init__")
                if "." not in spelled:
                    builders.setdefault(spelled, set()).add(plan.path)
    if not builders:
        return []
    pattern = re.compile(rb"\b(" + b"|".join(re.escape(n.encode()) for n in builders) + rb")\b")
    out = []
    for path in skipped:
        try:
            words = {m.decode() for m in pattern.findall(sources.read_bytes(path))}
        except sources.UnreadableSource:
            continue
        closure = graph.closure(path)
        if any(not closure.isdisjoint(builders[word]) for word in words):
            out.append(path)
    return out


def _semantic(
    paths: Sequence[str], workers: int, progress: Progress | None
) -> tuple[ModuleGraph, dict[str, bytes], semantic_programs.ConfigNames]:
    """The run's imports as Python would resolve them, with the texts of its files and of its
    config files (what ``semantic.programs.find`` reads); the files are read by ``workers``
    processes of their own."""
    texts = {}
    for path in paths:
        try:
            texts[path] = sources.read_bytes(path)
        except sources.UnreadableSource:
            texts[path] = b""
    pool = (
        ProcessPoolExecutor(max_workers=workers, initializer=trees.forget) if workers > 1 else None
    )
    try:
        graph = modules.build(
            paths, texts, lambda read, arguments: _map(pool, read, arguments, progress, "reading")
        )
    finally:
        if pool is not None:
            pool.shutdown()
    return graph, texts, semantic_programs.config_names(list(paths))


def _programs(
    paths: Sequence[str],
    plans: list[FilePlan],
    entry: frozenset[str],
    whole_program: bool,
    program_map: ProgramMap | None = None,
    leaving: Sequence[tuple[str, int, str]] = (),
    configs: semantic_programs.ConfigNames | None = None,
) -> programs.Programs | None:
    """Which constructors each file's lines may meet, in a run of several files that has any;
    in a whole program, also which lines that would hold the run no program runs."""
    builds = [(c.constructor or "", c.path, c.line) for p in plans for c in p.constructors]
    builds += [(b, p.path, line) for p in plans for b, line in p.fsdp2_builds]
    if not builds or (len(paths) < 2 and not whole_program):
        return None
    holding = [  # sites that may hold the run once it is resolved (untied, or tied later)
        (s.path, s.line)
        for p in plans
        for s in p.sites
        if whole_program
        and s.scope is Scope.MODELS
        and s.constructor is None
        and not s.reach.ties
        and (s.requirement == "RUN" or s.reach.deferred)
    ]
    forms = [  # untied lines with a form right on any model: taken only where one runs
        (s.path, s.line)
        for p in plans
        for s in p.sites
        if whole_program
        and s.constructor is None
        and s.forms.either is not None
        and (s.reach.opaque or not s.reach.ties)
    ]
    if len(paths) < 2:  # one file: no programs to tell apart, only lines no one runs
        return programs.find(
            paths, [], [], entry, holding, leaving=leaving, rewritten=forms, configs=configs
        )
    lines = [p.path for p in plans]
    return programs.find(paths, builds, lines, entry, holding, program_map, leaving, forms, configs)


def _owners(callee: str) -> tuple[str, str]:
    """The modules that may define ``callee``: ``m.f``/``m.Class`` in ``m``, ``m.Class.f`` in
    ``m``."""
    parts = callee.split(".")
    return ".".join(parts[:-1]), ".".join(parts[:-2])


def _for(decisions: Decisions, path: str) -> Decisions:
    """The part of the run's decisions one file needs (what travels to a worker)."""
    return Decisions(
        {path: decisions.plans[path]},
        decisions.migrating,
        decisions.run_migrates,
        {k for k in decisions.rewritten if k[0] == path},
        {k: v for k, v in decisions.reasons.items() if k[0] == path},
        decisions.about_fsdp1,
    )


def _map(
    pool: Executor | None, function, arguments: list[tuple], progress: Progress | None, stage: str
) -> list:
    """``function(*args)`` for each, in order, reporting progress as results come."""
    total = len(arguments)
    if not arguments:
        return []
    if pool is None:
        results = []
        for index, args in enumerate(arguments, start=1):
            results.append(function(*args))
            if progress:
                progress(
                    stage, index, total, str(args[0] if isinstance(args[0], str) else args[0].path)
                )
        return results
    chunk = max(1, min(64, total // (8 * getattr(pool, "_max_workers", 1) or 1)))
    results = []
    for index, result in enumerate(pool.map(function, *zip(*arguments), chunksize=chunk), start=1):
        results.append(result)
        if progress:
            progress(stage, index, total, result.path)
    return results
