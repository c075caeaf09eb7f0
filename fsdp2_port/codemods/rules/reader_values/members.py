"""F2P013's enum members, configs and their reads: a member by its name, a config as the dict
of its fields, a member test by name, a config's field read from its dict."""

from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Iterator

from fsdp2_port.codemods import fsdp1, imports
from fsdp2_port.codemods.names import Names
from fsdp2_port.codemods.rules.reader_values.slots import _CONFIGS, _ENUMS, POLICY
from fsdp2_port.codemods.rules.reader_values.tree import _branches, _top_import, _within
from fsdp2_port.codemods.rules.reader_values.written import Written
from fsdp2_port.codemods.text import LineIndex

#: Why a member test and its members are written by name.
_BY_NAME = "tested by name"
#: Where an f-string piece opens: its quote.
_FSTRING_OPENING = re.compile(r"""(?:[fF][rR]?|[rR][fF])("|')""")


def _compared(
    names: Names, lines: LineIndex, chosen: list[Written]
) -> tuple[dict[ast.expr, Written], set[ast.expr]]:
    """Member tests written by name: each node -> how (the members by name, the value they
    test as ``fsdp2_port.member_name(x)``); and the members of tests whose value holds a
    written value inside it (two edits in one place: those members stay)."""
    written = {w.node: w for w in chosen}
    out: dict[ast.expr, Written] = {}
    tangled: set[ast.expr] = set()
    anchor = _top_import(names.tree)
    for compare in names.by_type[ast.Compare]:
        assert isinstance(compare, ast.Compare)
        test = _member_test(names, compare)
        if test is None:
            continue
        kind, operand = test
        members = [n for n in ast.walk(compare) if n in written and not _within(n, operand)]
        if not members or operand in written:
            continue  # kept; or a value written by name itself (``s == "X"``)
        if any(_within(n, operand) for n in written) or anchor is None:
            tangled.update(members)
            continue
        for member in members:
            out[member] = dataclasses.replace(written[member], why=_BY_NAME)
        needed = (imports.after(lines, anchor, "fsdp2_port", None),)
        text = f"fsdp2_port.member_name({lines.source(operand)})"
        out[operand] = Written(operand, kind, text, needed, why=_BY_NAME)
    return out, tangled


def _members(names: Names, lines: LineIndex) -> Iterator[Written]:
    """``ShardingStrategy.X`` (and the other enums the readers take by name; any spelling
    FSDP1's names resolve to), and ``getattr`` / subscript of such an enum by a name."""
    for node in names.by_type[ast.Attribute]:
        assert isinstance(node, ast.Attribute)
        if (kind := _member_kind(names, node)) is not None:
            yield Written(node, kind, f'"{node.attr}"')
    for node in names.by_type[ast.Call]:
        assert isinstance(node, ast.Call)
        if (
            names.qualified(node.func) == {"builtins.getattr"}
            and len(node.args) == 2
            and not node.keywords
            and (kind := _enum(names, node.args[0])) is not None
        ):
            yield Written(node, kind, lines.source(node.args[1]))
    for node in names.by_type[ast.Subscript]:
        assert isinstance(node, ast.Subscript)
        if isinstance(node.ctx, ast.Load) and (kind := _enum(names, node.value)) is not None:
            yield Written(node, kind, lines.source(node.slice))


def _field_read(names: Names, lines: LineIndex, read: ast.Attribute, kind: str) -> bool:
    """``v.<field>`` (a load) of a name every binding of which is built here as a config of
    ``kind`` that writes the field out, or is a member of an enum of ``kind`` (the field
    ``name``): as a dict (F2P013) the field is ``v["<field>"]``, as a name the name is ``v``,
    the same value."""
    name = read.value
    if not (
        isinstance(name, ast.Name)
        and isinstance(read.ctx, ast.Load)
        and lines.source(read) == f"{name.id}.{read.attr}"  # its place in an f-string
    ):
        return False
    bindings = names.bindings_of(name)
    return bool(bindings) and all(
        b.value is not None
        and all(_writes_field(names, v, kind, read.attr) for v in _branches(b.value))
        for b in bindings
    )


def _writes_field(names: Names, value: ast.expr, kind: str, field: str) -> bool:
    """``value`` is a config of ``kind`` built with ``field`` written out, or a member of an
    enum of ``kind`` and ``field`` is its ``name``."""
    if field == "name" and _member_kind(names, value) == kind:
        return True
    if not isinstance(value, ast.Call):
        return False
    config = _CONFIGS.get(fsdp1.first(names.qualified(value.func)) or "")
    if config is None or config[0] != kind:
        return False
    given = {k.arg for k in value.keywords} | set(config[1][: len(value.args)])
    return field in given


def _field_reads(
    names: Names, lines: LineIndex, chosen: list[Written]
) -> tuple[list[Written], set[ast.expr]]:
    """Each field read (``_field_read``) of configs written as dicts, as ``v["<field>"]``, and of
    members written as names, as ``v``; and the values behind a read that only some of them
    reach written (those stay too)."""
    written = {w.node for w in chosen}
    kinds = {w.kind for w in chosen if w.kind != POLICY}
    out: list[Written] = []
    mixed: set[ast.expr] = set()
    for read in names.by_type[ast.Attribute]:
        assert isinstance(read, ast.Attribute)
        kind = next((k for k in sorted(kinds) if _field_read(names, lines, read, k)), None)
        if kind is None:
            continue
        assert isinstance(read.value, ast.Name)
        built = [v for b in names.bindings_of(read.value) for v in _branches(b.value)]  # type: ignore[arg-type]
        if all(v in written for v in built):
            if kind in _ENUMS.values():
                out.append(Written(read, kind, read.value.id, why="name (written as one now)"))
                continue
            quote = "'" if _in_double_quoted_fstring(names, lines, read) else '"'
            text = f"{read.value.id}[{quote}{read.attr}{quote}]"
            out.append(Written(read, kind, text, why="field (its config is a dict now)"))
        else:
            mixed.update(v for v in built if v in written)
    return out, mixed


def _in_double_quoted_fstring(names: Names, lines: LineIndex, node: ast.AST) -> bool:
    """``node`` sits in an f-string piece quoted with ``"`` (before Python 3.12 its expression
    may not use that quote)."""
    if not any(isinstance(a, ast.JoinedStr) for a in names.ancestors(node)):
        return False
    opened = _FSTRING_OPENING.findall(lines.text[: lines.start(node)])
    return bool(opened) and opened[-1].startswith('"')


def _member_test(names: Names, compare: ast.Compare) -> tuple[str, ast.expr] | None:
    """The kind of member ``compare`` tests a value against and that value (``x ==
    ShardingStrategy.X``, ``!=``, the member on either side; ``x in (A, B)``, ``not in``), or
    None. Such a test is written by name, ``fsdp2_port.member_name(x) == "X"``, which holds
    for a member and for its name alike (``_compared``)."""
    if len(compare.ops) != 1:
        return None
    left, right, op = compare.left, compare.comparators[0], compare.ops[0]
    if isinstance(op, (ast.In, ast.NotIn)):
        if not isinstance(right, (ast.Tuple, ast.List, ast.Set)) or not right.elts:
            return None
        kinds = {_member_kind(names, e) for e in right.elts}
        operand = left
    elif isinstance(op, (ast.Eq, ast.NotEq)):
        kinds = {_member_kind(names, left), _member_kind(names, right)} - {None}
        operand = right if _member_kind(names, left) else left
    else:
        return None  # ``is``: by name it would need ``==``
    if len(kinds) != 1 or None in kinds or _member_kind(names, operand) is not None:
        return None
    return kinds.pop(), operand  # type: ignore[return-value]


def _tested_kind(names: Names, compare: ast.AST | None) -> str | None:
    """The kind of member a member test (``_member_test``) compares with, or None."""
    test = _member_test(names, compare) if isinstance(compare, ast.Compare) else None
    return test[0] if test else None


def _member_kind(names: Names, node: ast.expr) -> str | None:
    """The kind of an FSDP1 enum member ``node`` is (``ShardingStrategy.X``), or None."""
    return _ENUMS.get(fsdp1.enum_of_member(fsdp1.first(names.qualified(node))) or "")


def _enum(names: Names, node: ast.expr) -> str | None:
    """The kind of value an FSDP1 enum ``node`` names holds, or None."""
    return _ENUMS.get(fsdp1.first(names.qualified(node)) or "")


def _configs(names: Names, lines: LineIndex) -> Iterator[Written]:
    """An FSDP1 config dataclass built here (``MixedPrecision(...)``) as the dict of its
    fields: the call's own text where it passes them by keyword."""
    for node in names.by_type[ast.Call]:
        assert isinstance(node, ast.Call)
        config = _CONFIGS.get(fsdp1.first(names.qualified(node.func)) or "")
        if config is None or any(k.arg is None for k in node.keywords):
            continue
        kind, fields = config
        if any(isinstance(a, ast.Starred) for a in node.args) or len(node.args) > len(fields):
            continue
        if node.args:
            given = [f"{f}={lines.source(a)}" for f, a in zip(fields, node.args)]
            given += [f"{k.arg}={lines.source(k.value)}" for k in node.keywords]
            yield Written(node, kind, f"dict({', '.join(given)})")
        else:
            yield Written(node, kind, "dict" + lines.source(node)[len(lines.source(node.func)) :])
