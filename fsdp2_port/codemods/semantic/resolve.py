"""What the links between files stand for in a run: the value flow across calls and files.

Each file's analysis leaves links where a value comes from or goes to another file
(``refs.Returned``, ``Passed``, ``Given``) and what it tells the run (``FilePlan.exports``,
``passes``, ``calls``, ``sharded``). ``Resolver`` settles a link to what it may stand for,
each link once (the links form a graph with cycles; strongly connected components share one
answer), in one of several modes: every answer, the models only, or where objects were made
(``origins``); optionally only through calls that may run in given programs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from fsdp2_port.codemods.refs import (
    CALL,
    CALLED,
    COPY,
    DISPATCHED,
    GIVEN_TO,
    MAY_BE_FUNCTION,
    UNKNOWN,
    Built,
    Deferred,
    Function,
    Given,
    Instance,
    Optimizer,
    Passed,
    Passing,
    Ref,
    Returned,
    Unknown,
    groups_of,
    groups_owner,
)
from fsdp2_port.codemods.semantic.modules import RunModules

if TYPE_CHECKING:
    from fsdp2_port.codemods.plan import FilePlan
    from fsdp2_port.codemods.programs import Programs

#: ``Resolver`` modes: every terminal, the models only, where objects were made.
_ALL = "all"
_MODELS = "models"
_ORIGINS = "origins"
#: ``_ORIGINS`` without method calls on objects of no known class (what those objects are is
#: itself asked in this mode: ``Resolver._may_be_instance``).
_PLAIN_ORIGINS = "plain origins"
#: The function values (``Function``) and the unknown, through plain passings only (neither
#: method calls on objects of no known class nor calls of values: a function value handed to
#: one escapes, ``Resolver._escaped``).
_FUNCTIONS = "functions"


class Resolver:
    """What the links into other files stand for in a run: ``Returned(f)``, what the run's
    ``f`` returns (a library's function: ``Given``); ``Passed(f, x)``, what the run's files
    pass to ``f`` for ``x``; ``Given(lib)``, what the run's files give to ``lib``'s functions
    and objects. A name whose module the importer may find on several roots
    (``RunModules.aliases``) stands for each of them."""

    def __init__(
        self,
        plans: Sequence[FilePlan],
        modules: RunModules | None = None,
        programs: Programs | None = None,
    ) -> None:
        self.modules = modules or RunModules()
        self.programs = programs
        self.aliases = self.modules.aliases
        self._spellings: dict[str, tuple[str, ...]] = {}
        self.exports: dict[str, frozenset[Ref]] = {}
        self.signatures: dict[str, tuple[str, ...]] = {}
        self.passed: dict[str, list[Passing]] = {}
        #: Method calls on objects of no known class, by method name (``Passing``).
        self.dispatched: dict[str, list[Passing]] = {}
        #: Calls of values (``refs.CALLED``), and their passings by the functions the values
        #: may be (``_routed``).
        self.value_calls: list[Passing] = []
        self._routes: dict[str, list[Passing]] | None = None
        self._escapes: frozenset[str] | None = None
        self._escaping = [r for plan in plans for r in plan.escaping]
        self._receivers: dict[int, frozenset[Ref]] = {}
        self._home: dict[int, str] = {}  # a passing -> the file that passes
        self.given: dict[str, list[tuple[str, frozenset[Ref]]]] = {}
        self.called: set[str] = set()
        for plan in plans:
            self.called |= {c for call in plan.calls for c in (call, *self.spellings(call))}
            self.exports.update(plan.exports)
            self.signatures.update(plan.signatures)
            for passing in plan.passes:
                if passing.callee == CALLED:
                    self.value_calls.append(passing)
                elif passing.callee.startswith(DISPATCHED):
                    self.dispatched.setdefault(passing.callee[1:], []).append(passing)
                else:
                    self.passed.setdefault(passing.callee, []).append(passing)
                self._home[id(passing)] = plan.path
                if passing.callee.startswith(GIVEN_TO):
                    instance = passing.callee[len(GIVEN_TO) :]
                    self.given.setdefault(instance, []).append((plan.path, passing.refs))
        self._ambiguous: dict[str, list[Passing]] | None = None
        self._settled: dict[tuple[str, frozenset[str] | None], dict[Deferred, frozenset[Ref]]] = {}
        self.sharded = {plan.path: plan.sharded for plan in plans if plan.sharded}
        self._taint: dict[str, frozenset[Ref]] = {}

    def settle(
        self, refs: Iterable[Ref], path: str | None = None
    ) -> set[Built | Optimizer | Unknown]:
        """The models and optimizers among ``refs`` and behind their links, and ``UNKNOWN``
        where a value comes from code no file of the run shows (``path``: where ``refs`` are
        read; only calls that may run in the same process count)."""
        within = self._programs_of(path) if path is not None else None
        return self._closure(refs, _ALL, within)  # type: ignore[return-value]

    def models(self, refs: Iterable[Ref]) -> set[Built | Optimizer]:
        """``settle`` without the unknown: the models and optimizers only."""
        return self._closure(refs, _MODELS)  # type: ignore[return-value]

    def functions(self, refs: Iterable[Ref]) -> frozenset[str]:
        """The functions of the run ``refs`` may hold as values (``Function``)."""
        return frozenset(r.name for r in self._closure(refs, _FUNCTIONS) if isinstance(r, Function))

    def origins(self, refs: Iterable[Ref], within: frozenset[str] | None = None) -> set[Ref]:
        """Where the objects ``refs`` may hold were made: constructors (``Built``), libraries
        (``Given``), the run's classes (a ``Returned`` no function of the run answers), or
        code no file shows (``UNKNOWN``). Two values of no common origin are not one object.
        ``within``: the programs (roots, ``ProgramMap``) whose calls count."""
        return self._closure(refs, _ORIGINS, within)

    def may_be_sharded(self, refs: Iterable[Ref], path: str) -> bool:
        """Whether an object ``refs`` may hold at a line of ``path`` may also be handed to an
        FSDP1 constructor of the run that may run in the same process: under FSDP2 it is then
        sharded in place (``FilePlan.sharded``)."""
        taint = self._taint.get(path)
        if taint is None:
            map_ = self.programs.map if self.programs is not None else None
            wrapped: set[Ref] = set()
            for home, sharded in self.sharded.items():
                if map_ is None or map_.meet(path, home):
                    wrapped |= sharded
            within = self._programs_of(path)
            taint = self._taint[path] = frozenset(self.origins(wrapped, within))
        if UNKNOWN in taint:
            return True
        found = self.origins(refs, self._programs_of(path))
        return UNKNOWN in found or not found.isdisjoint(taint)

    def _programs_of(self, path: str) -> frozenset[str] | None:
        """The programs a line of ``path`` runs in (None: any, as for an open file)."""
        map_ = self.programs.map if self.programs is not None else None
        return None if map_ is None else map_.runs_of(path)

    def _closure(
        self, refs: Iterable[Ref], mode: str, within: frozenset[str] | None = None
    ) -> set[Ref]:
        out: set[Ref] = set()
        for ref in refs:
            if self._is_link(ref, mode):
                out |= self._reach(ref, mode, within)  # type: ignore[arg-type]
            elif mode != _MODELS or not isinstance(ref, Unknown):
                out.add(ref)
        if mode in (_ORIGINS, _PLAIN_ORIGINS):
            return out
        if mode == _FUNCTIONS:  # anything else called is code the analysis does not follow
            return {r if isinstance(r, Function) else UNKNOWN for r in out}
        return {r for r in out if isinstance(r, (Built, Optimizer, Unknown))}

    def _reach(
        self, start: Deferred, mode: str, within: frozenset[str] | None = None
    ) -> frozenset[Ref]:
        """What a link settles to in ``mode``, each link's answer computed once: the links
        form a graph (cycles included), whose strongly connected components share one answer
        (Tarjan's algorithm, iteratively). What a library gives back (``Given``) is only the
        run's models it was given: a value given to it that no file shows the origin of is
        taken for none of them."""
        settled = self._settled.setdefault((mode, within), {})
        if start not in settled:

            def expand(node: Deferred) -> tuple[set[Ref], list[Deferred]]:
                targets = self._step(node, mode, within)
                direct = {t for t in targets if not self._is_link(t, mode)}
                return direct, [t for t in targets if self._is_link(t, mode)]  # type: ignore[misc]

            _Components(expand, settled).settle(start)
        return settled[start]

    def _is_link(self, ref: Ref, mode: str) -> bool:
        """Whether ``_reach`` follows ``ref`` in ``mode`` (else it is an answer: in
        ``_ORIGINS``, a class of the run is where objects are made)."""
        if mode in (_ORIGINS, _PLAIN_ORIGINS) and isinstance(ref, Returned):
            if groups_owner(ref.function) is not None:
                return True  # parameters: made with their models
            return self._answers(ref) and not ref.function.endswith(COPY)  # a copy is made there
        return isinstance(ref, (Returned, Passed, Given))

    def _step(self, ref: Deferred, mode: str, within: frozenset[str] | None) -> list[Ref]:
        """What one link stands for in ``mode``: its targets, terminals kept as ``_closure``
        wants them (what a library object hands back: what the run gave it, a value whose
        origin no file shows taken for none of the run's)."""
        if mode == _FUNCTIONS:
            return list(self._targets(ref, dispatch=False, route=False))
        if mode in (_ORIGINS, _PLAIN_ORIGINS):
            targets = list(self._targets(ref, within, dispatch=mode == _ORIGINS))
            if isinstance(ref, Given):
                return [t for t in targets if not isinstance(t, Unknown)]
            return targets
        if isinstance(ref, Given) and mode == _ALL:
            given = [
                r
                for home, refs in self.given.get(ref.instance, ())
                for r in refs
                if self._home_within(home, within)
            ]
            return [r for r in self._closure(given, _MODELS, within) if not isinstance(r, Unknown)]
        targets = list(self._targets(ref, within))
        if mode == _MODELS:
            return [t for t in targets if not isinstance(t, Unknown)]
        return targets

    def _answers(self, ref: Returned) -> bool:
        """Whether a function of the run answers ``ref`` (else: a class, or a library's)."""
        return any(f in self.exports for f in self.spellings(ref.function))

    def spellings(self, name: str) -> tuple[str, ...]:
        """The run's names ``name`` may stand for: itself, or those of each module its
        module may be (``aliases``)."""
        if not self.aliases:
            return (name,)
        found = self._spellings.get(name)
        if found is None:
            found = self._spellings[name] = self._spelled(name)
        return found

    def _spelled(self, name: str) -> tuple[str, ...]:
        """The longest head of ``name`` (cut before a ``.``, a field's ``#`` or an element's
        ``[``) that is an alias, spelled each way."""
        head = name
        while True:
            found = self.aliases.get(head)
            if found is not None:
                return tuple(f"{alias}{name[len(head) :]}" for alias in found)
            cut = max(head.rfind(mark) for mark in ".#[")
            if cut < 0:
                return (name,)
            head = head[:cut]

    def _targets(
        self,
        ref: Deferred,
        within: frozenset[str] | None = None,
        dispatch: bool = True,
        route: bool = True,
    ) -> Iterable[Ref]:
        """What one link stands for: what the run gives a library object, what a function of
        the run returns (a field: what its class assigns), what the run passes to a
        parameter (``dispatch``, ``route``: through method calls on objects of no known
        class, through calls of values)."""
        if isinstance(ref, Instance):
            return ()  # a library object is no model of the run
        if isinstance(ref, Given):
            return {
                r
                for home, refs in self.given.get(ref.instance, ())
                if self._home_within(home, within)
                for r in refs
            }
        if isinstance(ref, Returned):
            return self._returned(ref, route)
        return self._passed(ref, within, dispatch, route)

    def _returned(self, ref: Returned, route: bool = True) -> set[Ref]:
        if ref.function.endswith(CALL):
            return self._call_returns(ref, route)
        if (owner := groups_owner(ref.function)) is not None:
            return self._groups(owner)
        spellings = self.spellings(ref.function)
        if not any(f in self.exports for f in spellings):
            if "#" in ref.function or ref.function.endswith("]"):
                return {UNKNOWN}  # a field no class of the run assigns, an element of no tuple
            return set()  # a class of the run: a new instance of it
        return {r for f in spellings for r in self.exports.get(f, ())}

    def _groups(self, owner: str) -> set[Ref]:
        """What ``self.param_groups`` may hold in a method of the class ``owner``
        (``refs.GROUPS``): the parameters the instances of it and of its subclasses hand a
        torch optimizer's ``__init__`` (``FileLinks._optimizer_params``). Anything outside a
        whole program, where a file of the run may give an optimizer more parameters later
        (``add_param_group``), or where one of those classes hands none itself but derives
        from a class no file of the run defines (whose ``__init__`` may take them)."""
        modules = self.modules
        if not modules.whole_program or modules.adds_param_groups:
            return {UNKNOWN}
        out: set[Ref] = set()
        for cls in {owner, *modules.subclasses(owner)}:
            exported = [f for f in self.spellings(groups_of(cls)) if f in self.exports]
            if exported:
                out |= {r for f in exported for r in self.exports[f]}
            elif self._library_based(cls):
                out.add(UNKNOWN)
        return out

    def _library_based(self, cls: str) -> bool:
        """Whether the run's class ``cls`` derives from a class no file of the run defines,
        however many of the run's classes up (a base not known counts as one)."""
        classes = self.modules.classes
        todo, seen = [cls], set()
        while todo:
            current = todo.pop()
            if current in seen:
                continue
            seen.add(current)
            for base in classes.get(current, ()):
                if base not in classes:
                    return True
                todo.append(base)
        return False

    def _passed(
        self, ref: Passed, within: frozenset[str] | None, dispatch: bool, route: bool
    ) -> set[Ref]:
        """What the run passes to ``ref``'s parameter (in the programs ``within``), and
        ``UNKNOWN`` when code the run does not show may call the function (its value
        escapes, or no call of the run's shows)."""
        positional = self.signatures.get(ref.function, ())
        callees = [ref.function]
        if ref.function.endswith(".__init__"):
            callees.append(ref.function.removesuffix(".__init__"))  # Trainer(model)
        targets: set[Ref] = set()
        for callee in callees:
            passings = list(self._passed_to(callee, dispatch))
            if route:
                passings += self._routed().get(callee, ())
            for passing in passings:
                if within is None or self._runs_within(passing, within):
                    targets |= self._given(passing, positional, ref.parameter)
        spelled = [c for callee in callees for c in self.spellings(callee)]
        if not self.modules.whole_program or not any(
            c in self.called
            or (dispatch and self._dispatched_to(c))
            or (route and c in self._routed())
            for c in spelled
        ):
            targets.add(UNKNOWN)  # called from code the run does not show
        elif route and not self._escaped().isdisjoint(spelled):
            targets.add(UNKNOWN)  # handed as a value to code the run does not follow
        return targets

    @staticmethod
    def _given(passing: Passing, positional: Sequence[str], parameter: str) -> frozenset[Ref]:
        """What ``passing`` gives ``parameter`` (``positional``: the callee's positional
        parameters, as called)."""
        slot = passing.slot
        if isinstance(slot, int):
            slot = positional[slot] if slot < len(positional) else ""
        return passing.refs if slot == parameter else frozenset()

    def _routed(self) -> dict[str, list[Passing]]:
        """The calls of values, as passings to each function of the run the called value may
        be (under each of its spellings), their positions shifted past a ``partial``'s."""
        if self._routes is None:
            self._routes = {}
            for passing in self.value_calls:
                for function in self._closure(passing.receiver, _FUNCTIONS):
                    if not isinstance(function, Function):
                        continue
                    slot = passing.slot
                    if isinstance(slot, int):
                        slot += function.preset
                    routed = Passing(function.name, slot, passing.refs)
                    self._home[id(routed)] = self._home[id(passing)]
                    for name in self.spellings(function.name):
                        self._routes.setdefault(name, []).append(routed)
        return self._routes

    def _escaped(self) -> frozenset[str]:
        """The functions (not classes: a type test takes them as often as a library builds
        one) of the run whose value may reach code the analysis does not follow:
        handed to a library, to a method of an object of no known class, to a called value,
        to a class or function no file of the run shows, by a file's ``escaping``, or handed
        back by a function called as a value."""
        if self._escapes is None:
            handed = [*self._escaping, *(Returned(name) for name in self._routed())]
            for passings in (*self.passed.values(), *self.dispatched.values(), self.value_calls):
                for passing in passings:
                    if not self._followed(passing.callee):
                        handed += [r for r in passing.refs if isinstance(r, MAY_BE_FUNCTION)]
            self._escapes = frozenset(
                name
                for r in self._closure(handed, _FUNCTIONS)
                if isinstance(r, Function)
                for name in self.spellings(r.name)
                if name in self.signatures  # a class handed on is not called by what gets it
            )
        return self._escapes

    def _followed(self, callee: str) -> bool:
        """Whether what a passing to ``callee`` gives is followed into a function of the run."""
        return any(
            s in self.signatures or f"{s}.__init__" in self.signatures
            for s in self.spellings(callee)
        )

    def _call_returns(self, ref: Returned, route: bool) -> set[Ref]:
        """What a call of a value returns: what the functions of the run the value may be
        return, anything when it may be something else (unknown where ``route`` is off: a
        function value a called value hands back escapes, ``_escaped``)."""
        called = self._closure(self.exports.get(ref.function, ()), _FUNCTIONS) if route else ()
        if not route or UNKNOWN in called:
            return {UNKNOWN}
        return {Returned(r.name) for r in called if isinstance(r, Function)}

    def _may_be_instance(self, passing: Passing, owner: str) -> bool:
        """Whether the object a dispatched call is made on may be an instance of the run's
        class ``owner`` (or of a class no file shows)."""
        found = self._receivers.get(id(passing))
        if found is None:
            found = frozenset(self._closure(passing.receiver, _PLAIN_ORIGINS))
            self._receivers[id(passing)] = found
        return UNKNOWN in found or any(
            isinstance(r, Returned) and owner in (*self.spellings(r.function), r.function)
            for r in found
        )

    def _runs_within(self, passing: Passing, within: frozenset[str]) -> bool:
        """Whether the file that passes may run in one of the programs ``within``."""
        return self._home_within(self._home.get(id(passing)), within)

    def _home_within(self, home: str | None, within: frozenset[str] | None) -> bool:
        """Whether a line of ``home`` may run in one of the programs ``within`` (None: any)."""
        map_ = self.programs.map if self.programs is not None else None
        if within is None or map_ is None or home is None:
            return True
        if home in map_.open or home not in map_.member_of:
            return True
        return not map_.member_of[home].isdisjoint(within)

    def _dispatched_to(self, callee: str) -> bool:
        """Whether a method call on an object of no known class may call ``callee``."""
        owner, _, method = callee.rpartition(".")
        return any(self._may_be_instance(p, owner) for p in self.dispatched.get(method, ()))

    def _passed_to(self, callee: str, dispatch: bool = True) -> Iterator[Passing]:
        """What the run's files pass to ``callee``, under any of the names that may stand
        for it (a call by an ambiguous module name), and through method calls on objects that
        may be instances of its class (``Passing.receiver``)."""
        yield from self.passed.get(callee, ())
        owner, _, method = callee.rpartition(".")
        for passing in self.dispatched.get(method, ()) if dispatch else ():
            if self._may_be_instance(passing, owner):
                yield passing
        for spelled, passings in self._ambiguous_calls().items():
            if callee in self.spellings(spelled) and spelled != callee:
                yield from passings

    def _ambiguous_calls(self) -> dict[str, list[Passing]]:
        if self._ambiguous is None:
            self._ambiguous = {
                callee: passings
                for callee, passings in self.passed.items()
                if self.spellings(callee) != (callee,)
            }
        return self._ambiguous


class _Components:
    """Tarjan's algorithm, iteratively, over links (``expand``: a link's direct answers and
    the links it leads to): every member of a strongly connected component gets the union of
    the component's direct answers and of the answers of the components it leads to, into
    ``settled``."""

    def __init__(
        self,
        expand: Callable[[Deferred], tuple[set[Ref], list[Deferred]]],
        settled: dict[Deferred, frozenset[Ref]],
    ) -> None:
        self.expand = expand
        self.settled = settled
        self.index: dict[Deferred, int] = {}
        self.low: dict[Deferred, int] = {}
        self.stack: list[Deferred] = []
        self.on_stack: set[Deferred] = set()
        self.direct: dict[Deferred, set[Ref]] = {}
        self.links: dict[Deferred, list[Deferred]] = {}

    def settle(self, start: Deferred) -> None:
        work: list[tuple[Deferred, int]] = [(start, 0)]
        while work:
            node, position = work.pop()
            if position == 0:
                self._open(node)
            successors = self.links[node]
            if position < len(successors):
                work.append((node, position + 1))
                if self._visit(node, successors[position]):
                    work.append((successors[position], 0))
                continue
            self._close(node)
            if work:
                parent = work[-1][0]
                self.low[parent] = min(self.low[parent], self.low[node])

    def _open(self, node: Deferred) -> None:
        self.index[node] = self.low[node] = len(self.index)
        self.stack.append(node)
        self.on_stack.add(node)
        self.direct[node], self.links[node] = self.expand(node)

    def _visit(self, node: Deferred, successor: Deferred) -> bool:
        """Whether ``successor`` is new (to be opened next)."""
        if successor in self.settled:
            self.direct[node] |= self.settled[successor]
            return False
        if successor not in self.index:
            return True
        if successor in self.on_stack:
            self.low[node] = min(self.low[node], self.index[successor])
        return False

    def _close(self, node: Deferred) -> None:
        for successor in self.links[node]:
            if successor in self.on_stack and successor is not node:
                self.low[node] = min(self.low[node], self.low[successor])
            elif successor in self.settled:
                self.direct[node] |= self.settled[successor]
        if self.low[node] != self.index[node]:
            return
        component = []
        while True:
            member = self.stack.pop()
            self.on_stack.discard(member)
            component.append(member)
            if member == node:
                break
        answer = frozenset().union(*(self.direct[m] for m in component))
        for member in component:
            self.settled[member] = answer
