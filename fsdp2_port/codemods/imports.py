"""Imports, as the write stage places and removes them.

A new import goes on a line of its own right after the statement that imported the FSDP1
name it replaces, at that statement's indentation (a lazy import stays lazy; set-up code above
the imports stays above them); several names for one place share one line, and at module
level all of a module's names share the first of their places. An import no FSDP1 import
stands for goes among the file's leading imports in isort's order (``place``). A name the
scope already imports from the same module is not imported again. Which imports go: F2P001
(``fsdp2_port.codemods.rules.imports``).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace

from fsdp2_port.codemods import calls
from fsdp2_port.codemods.names import Names
from fsdp2_port.codemods.plan import NeededImport
from fsdp2_port.codemods.text import Edit, LineIndex

#: Longer new ``from`` imports are written one name per line, in parentheses.
LINE_LENGTH = 100


def after(
    lines: LineIndex, statement: ast.stmt, module: str, name: str | None, asname: str | None = None
) -> NeededImport:
    """An import on the line after ``statement``, at its indentation: bound exactly where (and
    whenever) the name it replaces was bound."""
    end = lines.line_end(lines.end(statement) - 1)
    return NeededImport(module, name, end, lines.indent_at(lines.start(statement)), asname)


def place(
    lines: LineIndex,
    leading: Sequence[ast.Import | ast.ImportFrom],
    own: frozenset[str],
    module: str,
    name: str | None,
) -> NeededImport:
    """A module-level import of a library (``module`` not among ``own``, the first parts of
    the run's modules) among ``leading``, the file's top-level imports, as isort orders them:
    after the last library import that the run's own imports follow (first-party stays
    last), at its sorted place (``import`` lines, then ``from`` lines, by module) when that
    block is sorted; after the last import otherwise."""
    last = leading[-1]
    if module.partition(".")[0] not in own:
        libraries = [i for i, s in enumerate(leading) if not _first_party(s, own)]
        if libraries and libraries[-1] < len(leading) - 1:
            end = libraries[-1]
            start = end
            while (
                start > 0
                and not _first_party(leading[start - 1], own)
                and (
                    leading[start].lineno - leading[start - 1].end_lineno == 1  # type: ignore[operator]
                )
            ):
                start -= 1
            block = leading[start : end + 1]
            keys = [_sort_key(s) for s in block]
            key = (name is not None, module.lower())
            if keys == sorted(keys) and key < keys[-1]:
                before = next(s for s, k in zip(block, keys) if key < k)
                anchor = lines.line_start(lines.start(before))
                return NeededImport(module, name, anchor, "")
            last = leading[end]
    return NeededImport(module, name, lines.line_end(lines.end(last) - 1), "")


def _first_party(statement: ast.Import | ast.ImportFrom, own: frozenset[str]) -> bool:
    if isinstance(statement, ast.ImportFrom):
        return bool(statement.level) or (statement.module or "").partition(".")[0] in own
    return any(alias.name.partition(".")[0] in own for alias in statement.names)


def _sort_key(statement: ast.Import | ast.ImportFrom) -> tuple[bool, str]:
    """isort's order within a section: ``import x`` lines first, then ``from x import``."""
    if isinstance(statement, ast.ImportFrom):
        return True, (statement.module or "").lower()
    return False, statement.names[0].name.lower()


def importing_scopes(names: Names, lines: LineIndex) -> dict[str, tuple[tuple[int, int], ...]]:
    """Each name a scope imports -> the spans of the scopes that import it (the module's is
    the whole text): what ``additions`` must not import again."""
    out: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for scope in names.scopes.values():
        node = scope.node
        span = lines.span(node) if hasattr(node, "lineno") else (0, len(lines.text))
        for name, bindings in scope.bindings.items():
            if any(b.kind == "import" for b in bindings):
                out[name].append(span)
    return {name: tuple(spans) for name, spans in out.items()}


def additions(
    needed: Sequence[NeededImport],
    importing: Mapping[str, Sequence[tuple[int, int]]],
    lines: LineIndex,
) -> list[Edit]:
    """Insertions for the imports the applied rewrites need (deduplicated, grouped), given
    the spans of the scopes that already import each name (``importing_scopes``)."""
    newline = lines.newline()
    grouped: dict[tuple[int, str, str], list[tuple[str, str | None]]] = defaultdict(list)
    plain: dict[tuple[int, str], list[str]] = defaultdict(list)
    # at module level, one line per module, at the first place one of its names is needed
    first: dict[str, int] = {}
    for item in needed:
        if not item.indent and item.name is not None:
            first[item.module] = min(item.anchor, first.get(item.module, item.anchor))
    for item in dict.fromkeys(needed):
        if _already_bound(item, importing):
            continue
        if not item.indent and item.name is not None:
            item = replace(item, anchor=first[item.module])
        if item.name is None:
            if item.module not in plain[(item.anchor, item.indent)]:
                plain[(item.anchor, item.indent)].append(item.module)
        else:
            entry = (item.name, item.asname)
            if entry not in grouped[(item.anchor, item.indent, item.module)]:
                grouped[(item.anchor, item.indent, item.module)].append(entry)
    texts: dict[int, list[str]] = defaultdict(list)
    for (anchor, indent), modules in sorted(plain.items()):
        texts[anchor] += [f"{indent}import {m}{newline}" for m in sorted(modules)]
    for (anchor, indent, module), entries in sorted(grouped.items()):
        spelled = [
            n if a is None else f"{n} as {a}"
            for n, a in sorted(entries, key=lambda e: (e[0], e[1] or ""))
        ]
        line = f"{indent}from {module} import {', '.join(spelled)}"
        if len(line) > LINE_LENGTH:
            inner = indent + "    "
            listed = "".join(f"{inner}{n},{newline}" for n in spelled)
            line = f"{indent}from {module} import ({newline}{listed}{indent})"
        texts[anchor].append(line + newline)
    edits = []
    for anchor, parts in sorted(texts.items()):
        lead = (
            newline
            if anchor == len(lines.text) and lines.text and not lines.text.endswith(("\n", "\r"))
            else ""
        )
        edits.append(Edit(anchor, anchor, lead + "".join(parts)))
    return edits


def _already_bound(item: NeededImport, importing: Mapping[str, Sequence[tuple[int, int]]]) -> bool:
    """Whether the module, or a scope around the anchor, already imports the name.

    Bound to the same thing (an earlier run, a file half done by hand) or to the same class
    under another path (an FSDP2 name imported from a private module): nothing to add.
    """
    bound = item.asname or item.name or item.module.split(".", 1)[0]
    return any(start <= item.anchor <= end for start, end in importing.get(bound, ()))


def removals(
    lines: LineIndex, names: Names, unused: Sequence[tuple[ast.stmt, ast.alias]]
) -> list[Edit]:
    """Edits that remove the given aliases (whole statements when nothing is left)."""
    by_statement: dict[ast.stmt, list[ast.alias]] = defaultdict(list)
    for statement, alias in unused:
        by_statement[statement].append(alias)
    edits: list[Edit] = []
    for statement, aliases in by_statement.items():
        assert isinstance(statement, (ast.Import, ast.ImportFrom))
        if len(aliases) == len(statement.names):
            edits.append(remove_statement(lines, names, statement))
        else:
            edits += remove_aliases(lines, statement, set(aliases))
    return edits


def remove_statement(lines: LineIndex, names: Names, statement: ast.stmt) -> Edit:
    """Delete a statement: its lines when it has them to itself (and a blank line after the
    first statement of a block, or the blank line before a module-level statement that blank
    lines set apart), ``pass`` when alone in a block."""
    text = lines.text
    start, end = lines.span(statement)
    block = names.parent.get(statement)
    siblings: list[ast.stmt] = next(
        (
            getattr(block, f)
            for f in ("body", "orelse", "finalbody", "handlers")
            if statement in getattr(block, f, [])
        ),
        [],
    )
    if len(siblings) == 1 and not isinstance(block, ast.Module):
        return Edit(start, end, "pass")
    line_start, line_end = lines.line_start(start), lines.line_end(max(end - 1, start))
    before = text[line_start:start]
    after = text[end:line_end]
    if not before.strip() and (not after.strip() or after.strip().startswith("#")):
        if siblings and statement is siblings[0] and not isinstance(block, ast.Module):
            # ``def f():`` then a blank line (the one that set the import apart): it goes too
            blank = text[line_end : lines.line_end(line_end)]
            if line_end < len(text) and not blank.strip():
                line_end += len(blank)
        elif isinstance(block, ast.Module) and line_start > 0:
            # a block of its own between blank lines (a section of imports): one blank goes too
            previous = lines.line_start(line_start - 1)
            following = text[line_end : lines.line_end(line_end)]
            if (
                not text[previous:line_start].strip()
                and line_end < len(text)
                and not (following.strip())
            ):
                line_start = previous
        return Edit(line_start, line_end, "")
    if after.lstrip(" \t").startswith(";"):
        position = end + len(after) - len(after.lstrip(" \t")) + 1
        while text[position] in " \t":
            position += 1
        return Edit(start, position, "")
    semicolon = before.rstrip()
    if semicolon.endswith(";"):
        return Edit(line_start + len(semicolon) - 1, end, "")
    return Edit(start, end, "pass")


def remove_aliases(
    lines: LineIndex, statement: ast.Import | ast.ImportFrom, drop: set[ast.alias]
) -> list[Edit]:
    """Remove some names of an import statement, each with its comma (and its own line,
    comment included, when it has one)."""
    return calls.remove_items(lines, list(statement.names), set(drop), lines.end(statement))
