"""What other files of the run take without FSDP1: their functions' parameters and their
reads of each attribute name (``values.accepting`` finds them in one file)."""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Mapping

from fsdp2_port.codemods.names import Names


@dataclasses.dataclass(frozen=True)
class Accepting:
    """What a function of one file takes without FSDP1, for the calls other files make:
    ``positional``, its parameters in order (``self`` left out); ``takes``, per parameter, the
    kinds of value its every path ends in a reader's slot for (``(kind, None)``), or, for a
    dict, the key whose value does (``(kind, key)``: verl's ``fsdp_kwargs``)."""

    positional: tuple[str, ...]
    takes: Mapping[str, frozenset[tuple[str, str | None]]]


@dataclasses.dataclass(frozen=True)
class Across:
    """What the other files of a run take without FSDP1, once each file's rewrites are made
    (``accepting``): ``functions``, by qualified name; ``attributes``, per attribute name, per
    module that reads ``.name`` (``attributes.attribute_loads``), what its every read takes
    to readers (``(kind, None)`` / ``(kind, key)`` as ``Accepting.takes``); ``readers``: some
    file calls a reader (or an FSDP2 slot that takes either spelling). Without one, a member
    test is the only read that takes either spelling, and no value is written for it."""

    functions: Mapping[str, Accepting] = dataclasses.field(default_factory=dict)
    attributes: Mapping[str, Mapping[str, frozenset[tuple[str, str | None]]]] = dataclasses.field(
        default_factory=dict
    )
    readers: bool = False

    def __or__(self, other: Across) -> Across:
        attributes = {k: dict(v) for k, v in self.attributes.items()}
        for attr, modules in other.attributes.items():
            attributes.setdefault(attr, {}).update(modules)
        functions = {**self.functions, **other.functions}
        return Across(functions, attributes, self.readers or other.readers)


def _accepting(names: Names, call: ast.Call, accepts: Across) -> Accepting | None:
    """What the function of another file that ``call`` calls takes without FSDP1, if known: by
    its qualified name, or the one function whose name ends it (a module outside any package,
    no ``__init__.py`` around it, is named by its file alone: ``fsdp_utils.apply_fsdp2`` for
    ``verl.utils.fsdp_utils.apply_fsdp2`` in a namespace package)."""
    functions = accepts.functions
    if not functions:
        return None
    for qualified in names.qualified(call.func):
        if qualified in functions:
            return functions[qualified]
        ends = [k for k in functions if qualified.endswith(f".{k}")]
        if len(ends) == 1:
            return functions[ends[0]]
    return None
