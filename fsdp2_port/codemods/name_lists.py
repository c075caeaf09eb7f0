"""The shape of the registry's entries (``assumptions``): named lists of names, tables of
names with what each comes with, and guesses on how a name is spelled. A leaf: it imports
nothing of ``codemods``."""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, KeysView
from dataclasses import dataclass, field
from typing import Generic, TypeVar, overload

V = TypeVar("V")


def words(text: str) -> tuple[str, ...]:
    """The names written in ``text``, separated by white space, in order."""
    return tuple(text.split())


@dataclass(frozen=True)
class NameList:
    """A list of names (``names``, in the order given; ``members``, as a set)."""

    name: str
    kind: str
    why: str
    names: tuple[str, ...]
    members: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "members", frozenset(self.names))

    def __contains__(self, name: object) -> bool:
        return name in self.members

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)


@dataclass(frozen=True)
class NameTable(Generic[V]):
    """Names, each with what it comes with (``table``)."""

    name: str
    kind: str
    why: str
    table: dict[str, V]

    def __contains__(self, name: object) -> bool:
        return name in self.table

    def __getitem__(self, name: str) -> V:
        return self.table[name]

    @overload
    def get(self, name: str) -> V | None: ...
    @overload
    def get(self, name: str, default: V) -> V: ...
    def get(self, name: str, default: V | None = None) -> V | None:
        return self.table.get(name, default)

    def keys(self) -> KeysView[str]:
        return self.table.keys()

    def items(self) -> ItemsView[str, V]:
        return self.table.items()


@dataclass(frozen=True)
class NameGuess:
    """A guess on how a name is spelled (``syntax.camel``: a class's), with no list of names:
    each use says whether a name fits (``Assumed.takes``'s ``member``)."""

    name: str
    kind: str
    why: str
