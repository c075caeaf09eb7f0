"""The plan of one run: FSDP1 constructors, the sites that depend on them, and the decisions.

Rules never edit text. They add ``Site`` records to a file's plan: where, what the rewrite
would be (edits and imports) and when it is allowed (``requirement``). ``decide`` then settles
the whole run at once, whole models or nothing:

- a constructor migrates when it can be rewritten and no site tied to its model is blocked;
- a site tied to a model (``ties``) is rewritten exactly when all its models migrate
  (``MODELS``); a tied site that cannot be rewritten keeps its models on FSDP1;
- a site whose rewrite is right under FSDP1 and FSDP2 alike is always rewritten (``ALWAYS``);
- a site that cannot be tied to any model follows the run (``RUN``): rewritten only when every
  FSDP1 constructor of the run migrates (and there is one), since its model may come from any;
  kept, it holds every constructor of the run (``holds``): none may migrate under it;
- a site with a form right whatever its receiver turns out to be (FSDP1, FSDP2, DDP, a plain
  module) takes it when any constructor of the run migrates (``ANY``), tied or not;
- "the run", for an untied site of an entry script, is the constructors its program may run
  (``programs.Programs``): others build no model that line can meet; in a whole program, a
  site in a function no line calls holds nothing (it is rewritten or marked all the same);
- ``NEVER``: no rewrite exists; the site gets a marker;
- sites of one group (a state-dict block and its calls, a type check and the FSDP1 code it
  guards, an import shared by optimizers) are rewritten together or not at all.

Everything here is plain data, picklable, so files are analysed in worker processes and
decided together.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from codemods.programs import Programs
from codemods.refs import (
    UNKNOWN,
    Built,
    Deferred,
    Optimizer,
    Passing,
    Ref,
)
from codemods.semantic.modules import RunModules
from codemods.semantic.resolve import Resolver
from codemods.text import Edit

_MODEL_STAYS = "its model stays FSDP1"
_NO_CONSTRUCTOR_HERE = (
    "no FSDP1 constructor of this run runs in this script's program: "
    "migrate it together with the code that builds the model"
)
_NO_CONSTRUCTOR = (
    "no FSDP1 constructor in this run says where its model comes from: "
    "migrate it together with the code that builds the model"
)

_NEVER_RUN = (
    "in a function no line of this whole program calls (nor a config names): it holds no "
    "model; port it before anything calls it"
)
_IMPORTED_NOWHERE = (
    "in a module no program of this whole program imports once the run is written: it holds "
    "no model; port it before anything imports it"
)

Requirement = Literal["ALWAYS", "MODELS", "ANY", "RUN", "NEVER"]


@dataclass(frozen=True)
class NeededImport:
    """``from module import name`` (or ``import module`` when name is None) for a rewrite.

    ``anchor`` is the offset where the new line goes (after the statement that imports the
    FSDP1 name being replaced, in the same scope), ``indent`` that statement's indentation.
    """

    module: str
    name: str | None
    anchor: int
    indent: str
    asname: str | None = None


@dataclass(frozen=True)
class Rewrite:
    edits: Sequence[Edit]  # kept as a tuple
    message: str
    imports: Sequence[NeededImport] = ()  # kept as a tuple
    #: Rewritten, but a person should look (a marker is added too).
    review: bool = False

    def __post_init__(self) -> None:  # rules pass lists; the record keeps tuples
        object.__setattr__(self, "edits", tuple(self.edits))
        object.__setattr__(self, "imports", tuple(self.imports))


@dataclass(frozen=True)
class Site:
    """One place in one file that a rule rewrites or marks (built by ``FileAnalysis.add`` and
    ``add_tied``; later stages make changed copies, never edit one)."""

    code: str
    path: str
    #: Input position of the node: 1-based line, 1-based character column, and offsets.
    line: int
    column: int
    start: int
    end: int
    #: Where a marker goes: the start of the statement's first line, and its indentation.
    anchor: int
    indent: str
    #: The marker's text when the site is not rewritten (the reason is appended).
    keep_message: str
    rewrite: Rewrite | None = None
    requirement: Requirement = "NEVER"
    #: Ids of the constructors whose models reach this site (resolved across files).
    ties: frozenset[str] = frozenset()
    #: Calls to functions of other files whose results reach this site, and parameters other
    #: files may pass models to (``call:``/``param:`` refs, resolved by the run).
    deferred: frozenset[Deferred] = frozenset()
    groups: frozenset[str] = frozenset()
    #: For a constructor site: its id (``path:line:column``).
    constructor: str | None = None
    #: Neither a finding nor a marker (a line under ``# fsdp2-port: ignore``).
    silent: bool = False
    #: Set when only calls into other files may make this site's receiver a model: if the run
    #: ties it to none, the site is this marker instead ("": nothing at all).
    unknown: str | None = None
    #: Applied instead of ``rewrite`` when that is not allowed: a form right under FSDP1.
    fallback: Rewrite | None = None
    #: The original is right under FSDP1: when it stays only because its models stay FSDP1,
    #: it needs no marker of its own (the constructor's says why).
    quiet: bool = False
    #: A form right whatever the receiver holds, taken (``ANY``) when the run ties the site
    #: to no model.
    either: Rewrite | None = None
    #: FSDP1 code that breaks on an FSDP2 model: kept, it keeps its models on FSDP1 (every
    #: constructor of the run while untied). False for code still right on an FSDP2 model or
    #: that only switches behaviour (a type test, an annotation, code behind an FSDP1 type
    #: test, compat's optimizer), which is marked instead.
    holds: bool = True
    #: Right while every model of the run stays FSDP1 (a type test, an annotation): no marker
    #: in a run where no model migrates.
    fsdp1_only_marker: bool = False
    #: The original means something of its own on an FSDP2 model (``m.state_dict()``: FSDP2's
    #: sharded answer): FSDP2 models the program already has do not make an untied one take
    #: ``either`` (they cannot be told from those an earlier run migrated); only models that
    #: migrate in this run do.
    fsdp2_meaning: bool = False
    #: Reached only while an FSDP1 type test holds: kept, no FSDP2 model gets there, and the
    #: test (when it is one the rules see) carries the marker.
    behind_test: bool = False

    #: Its receiver is an object just built (``Ties.fresh``): no FSDP model unless the run
    #: ties it to one; tied to none, the site is nothing.
    fresh: bool = False
    #: Some value its receiver may hold comes from code the analysis does not follow
    #: (``refs.Unknown``); without that, a site the run ties to no model is nothing.
    opaque: bool = True

    #: A site about a BF16 master optimizer (F2P009), not a model: the optimizers that reach
    #: it; none after the run resolved it, and it is nothing.
    about_optimizer: bool = False
    optimizers: frozenset[Optimizer] = frozenset()

    #: Its position in its file's plan: ``(path, index)`` names it across processes.
    index: int = 0

    @property
    def key(self) -> tuple[str, int]:
        return self.path, self.index


@dataclass
class FilePlan:
    path: str
    sites: list[Site] = field(default_factory=list)
    #: Qualified names of this file's functions -> what their calls return.
    exports: dict[str, frozenset[Ref]] = field(default_factory=dict)
    #: Qualified names of this file's functions -> their positional parameters, as called.
    signatures: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: Models this file passes to functions of other files.
    passes: list[Passing] = field(default_factory=list)
    #: The functions of other files (and libraries) this file calls, by qualified name.
    calls: frozenset[str] = frozenset()
    #: What the modules this file's FSDP1 constructors wrap may hold (``Ties.sharded``).
    sharded: frozenset[Ref] = frozenset()
    #: ``(line, module)`` of its import statements that the run rewrites to import another
    #: module, whatever it decides (F2P009's): once written, they import ``module`` no more.
    leaves: tuple[tuple[int, str], ...] = ()
    #: Each name the file imports -> the spans of the scopes importing it (no import twice).
    imported: dict[str, tuple[tuple[int, int], ...]] = field(default_factory=dict)
    #: The lines where this file builds FSDP2 models (``fully_shard``,
    #: ``fsdp2_port.fully_shard_like_fsdp1``): an untied FSDP1 site of the run may meet one, so
    #: it takes its form right on any model (a rerun over a tree written half, by hand or
    #: killed without its journal, finishes), except where the original already means
    #: something on FSDP2 (``Site.fsdp2_meaning``).
    fsdp2_models: tuple[int, ...] = ()
    #: The file imports an FSDP1 name (re-exported ones too) or fsdp2_port. A run with no such
    #: file and no FSDP1 constructor is no FSDP1 migration's business (``Decisions.about_fsdp1``):
    #: its FSDP2 models are FSDP2 code of its own (Megatron's tests).
    fsdp1_or_port: bool = False
    #: Of FSDP1 and fsdp2_port, the file names only the sharded grad scaler (or what it became,
    #: ``fsdp2_port.GradScaler``): FSDP2 code uses it too (ROLL), so its FSDP2 models are no
    #: sign of a migration half done.
    scaler_only: bool = True

    @property
    def constructors(self) -> list[Site]:
        return [s for s in self.sites if s.constructor is not None]

    @property
    def fsdp2_builds(self) -> list[tuple[str, int]]:
        """``(id, line)`` of each FSDP2 build, for ``programs`` (the ids of constructors are
        ``path:line:column``; these cannot be taken for one)."""
        return [(f"fsdp2 {self.path}:{line}", line) for line in self.fsdp2_models]


@dataclass(frozen=True)
class Reason:
    """Why a site is kept, in words a person can act on; ``model_stays`` when only because its
    models stay FSDP1 (a quiet site then needs no marker: the constructor's says why)."""

    text: str
    model_stays: bool = False


@dataclass
class Decisions:
    """What the run does: the run's plans with every cross-file link resolved, the migrating
    constructors and, per site, rewritten or why not."""

    plans: dict[str, FilePlan]
    migrating: set[str]
    #: Whether every constructor of the run migrates (there being at least one).
    run_migrates: bool
    rewritten: set[tuple[str, int]]  # keys of the rewritten sites
    reasons: dict[tuple[str, int], Reason]  # key of a kept site -> why it is kept
    #: The run has FSDP1 in it (a constructor, an FSDP1 import, fsdp2_port): else no site of
    #: it is rewritten or marked.
    about_fsdp1: bool = True

    def is_rewritten(self, site: Site) -> bool:
        return site.key in self.rewritten


def resolve(
    plans: Sequence[FilePlan],
    modules: RunModules | None = None,
    programs: Programs | None = None,
) -> list[FilePlan]:
    """The plans with every site's links into other files settled (``Resolver``), and what
    follows for a site the run ties to no model."""
    resolver = Resolver(plans, modules, programs)
    return [replace(plan, sites=[_resolved(s, resolver) for s in plan.sites]) for plan in plans]


def _resolved(site: Site, resolver: Resolver) -> Site:
    if site.deferred:
        found = resolver.settle(site.deferred, site.path)
        site = replace(
            site,
            ties=site.ties | {r.id for r in found if isinstance(r, Built)},
            optimizers=site.optimizers | {r for r in found if isinstance(r, Optimizer)},
            deferred=frozenset(),
            opaque=site.opaque or UNKNOWN in found,
        )
        if (
            not site.ties
            and not site.opaque
            and not site.about_optimizer
            and not resolver.may_be_sharded(site.deferred, site.path)
        ):
            # every value it may hold is followed, none is a model of the run, and none is an
            # object an FSDP1 constructor of the run wraps (sharded in place under FSDP2)
            return replace(
                site, rewrite=None, fallback=None, requirement="NEVER", silent=True, holds=False
            )
    if site.about_optimizer:
        if not site.optimizers:  # no BF16 optimizer reaches it: not our business
            return replace(site, rewrite=None, requirement="NEVER", silent=True)
        return site
    if site.ties:
        return site
    if site.fresh:
        return replace(
            site, rewrite=None, fallback=None, requirement="NEVER", silent=True, holds=False
        )
    if site.either is not None:
        # ``ALWAYS`` was the requirement had it been tied (a form right on any model): untied,
        # the form is taken with the run's models like any other ``either``
        requirement = "ANY" if site.requirement in ("MODELS", "RUN", "ALWAYS") else site.requirement
        rewrite = site.either if requirement == "ANY" else site.rewrite
        return replace(
            site,
            rewrite=rewrite,
            requirement=requirement,
            keep_message=site.unknown or site.keep_message,
        )
    if site.unknown is not None:
        return replace(
            site,
            rewrite=None,
            fallback=None,
            requirement="NEVER",
            keep_message=site.unknown,
            silent=not site.unknown,
        )
    if site.requirement == "MODELS":
        return replace(site, requirement="RUN")  # nothing it depends on was found: any model
    return site


def decide(
    plans: Sequence[FilePlan],
    programs: Programs | None = None,
    modules: RunModules | None = None,
) -> Decisions:
    """Settle the run: which constructors migrate and which sites are rewritten (``programs``:
    which constructors each file's lines may meet, without it every one; ``modules``: the
    run's modules, ``ModuleGraph.run_modules``)."""
    plans = resolve(plans, modules, programs)
    sites = [s for plan in plans for s in plan.sites]
    constructors = [s for s in sites if s.constructor is not None]
    reach = _Reach(constructors, [b for p in plans for b, _ in p.fsdp2_builds], programs)
    migrating = {s.constructor for s in constructors if s.constructor and s.rewrite is not None}
    about_fsdp1 = bool(constructors) or any(p.fsdp1_or_port for p in plans)
    fsdp2_models = (
        (bool(constructors) or not all(p.scaler_only for p in plans))
        and about_fsdp1
        and any(p.fsdp2_models for p in plans)
    )
    groups: dict[str, list[Site]] = {}
    for site in sites:
        if site.constructor is None:
            for group in site.groups:
                groups.setdefault(group, []).append(site)
    while True:
        ok = {
            s.key
            for s in sites
            if s.constructor is None and _allowed(s, migrating, reach, fsdp2_models)
        }
        changed = True
        while changed:
            changed = False
            for members in groups.values():
                if any(m.key in ok for m in members) and not all(m.key in ok for m in members):
                    ok -= {m.key for m in members}
                    changed = True
        kept = [s for s in sites if s.constructor is None and s.key not in ok and s.holds]
        blocked = {c for s in kept for c in s.ties}
        for site in kept:
            if _holds_run(site, reach):
                blocked |= reach(site)
        still = migrating - blocked
        if still == migrating:
            break
        migrating = still
    rewritten = set(ok) | {s.key for s in constructors if s.constructor in migrating}
    run = bool(constructors) and len(migrating) == len(constructors)
    if not about_fsdp1:
        # no FSDP1 in the run: sites found by names alone (``.module``, ``no_sync``, ``params``
        # on a library's own wrappers) are not about FSDP1: nothing changes, nothing is marked
        return Decisions({plan.path: plan for plan in plans}, set(), False, set(), {}, False)
    reasons = {
        s.key: _reason(s, migrating, reach, constructors, sites, ok)
        for s in sites
        if s.key not in rewritten
    }
    return Decisions(
        {plan.path: plan for plan in plans},
        migrating,
        run,
        rewritten,
        {k: v for k, v in reasons.items() if v.text},
    )


def _camel(name: str) -> bool:
    """A class's name by convention (``Accelerator``; not ``FSDP``, ``MAX_LEN`` or ``load``)."""
    return name[:1].isupper() and not name.isupper()


def _holds_run(site: Site, reach: _Reach) -> bool:
    """A kept site that may act on any model of the run and breaks on an FSDP2 one (not in
    code no program runs)."""
    return _untied_hold(site) and not reach.never_runs(site)


def _untied_hold(site: Site) -> bool:
    return site.holds and site.requirement == "RUN" and not site.ties


class _Reach:
    """The constructors whose models an untied site may meet, and whether it may meet an FSDP2
    model the run builds already: those its program may run (``programs``; none: every one)."""

    def __init__(
        self, constructors: Sequence[Site], fsdp2_builds: list[str], programs: Programs | None
    ) -> None:
        self._all = frozenset(c.constructor for c in constructors if c.constructor)
        self._fsdp2 = fsdp2_builds
        self._programs = programs or Programs()
        self._by_path: dict[str, frozenset[str]] = {}

    def __call__(self, site: Site) -> frozenset[str]:
        meets = self._programs.may_meet
        if (site.path, site.line) in self._programs.lines_run_in:  # asked about, line by line
            return frozenset(c for c in self._all if meets(site.path, c, site.line))
        if site.path not in self._by_path:
            self._by_path[site.path] = frozenset(c for c in self._all if meets(site.path, c))
        return self._by_path[site.path]

    def fsdp2(self, site: Site) -> bool:
        return any(self._programs.may_meet(site.path, b) for b in self._fsdp2)

    def imported_nowhere(self, site: Site) -> bool:
        return self._programs.runs_nowhere(site.path)

    def never_runs(self, site: Site) -> bool:
        """No program of a whole program runs the site's line (``Programs.never_run``), or
        imports its module (``Programs.runs_nowhere``)."""
        return (site.path, site.line) in self._programs.never_run or self._programs.runs_nowhere(
            site.path
        )


def _allowed(site: Site, migrating: set[str], reach: _Reach, fsdp2_models: bool = False) -> bool:
    if site.rewrite is None or site.requirement == "NEVER":
        return False
    if site.requirement == "ALWAYS":
        return True
    if site.requirement == "ANY":
        return bool(migrating & reach(site)) or (
            fsdp2_models and reach.fsdp2(site) and not site.fsdp2_meaning
        )
    if site.requirement == "RUN":
        return bool(reach(site)) and reach(site) <= migrating
    return bool(site.ties) and site.ties <= migrating


def _reason(
    site: Site,
    migrating: set[str],
    reach: _Reach,
    constructors: Sequence[Site],
    sites: Sequence[Site],
    ok: set[tuple[str, int]],
) -> Reason:
    """Why a site is not rewritten (an empty text when it is, or when nothing needs saying)."""
    by_id = {c.constructor: c for c in constructors}
    if site.constructor is not None:
        if site.constructor in migrating:
            return Reason("")
        if site.rewrite is None:
            return Reason("")
        with_it = migrating | {site.constructor}
        blockers = [
            s
            for s in sites
            if (
                (site.constructor in s.ties and s.holds)
                or (_holds_run(s, reach) and site.constructor in reach(s))
            )
            and s.key not in ok
            and not _allowed(s, with_it, reach)
        ]
        because = _list(
            f"{b.code} at {_at(site, b)}"
            + (" (it may act on any model here)" if not b.ties else "")
            for b in blockers
        )
        return Reason(f"{_MODEL_STAYS} because of {because}", model_stays=True)
    if site.key in ok:
        return Reason("")
    reached = [c for c in constructors if c.constructor in reach(site)]
    if _untied_hold(site) and reach.never_runs(site):
        return Reason(_IMPORTED_NOWHERE if reach.imported_nowhere(site) else _NEVER_RUN)
    if _holds_run(site, reach) and site.rewrite is None and any(c.rewrite for c in reached):
        models = "of this run" if len(reached) == len(constructors) else "its program builds"
        return Reason(f"it may act on any model {models}: they all stay FSDP1 until it is ported")
    if site.rewrite is None or site.requirement == "NEVER":
        return Reason("")
    if _allowed(site, migrating, reach):
        partners = [
            s
            for s in sites
            if s.key != site.key
            and s.key not in ok
            and set(s.groups) & set(site.groups)
            and not _allowed(s, migrating, reach)
        ]
        listed = _list(f"{p.code} at {_at(site, p)}" for p in partners)
        return Reason(f"it goes with FSDP1 code that stays: {listed}")
    staying = [by_id[c] for c in sorted(site.ties) if c not in migrating and c in by_id]
    if site.requirement == "MODELS" and staying:
        listed = _list(f"FSDP(...) at {_at(site, c)}" for c in staying)
        return Reason(f"{_MODEL_STAYS}: {listed}", model_stays=True)
    if site.requirement == "RUN":
        if not constructors:
            return Reason(_NO_CONSTRUCTOR)
        if not reached:
            return Reason(_NO_CONSTRUCTOR_HERE)
        # Name what holds the run, not the constructors this site holds itself.
        held = [c for c in reached if c.constructor not in migrating]
        causes = [c for c in held if c.rewrite is None or _held_by_ties(c, sites, ok)]
        listed = _list(f"FSDP(...) at {_at(site, c)}" for c in (causes or held))
        return Reason(f"FSDP1 models remain in this run, and this one may be any of them: {listed}")
    return Reason("rewritten only together with the rest of its block, which stays")


def _held_by_ties(constructor: Site, sites: Sequence[Site], ok: set[tuple[str, int]]) -> bool:
    return any(constructor.constructor in s.ties and s.key not in ok for s in sites)


def _at(here: Site, there: Site) -> str:
    """Where ``there`` is, as seen from ``here``'s file: a line, or a relative path and line."""
    if here.path == there.path:
        return f"line {there.line}"
    relative = os.path.relpath(there.path, os.path.dirname(os.path.abspath(here.path)) or ".")
    return f"{relative}:{there.line}"


def _list(items: Iterable[str], limit: int = 3) -> str:
    items = list(dict.fromkeys(items))
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")
