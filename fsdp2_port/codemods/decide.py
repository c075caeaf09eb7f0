"""Deciding a run: which constructors migrate, which sites are rewritten, and why each other
one stays, from one state (``_Run``): the verdict on a site and its reason read the same
predicates, so they cannot disagree.

1. *Resolve*: every site's links into other files are settled (``semantic.resolve``); a site
   no model of the run can reach is nothing; an untied one takes what it can be untied.
2. *Decide*, whole models or nothing, to a fixpoint: a site is allowed when its requirement is
   met by the constructors that still migrate (``plan``'s module docstring); sites of a group
   are rewritten together or not at all; a site that stays and holds its models (``Scope``)
   keeps them on FSDP1, and an untied one every constructor its program may run.
3. *Explain*: each site that stays gets its reason, each constructor that stays the sites that
   keep it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace

from fsdp2_port.codemods.plan import Decisions, FilePlan, Reason, Scope, Site, Target
from fsdp2_port.codemods.programs import Programs
from fsdp2_port.codemods.refs import UNKNOWN, Built, Deferred, Optimizer
from fsdp2_port.codemods.semantic.modules import RunModules
from fsdp2_port.codemods.semantic.resolve import Resolver

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
    "in code this whole program never runs (a function or method no line calls, or a method of "
    "a class no line names once the run is written; no config names either): it holds no model; "
    "port it before anything uses it"
)
_REACHES_NO_MODEL = (
    "no model of the run reaches it (every value it may act on is followed to where it is "
    "made): it holds none; port it before one does"
)
_IMPORTED_NOWHERE = (
    "in a module no program of this whole program imports once the run is written: it holds "
    "no model; port it before anything imports it"
)
_OWN_FILE = (
    "in a module no program of this whole program imports once the run is written: whenever "
    "something imports it, the models its own file builds meet this line, so they stay FSDP1 "
    "until it is ported"
)
#: A site's ``Site.key``.
Key = tuple[str, int]
_NOTHING = {"rewrite": None, "fallback": None, "requirement": "NEVER", "silent": True}


def decide(
    plans: Sequence[FilePlan],
    programs: Programs | None = None,
    modules: RunModules | None = None,
) -> Decisions:
    """Settle the run: which constructors migrate and which sites are rewritten (``programs``:
    which constructors each file's lines may meet, without it every one; ``modules``: the
    run's modules, ``ModuleGraph.run_modules``)."""
    resolver = Resolver(plans, modules, programs)
    plans = [replace(plan, sites=[_resolved(s, resolver) for s in plan.sites]) for plan in plans]
    run = _Run(plans, programs, _nesting(plans, resolver))
    if not run.about_fsdp1:
        # no FSDP1 in the run: sites found by names alone (``.module``, ``no_sync``, ``params``
        # on a library's own wrappers) are not about FSDP1: nothing changes, nothing is marked
        return Decisions({plan.path: plan for plan in plans}, set(), False, set(), {}, False)
    run.settle()
    return run.decisions()


def _nesting(plans: Sequence[FilePlan], resolver: Resolver) -> dict[str, frozenset[str]]:
    """Each FSDP1 constructor -> the other constructors whose models the module it wraps may
    be (``FilePlan.wraps``): FSDP2 cannot shard an FSDP1 model, nor FSDP1 wrap FSDP2 units."""
    out = {}
    for plan in plans:
        for cid, refs in plan.wraps.items():
            found = resolver.settle(refs, plan.path) if refs else set()
            inner = frozenset(r.id for r in found if isinstance(r, Built)) - {cid}
            if inner:
                out[cid] = inner
    return out


def _resolved(site: Site, resolver: Resolver) -> Site:
    """The site with its links into other files settled, and what follows for a site the run
    ties to no model."""
    reach = site.reach
    if reach.deferred:
        found = resolver.settle(reach.deferred, site.path)
        site = site.but(
            ties=reach.ties | {r.id for r in found if isinstance(r, Built)},
            optimizers=reach.optimizers | {r for r in found if isinstance(r, Optimizer)},
            deferred=frozenset(),
            opaque=reach.opaque or UNKNOWN in found,
        )
        if _reaches_nothing(site, resolver, reach.deferred):
            # every value it may hold is followed, none is a model of the run, and none is an
            # object an FSDP1 constructor of the run wraps (sharded in place under FSDP2); FSDP1
            # code spelled out stays marked
            if reach.named:
                return site.but(rewrite=None, fallback=None, requirement="NEVER", holds=False)
            return site.but(**_NOTHING, holds=False)
    if site.target is Target.OPTIMIZER:  # no BF16 optimizer reaches it: not our business
        return (
            site
            if site.reach.optimizers
            else site.but(rewrite=None, requirement="NEVER", silent=True)
        )
    return site if site.reach.ties else _untied(site)


def _reaches_nothing(site: Site, resolver: Resolver, deferred: frozenset[Deferred]) -> bool:
    """Tied to no model, every value followed, and none an object a constructor of the run
    wraps (sharded in place under FSDP2)."""
    reach = site.reach
    return (
        not reach.ties
        and not reach.opaque
        and site.target is not Target.OPTIMIZER
        and not resolver.may_be_sharded(deferred, site.path)
    )


def _untied(site: Site) -> Site:
    """A site the run ties to no model: an object just built is nothing; a form right on any
    model is taken with the run's models (``ANY``); a site only calls into other files could
    make a model is its ``unknown`` marker; one that needed its models follows the run."""
    forms, reach = site.forms, site.reach
    if reach.fresh:
        return site.but(**_NOTHING, holds=False)
    if forms.either is not None:
        # ``ALWAYS`` was the requirement had it been tied (a form right on any model): untied,
        # the form is taken with the run's models like any other ``either``
        untied = site.requirement in ("MODELS", "RUN", "ALWAYS")
        return site.but(
            rewrite=forms.either if untied else forms.rewrite,
            requirement="ANY" if untied else site.requirement,
            message=reach.unknown or site.message,
        )
    if reach.unknown is not None:
        return site.but(
            rewrite=None,
            fallback=None,
            requirement="NEVER",
            message=reach.unknown,
            silent=not reach.unknown,
        )
    return site.but(requirement="RUN") if site.requirement == "MODELS" else site


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

    @property
    def never_run(self) -> frozenset[tuple[str, int]]:
        """The lines no program of a whole program runs (``Programs.never_run``)."""
        return self._programs.never_run

    def never_runs(self, site: Site) -> bool:
        """No program of a whole program runs the site's line (``Programs.never_run``), or
        imports its module (``Programs.runs_nowhere``)."""
        return (site.path, site.line) in self._programs.never_run or self._programs.runs_nowhere(
            site.path
        )


class _Run:
    """The state a run is decided in: its sites, the constructors that still migrate, the
    sites allowed (``ok``); verdicts and reasons read the same predicates."""

    def __init__(
        self,
        plans: Sequence[FilePlan],
        programs: Programs | None,
        nesting: Mapping[str, frozenset[str]],
    ) -> None:
        self.plans = plans
        #: Constructor -> those whose models it wraps (``_nesting``).
        self.nesting = nesting
        self.sites = [s for plan in plans for s in plan.sites]
        self.constructors = [s for s in self.sites if s.constructor is not None]
        self.others = [s for s in self.sites if s.constructor is None]
        self.by_id = {c.constructor: c for c in self.constructors if c.constructor is not None}
        builds = [b for p in plans for b, _ in p.fsdp2_builds]
        self.reach = _Reach(self.constructors, builds, programs)
        self.migrating: set[str] = {
            c.constructor for c in self.constructors if c.constructor and c.forms.rewrite
        }
        self.about_fsdp1 = bool(self.constructors) or any(p.fsdp1_or_port for p in plans)
        self.fsdp2_models = self.about_fsdp1 and _has_fsdp2_models(plans, bool(self.constructors))
        self.groups: dict[str, list[Site]] = {}
        for site in self.others:
            for group in site.groups:
                self.groups.setdefault(group, []).append(site)
        self.ok: set[Key] = set()
        #: Allowed sites that stay: right as they are on the models that meet them (``_spare``).
        self.spare: set[Key] = set()

    # -- deciding ------------------------------------------------------------------------------
    def settle(self) -> None:
        """Shrink the migrating constructors until no site that stays holds one of them."""
        while True:
            self.ok = self._allowed_in_groups()
            blocked: set[str] = set()
            for site in self.others:
                if site.key not in self.ok and site.scope is Scope.MODELS:
                    blocked |= self.held_by(site)
            for outer, inner in self.nesting.items():  # the two migrate together or not at all
                if outer not in self.migrating or not inner <= self.migrating:
                    blocked |= inner | {outer}
            if not blocked & self.migrating:
                return
            self.migrating -= blocked

    def _allowed_in_groups(self) -> set[Key]:
        allowed = {s.key for s in self.others if self.allowed(s, self.migrating)}
        ok = self._whole_groups(allowed, lambda keys, kept: not keys <= kept)
        self.spare = self._spare(ok)
        return ok - self.spare

    def _whole_groups(
        self, keys: set[Key], broken: Callable[[set[Key], set[Key]], bool]
    ) -> set[Key]:
        """``keys`` less every group that has a member in them and is ``broken(group,
        kept)``, until no such group is left: a group's sites go together or not at all."""
        kept = set(keys)
        changed = True
        while changed:
            changed = False
            for members in self.groups.values():
                group = {m.key for m in members}
                if group & kept and broken(group, kept):
                    kept -= group
                    changed = True
        return kept

    def _spare(self, ok: set[Key]) -> set[Key]:
        """The allowed sites whose form, right on any model, meets models of the run but no
        migrating one (nor an FSDP2 one): their original is right as it is, so they stay,
        unless a site rewritten with them (their group) is needed. A site no constructor of
        the run reaches takes its form: its models come from elsewhere, FSDP1 or not."""
        spare = {
            s.key
            for s in self.others
            if s.key in ok
            and s.requirement == "ALWAYS"
            and s.target is not Target.OPTIMIZER  # a BF16 optimizer's fix: made on FSDP1 too
            and self.models(s)
            and not self.meets(s, self.migrating)
        }
        return self._whole_groups(spare, lambda group, kept: bool((group & ok) - kept))

    def allowed(self, site: Site, migrating: set[str], fsdp2: bool = True) -> bool:
        """Whether the site's rewrite may be made while ``migrating`` migrate (``fsdp2``:
        counting the FSDP2 models the program has already)."""
        if site.forms.rewrite is None or site.requirement == "NEVER":
            return False
        if site.requirement == "ALWAYS":
            return True
        if site.requirement == "ANY":  # taken with the models that meet it: none, if never run
            return (site.path, site.line) not in self.reach.never_run and self.meets(
                site, migrating, fsdp2 and site.target is not Target.MODEL_STATE
            )
        if site.requirement == "RUN":
            return bool(self.reach(site)) and self.reach(site) <= migrating
        return bool(site.reach.ties) and site.reach.ties <= migrating

    def meets(self, site: Site, migrating: set[str], fsdp2: bool = True) -> bool:
        """Whether a model of ``migrating`` may meet the site (its own models, or, untied or
        opaque, those its program may run), or (``fsdp2``) an FSDP2 model the program has."""
        return bool(migrating & self.models(site)) or (
            fsdp2 and self.fsdp2_models and self.reach.fsdp2(site)
        )

    def models(self, site: Site) -> frozenset[str]:
        """The constructors whose models may meet the site: its own, and, untied or opaque,
        those its program may run."""
        ties = site.reach.ties
        return ties | self.reach(site) if site.reach.opaque or not ties else ties

    def held_by(self, site: Site) -> frozenset[str]:
        """The constructors a site that stays keeps on FSDP1: its models, or, untied, every
        constructor its program may run (not in code no program runs)."""
        if site.scope is not Scope.MODELS:
            return frozenset()
        if self.holds_run(site):
            return site.reach.ties | self.reach(site)
        if self.untied_hold(site) and self.reach.imported_nowhere(site):
            return self.own_file(site)  # whenever its module runs, they run with it
        return site.reach.ties

    def own_file(self, site: Site) -> frozenset[str]:
        """The constructors of the site's own file."""
        return frozenset(
            c.constructor for c in self.constructors if c.path == site.path and c.constructor
        )

    def holds_run(self, site: Site) -> bool:
        return self.untied_hold(site) and not self.reach.never_runs(site)

    @staticmethod
    def untied_hold(site: Site) -> bool:
        return site.scope is Scope.MODELS and site.requirement == "RUN" and not site.reach.ties

    # -- the outcome ---------------------------------------------------------------------------
    def decisions(self) -> Decisions:
        rewritten = set(self.ok) | {
            c.key for c in self.constructors if c.constructor in self.migrating
        }
        migrates = bool(self.constructors) and len(self.migrating) == len(self.constructors)
        reasons = {}
        for site in self.sites:
            if site.key not in rewritten:
                reason = self.reason(site)
                if reason.text:
                    reasons[site.key] = reason
        plans = {plan.path: plan for plan in self.plans}
        return Decisions(plans, self.migrating, migrates, rewritten, reasons)

    def reason(self, site: Site) -> Reason:
        """Why a site that stays stays (an empty text when nothing needs saying)."""
        if site.constructor is not None:
            return self._constructor_reason(site)
        unreached = self._unreached_reason(site)
        if unreached is not None:
            return unreached
        reached = [c for c in self.constructors if c.constructor in self.reach(site)]
        if (
            self.holds_run(site)
            and site.forms.rewrite is None
            and any(c.forms.rewrite for c in reached)
        ):
            models = (
                "of this run" if len(reached) == len(self.constructors) else "its program builds"
            )
            return Reason(
                f"it may act on any model {models}: they all stay FSDP1 until it is ported"
            )
        if site.forms.rewrite is None or site.requirement == "NEVER":
            return Reason("")
        if site.key in self.spare:  # right as it is on the models that meet it
            return self._staying(site, self.models(site))
        if self.allowed(site, self.migrating, fsdp2=False):
            return self._group_reason(site)
        return self._requirement_reason(site, reached)

    def _unreached_reason(self, site: Site) -> Reason | None:
        """Why FSDP1 code no model reaches stays: in code no program runs, or on values
        followed to where they are made, none of them a model."""
        if self.untied_hold(site) and self.reach.never_runs(site):
            if not self.reach.imported_nowhere(site):
                return Reason(_NEVER_RUN)
            if not self.own_file(site):
                return Reason(_IMPORTED_NOWHERE)
            if site.forms.rewrite is None:
                return Reason(_OWN_FILE)
        if site.reach.named and site.scope is Scope.NOTHING and site.requirement == "NEVER":
            return Reason(_REACHES_NO_MODEL)
        return None

    def _constructor_reason(self, site: Site) -> Reason:
        """The sites that keep a constructor that could be rewritten on FSDP1: those that stay
        even were it to migrate."""
        if site.constructor in self.migrating or site.forms.rewrite is None:
            return Reason("")
        assert site.constructor is not None
        with_it = self.migrating | {site.constructor}
        blockers = [
            s
            for s in self.others
            if site.constructor in self.held_by(s)
            and s.key not in self.ok
            and not self.allowed(s, with_it, fsdp2=False)
        ]
        nested = [  # FSDP1 models it wraps, or that wrap its model, and stay
            self.by_id[c]
            for c in self.by_id
            if c not in self.migrating
            and (
                c in self.nesting.get(site.constructor, ())
                or site.constructor in self.nesting.get(c, ())
            )
        ]
        because = _list(
            [
                *(
                    f"{b.code} at {_at(site, b)}"
                    + (" (it may act on any model here)" if not b.reach.ties else "")
                    for b in blockers
                ),
                *(f"{n.code} at {_at(site, n)} (one wraps the other's model)" for n in nested),
            ]
        )
        return Reason(f"{_MODEL_STAYS} because of {because}", model_stays=True)

    def _group_reason(self, site: Site) -> Reason:
        partners = [
            s
            for s in self.others
            if s.key != site.key
            and s.key not in self.ok
            and s.groups & site.groups
            and not self.allowed(s, self.migrating, fsdp2=False)
        ]
        if partners and all(self.reason(p).model_stays for p in partners):
            # they stay only because their models do: so does the site, with them
            return self._staying(site, frozenset().union(*(self.models(p) for p in partners)))
        listed = _list(f"{p.code} at {_at(site, p)}" for p in partners)
        return Reason(f"it goes with FSDP1 code that stays: {listed}")

    def _requirement_reason(self, site: Site, reached: list[Site]) -> Reason:
        if site.requirement == "MODELS" and (site.reach.ties & self.by_id.keys()) - self.migrating:
            return self._staying(site, site.reach.ties)
        if site.requirement != "RUN":
            return Reason("rewritten only together with the rest of its block, which stays")
        if not self.constructors:
            return Reason(_NO_CONSTRUCTOR)
        if not reached:
            return Reason(_NO_CONSTRUCTOR_HERE)
        # Name what holds the run, not the constructors this site holds itself.
        held = [c for c in reached if c.constructor not in self.migrating]
        causes = [c for c in held if c.forms.rewrite is None or self._held_by_ties(c)]
        listed = _list(f"FSDP(...) at {_at(site, c)}" for c in (causes or held))
        return Reason(f"FSDP1 models remain in this run, and this one may be any of them: {listed}")

    def _staying(self, site: Site, models: frozenset[str]) -> Reason:
        """``models`` (those the run has) stay FSDP1, so the site does."""
        staying = [self.by_id[c] for c in sorted((models & self.by_id.keys()) - self.migrating)]
        listed = _list(f"FSDP(...) at {_at(site, c)}" for c in staying)
        return Reason(f"{_MODEL_STAYS}: {listed}", model_stays=True)

    def _held_by_ties(self, constructor: Site) -> bool:
        return any(
            constructor.constructor in s.reach.ties and s.key not in self.ok for s in self.sites
        )


def _has_fsdp2_models(plans: Sequence[FilePlan], constructors: bool) -> bool:
    """The run builds FSDP2 models already (a run written half, by hand or killed), and they
    are a migration's: there are FSDP1 constructors too, or files name more of FSDP1 and
    fsdp2_port than the sharded grad scaler (FSDP2 code uses that as well)."""
    return (constructors or not all(p.scaler_only for p in plans)) and any(
        p.fsdp2_models for p in plans
    )


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
