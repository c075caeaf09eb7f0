"""What a value may hold, as the analysis follows it: typed refs, plain picklable data.

``Built`` and ``Optimizer`` are settled in the file that makes them; ``Returned`` and
``Passed`` are links into other files of the run, settled when the run is decided
(``plan.Resolver``). A ``Factory`` (``partial(FSDP, ...)``) builds a model when called.
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


Ref = Built | Factory | Optimizer | Returned | Passed
Deferred = Returned | Passed


def built(refs: Iterable[Ref]) -> frozenset[str]:
    """The constructor ids among ``refs``."""
    return frozenset(r.id for r in refs if isinstance(r, Built))


def deferred(refs: Iterable[Ref]) -> frozenset[Deferred]:
    """The links into other files among ``refs``."""
    return frozenset(r for r in refs if isinstance(r, (Returned, Passed)))
