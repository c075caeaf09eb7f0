"""The plan of one run: FSDP1 constructors, the sites that depend on them, and the decisions.

Rules never edit text. They add ``Site`` records to a file's plan: where, what the rewrite
would be (edits and imports) and when it is allowed (``requirement``). ``decide`` then settles
the whole run at once, whole models or nothing:

- a constructor migrates when it can be rewritten and no site tied to its model is blocked;
- a site tied to a model (``ties``) is rewritten exactly when all its models migrate
  (``MODELS``); a tied site that cannot be rewritten keeps its models on FSDP1;
- a site whose rewrite is right under FSDP1 and FSDP2 alike (``ALWAYS``) is rewritten where a
  migrating model (or an FSDP2 one) may meet it, or no constructor of the run does (its models
  come from elsewhere); where only models that stay meet it, the original is right and stays
  (``Scope``'s holds aside); a BF16 optimizer's fix (F2P009) is made whatever its models;
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

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Literal

from fsdp2_port.codemods.refs import (
    Deferred,
    Optimizer,
    Passing,
    Ref,
)
from fsdp2_port.codemods.text import Edit

from .assumed import Assumption

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
class Position:
    """Where a site is: its node's 1-based line and character column and offsets, and where
    its marker goes (the start of the statement's first line, and its indentation)."""

    path: str
    line: int
    column: int
    start: int
    end: int
    anchor: int
    indent: str


@dataclass(frozen=True)
class Forms:
    """The forms a site may take, each under its condition: ``rewrite`` when its
    ``requirement`` allows it; else ``fallback``, right under FSDP1; ``either``, right whatever
    its receiver holds, when the run ties it to no model (``ANY``)."""

    rewrite: Rewrite | None = None
    fallback: Rewrite | None = None
    either: Rewrite | None = None


@dataclass(frozen=True)
class Reach:
    """Which models may reach a site: the constructors tied to it (``ties``), links the run
    settles (``deferred``: calls into other files, parameters they may pass, library objects),
    the BF16 optimizers it is about; ``opaque``: some value its receiver may hold comes from
    code the analysis does not follow; ``fresh``: its receiver is an object just built;
    ``unknown``: its marker ("" none) when only calls into other files could make it a model
    and the run ties it to none; ``named``: it spells FSDP1 code (``FSDP.fsdp_modules(m)``,
    ``_reshard(m, ...)``), so it is marked whatever its receiver holds."""

    ties: frozenset[str] = frozenset()
    deferred: frozenset[Deferred] = frozenset()
    optimizers: frozenset[Optimizer] = frozenset()
    opaque: bool = True
    fresh: bool = False
    unknown: str | None = None
    named: bool = False


class Marking(Enum):
    """How a site that stays is shown."""

    #: With a marker saying why.
    MARKED = "marked"
    #: Right under FSDP1: no marker of its own when it stays only because its models stay
    #: FSDP1 (the constructor's says why).
    QUIET = "quiet"
    #: Right while every model of the run stays FSDP1 (a type test, an annotation): no marker
    #: in a run where no model migrates.
    FSDP1_ONLY = "fsdp1-only"
    #: Neither a finding nor a marker (``# fsdp2-port: ignore``, an object just built).
    SILENT = "silent"


class Scope(Enum):
    """What a site holds when it stays."""

    #: Its models (every model its program may build, while it is tied to none): FSDP1 code
    #: that breaks on an FSDP2 model.
    MODELS = "models"
    #: Nothing: code still right on an FSDP2 model, or that only switches behaviour (a type
    #: test, an annotation, compat's optimizer): marked instead.
    NOTHING = "nothing"
    #: Nothing, being reached only while an FSDP1 type test holds: no FSDP2 model gets there,
    #: and the test carries the marker.
    BEHIND_TEST = "behind-test"


class Target(Enum):
    """What a site is about."""

    #: The model its receiver holds.
    MODEL = "model"
    #: The model, where the original means something of its own on FSDP2 (``m.state_dict()``:
    #: FSDP2's sharded answer): FSDP2 models the program already has do not make an untied one
    #: take ``Forms.either``.
    MODEL_STATE = "model-state"
    #: A BF16 master optimizer (F2P009): the optimizers that reach it (``Reach.optimizers``).
    OPTIMIZER = "optimizer"


@dataclass(frozen=True)
class Site:
    """One place in one file that a rule rewrites or marks: its forms, by condition; which
    models reach it; what it holds when it stays; how it is shown (built by
    ``FileAnalysis.add`` and ``add_tied``; later stages make changed copies, ``but``)."""

    code: str
    at: Position
    #: The marker's text when the site stays (the reason is appended).
    message: str
    requirement: Requirement = "NEVER"
    forms: Forms = Forms()
    reach: Reach = Reach()
    #: Sites rewritten together or not at all (a state-dict block and its calls, a type test
    #: and the FSDP1 code it guards).
    groups: frozenset[str] = frozenset()
    #: For a constructor site: its id (``path:line:column``).
    constructor: str | None = None
    marking: Marking = Marking.MARKED
    scope: Scope = Scope.MODELS
    target: Target = Target.MODEL
    #: Its position in its file's plan: ``(path, index)`` names it across processes.
    index: int = 0

    @property
    def path(self) -> str:
        return self.at.path

    @property
    def line(self) -> int:
        return self.at.line

    @property
    def key(self) -> tuple[str, int]:
        return self.at.path, self.index

    def but(self, **facts: Any) -> Site:
        """A copy with ``facts`` changed, in the rules' words (``made``)."""
        return made(self, **facts)


#: The rules' words for a site's parts (``FileAnalysis.add``'s details, ``Site.but``).
_FORMS = ("rewrite", "fallback", "either")
_REACH = ("ties", "deferred", "optimizers", "opaque", "fresh", "unknown", "named")


def made(site: Site, **facts: Any) -> Site:
    """``site`` with ``facts`` set: its fields (``requirement``, ``groups``, ``constructor``,
    ``index``, ``message``), its forms and reach by their parts' names, and ``silent``,
    ``quiet``, ``fsdp1_only_marker`` (its marking), ``holds``, ``behind_test`` (its scope),
    ``fsdp2_meaning``, ``about_optimizer`` (its target)."""
    forms = {k: facts.pop(k) for k in _FORMS if k in facts}
    reach = {k: facts.pop(k) for k in _REACH if k in facts}
    changes: dict[str, Any] = {}
    if forms:
        changes["forms"] = replace(site.forms, **forms)
    if reach:
        changes["reach"] = replace(site.reach, **reach)
    marking = _marking(site.marking, facts)
    scope = _scope(site.scope, facts)
    if facts.pop("about_optimizer", False):
        changes["target"] = Target.OPTIMIZER
    elif facts.pop("fsdp2_meaning", False):
        changes["target"] = Target.MODEL_STATE
    return replace(site, marking=marking, scope=scope, **changes, **facts)


def _marking(marking: Marking, facts: dict[str, Any]) -> Marking:
    silent = facts.pop("silent", None)
    quiet = facts.pop("quiet", None)
    fsdp1_only = facts.pop("fsdp1_only_marker", None)
    if silent:
        return Marking.SILENT
    if silent is False and marking is Marking.SILENT:
        marking = Marking.MARKED
    if fsdp1_only:
        return Marking.FSDP1_ONLY
    if quiet:
        return Marking.QUIET
    if quiet is False and marking is Marking.QUIET:
        return Marking.MARKED
    return marking


def _scope(scope: Scope, facts: dict[str, Any]) -> Scope:
    holds = facts.pop("holds", None)
    behind_test = facts.pop("behind_test", None)
    if behind_test:
        return Scope.BEHIND_TEST
    if behind_test is False and scope is Scope.BEHIND_TEST:
        scope = Scope.NOTHING
    if holds is True:
        return Scope.MODELS
    if holds is False and scope is Scope.MODELS:
        return Scope.NOTHING  # behind a test, it holds nothing already
    return scope


@dataclass
class FilePlan:
    path: str
    sites: list[Site] = field(default_factory=list)
    #: Qualified names of this file's functions -> what their calls return.
    exports: dict[str, frozenset[Ref]] = field(default_factory=dict)
    #: Qualified names of this file's functions -> their positional parameters, as called.
    signatures: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: Models (and function values) this file passes to functions of other files, to library
    #: objects, to methods of objects of no known class and to called values.
    passes: list[Passing] = field(default_factory=list)
    #: The functions of other files (and libraries) this file calls, by qualified name.
    calls: frozenset[str] = frozenset()
    #: What the modules this file's FSDP1 constructors wrap may hold (``Ties.sharded``).
    sharded: frozenset[Ref] = frozenset()
    #: Each FSDP1 constructor's id -> what the module it wraps may hold: one that wraps
    #: another's model migrates with it or not at all (``decide``).
    wraps: dict[str, frozenset[Ref]] = field(default_factory=dict)
    #: What may be a function value this file hands to code the analysis does not follow
    #: (``function_values.escaping``): such a function may be called with anything.
    escaping: frozenset[Ref] = frozenset()
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
    #: The assumptions its analysis took (``assumed``), in order of line.
    assumptions: tuple[Assumption, ...] = ()

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
