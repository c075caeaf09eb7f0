"""What a value may hold, as the analysis follows it: typed refs, plain picklable data.

``Built`` and ``Optimizer`` are settled in the file that makes them; ``Returned`` and
``Passed`` are links into other files of the run, settled when the run is decided
(``semantic.resolve.Resolver``). A ``Factory`` (``partial(FSDP, ...)``) builds a model when called;
a ``Function`` is a function of the run handed on as a value, followed to where it is called.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Built:
    """A model an FSDP1 constructor builds; ``id`` is the constructor's ``path:line:column``."""

    id: str


@dataclass(frozen=True)
class Factory:
    """``functools.partial(FSDP, ...)``: each call builds a model of constructor ``id``."""

    id: str


@dataclass(frozen=True)
class Function:
    """The run's function (or class) ``name`` as a value: ``f``, or ``functools.partial(f,
    <preset positional arguments>, ...)``. Calling it passes its arguments to ``name`` from
    position ``preset`` on (``CALLED``). It is no model itself."""

    name: str
    preset: int = 0


@dataclass(frozen=True)
class Optimizer:
    """A BF16 master optimizer built at ``id`` (``path:line:column``)."""

    id: str


@dataclass(frozen=True)
class Returned:
    """What the run's function ``function`` (a qualified name) returns."""

    function: str


@dataclass(frozen=True)
class Passed:
    """What the run's files pass to parameter ``parameter`` of ``function``."""

    function: str
    parameter: str


#: What ``copy.deepcopy(x)`` (or ``copy.copy(x)``) at ``id`` makes is ``Returned(id + COPY)``:
#: it holds ``x``'s models (a copy of an FSDP1 model is one), but it is a new object, made
#: there (``Resolver.origins``): never one a constructor wraps in place elsewhere.
COPY = "~copy"
#: What a call of a value (``shard_fn(model)``, ``Ties.value_called``) at ``id`` returns is
#: ``Returned(id + CALL)``: what the functions the value may be return (``Resolver``).
CALL = "~call"
#: How a method call on an object of no known class is named among a file's ``passes``:
#: ``DISPATCHED + <the method's name>``.
DISPATCHED = "."
#: How a call of a value (``shard_fn(model)``, ``shard_fn`` a parameter) is named among a file's
#: ``passes``; its ``receiver`` is what the called value may hold (``Function`` refs).
CALLED = "()"
#: A torch optimizer's attribute that holds the parameters it was given. What
#: ``self.param_groups`` holds in a method of the run's class ``C`` (when no line of its file
#: assigns it) is ``Returned(groups_of(C))``: the parameters the instances of ``C`` and of its
#: subclasses hand to a torch optimizer's ``__init__`` (``Resolver``).
GROUPS = "param_groups"
#: How a call of a library object's method is named among a file's ``passes``:
#: ``GIVEN_TO + <the object's Instance id>``.
GIVEN_TO = "@"


@dataclass(frozen=True)
class Instance:
    """An object a library class made (``Accelerator(...)`` at ``id``, ``path:line:column``):
    never one of the run's models itself."""

    id: str


@dataclass(frozen=True)
class Given:
    """What the library object made at ``instance`` hands back (its methods' results, the
    arguments it calls the run's callbacks with): one of the run's models only if the run
    gave that model to the object."""

    instance: str


@dataclass(frozen=True)
class Unknown:
    """A value from code the analysis does not follow (a call on an object it cannot tie, an
    element of a container, a parameter no call of the run passes): it may be any model. A
    value whose refs are none of these, nor a model or a link, is no model of the run."""


UNKNOWN = Unknown()

Ref = Built | Factory | Function | Optimizer | Returned | Passed | Given | Instance | Unknown
Deferred = Returned | Passed | Given | Instance
#: What may be, or lead to, a function value (the run settles the links).
MAY_BE_FUNCTION = (Function, Passed, Returned)


def groups_of(cls: str) -> str:
    """The name of the field ``param_groups`` of the run's class ``cls`` (``GROUPS``)."""
    return f"{cls}#{GROUPS}"


def groups_owner(name: str) -> str | None:
    """The class whose ``param_groups`` field ``name`` is (``groups_of``), else None."""
    suffix = groups_of("")
    return name.removesuffix(suffix) if name.endswith(suffix) else None


def built(refs: Iterable[Ref]) -> frozenset[str]:
    """The constructor ids among ``refs``."""
    return frozenset(r.id for r in refs if isinstance(r, Built))


def deferred(refs: Iterable[Ref]) -> frozenset[Deferred]:
    """The links into other files among ``refs``, and the library objects (no model: what a
    site learns of them is that its receiver may hold something else than the run's)."""
    return frozenset(r for r in refs if isinstance(r, (Returned, Passed, Given, Instance)))


@dataclass(frozen=True)
class Passing:
    """A model (``refs``) this file passes to ``callee`` at a position or keyword (``slot``).
    A call of a method on an object of no known class (``self.plugin.configure(model)``) has
    ``callee`` ``".configure"`` and what the object may be (``receiver``): the run settles
    which classes' method it calls (``Resolver``)."""

    callee: str
    slot: int | str
    refs: frozenset[Ref]
    receiver: frozenset[Ref] = frozenset()
