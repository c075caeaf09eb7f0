"""Migrating many files: one result per file, in the order given, in parallel with ``jobs > 1``.

A file that cannot be read, decoded or parsed yields an ``error`` and is left untouched; the
others go on. A rewrite is checked to parse before it is shown or written. Files without any
FSDP1 marker text are not decoded or parsed at all.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import partial

from codemods import fsdp1
from codemods.findings import Finding
from codemods.options import Options


@dataclass
class FileResult:
    path: str
    findings: list[Finding] = field(default_factory=list)
    diff: str = ""
    changed: bool = False
    parsed: bool = False
    error: str | None = None


def migrate_file(path: str, codes: Sequence[str], options: Options, write: bool) -> FileResult:
    """Migrate one file (``codes``: the selected rules, in run order)."""
    import libcst as cst

    from codemods import engine, registry, sources

    result = FileResult(path)
    try:
        data = sources.read_bytes(path)
        if not fsdp1.might_need_migration(data):
            return result
        source = sources.decode(data)
        result.parsed = True
        rules = [registry.BY_CODE[code] for code in codes]
        new_text, result.findings = engine.migrate_text(source.text, path, rules, options)
    except sources.UnreadableSource as error:
        result.error = str(error)
        return result
    except cst.ParserSyntaxError as error:
        result.error = (
            f"cannot parse: {error.message} (line {error.raw_line}, column {error.raw_column})"
        )
        return result
    result.changed = new_text != source.text
    if result.changed and not _parses(new_text, source.text):
        result.changed, result.findings = False, []
        result.error = (
            "internal error: the rewritten file would not parse; left untouched (please report)"
        )
        return result
    if result.changed:
        result.diff = unified_diff(source.text, new_text, path)
        if write:
            try:
                sources.write_atomic(path, new_text, source.encoding)
            except OSError as error:
                result.error = f"cannot write: {error}"
    return result


def _parses(new: str, old: str) -> bool:
    """Whether ``new`` parses: the last safety net of "output always parses".

    CPython's parser decides (it is fast), unless it cannot read ``old`` either (syntax newer
    than the running Python); then libcst's does.
    """
    import ast

    import libcst as cst

    try:
        ast.parse(new)
        return True
    except (SyntaxError, ValueError):
        try:
            ast.parse(old)
            return False
        except (SyntaxError, ValueError):
            pass
    try:
        cst.parse_module(new)
    except cst.ParserSyntaxError:
        return False
    return True


def unified_diff(old: str, new: str, path: str) -> str:
    from codemods.engine import split_lines

    before, after = (path, path) if path.startswith("/") else (f"a/{path}", f"b/{path}")
    lines = []
    for line in difflib.unified_diff(split_lines(old), split_lines(new), before, after):
        lines.append(
            line if line.endswith(("\n", "\r")) else line + "\n\\ No newline at end of file\n"
        )
    return "".join(lines)


def migrate_files(
    paths: Sequence[str],
    codes: Sequence[str],
    options: Options,
    *,
    write: bool = False,
    jobs: int = 1,
    progress: Callable[[int, str], None] | None = None,
) -> Iterator[FileResult]:
    """Results in the order of ``paths``, whatever ``jobs`` is."""
    work = partial(migrate_file, codes=list(codes), options=options, write=write)
    if jobs <= 1 or len(paths) < 2:
        results: Iterator[FileResult] = map(work, paths)
        for index, result in enumerate(results, start=1):
            if progress:
                progress(index, result.path)
            yield result
        return
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        chunk = max(1, min(64, len(paths) // (jobs * 8)))
        for index, result in enumerate(pool.map(work, paths, chunksize=chunk), start=1):
            if progress:
                progress(index, result.path)
            yield result
