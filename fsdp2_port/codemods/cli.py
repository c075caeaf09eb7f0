"""``fsdp2-port migrate``: rewrite FSDP1 call sites into FSDP2 and mark what needs review.

stdout carries only what machines read: unified diffs (``--format text``), one JSON array of
findings, assumptions and errors with the run's summary record last (``json``), the same
records one JSON object per line (``jsonl``), or GitHub workflow annotations (``github``).
Findings in text form, errors, progress and the summary go to stderr. Exit codes: 0 nothing to
change (or written), 1 with ``--check`` when something would change (or, with
``--fail-on-review``, while findings to review remain), 2 on errors (bad arguments; unreadable,
undecodable or unparseable files, which are left untouched), 141 when standard output is
closed early (``fsdp2_port.cli``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import stat
import sys
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from fsdp2_port.codemods.markers import PREFIX

if TYPE_CHECKING:
    from .assumed import Assumption
    from .engine import FileResult

EPILOG = """\
exit codes: 0 nothing to change (or changes written); 1 with --check when files would change
(or, with --fail-on-review, while findings to review remain); 2 on errors (bad arguments;
unreadable, undecodable or unparseable files, which are left untouched; a file changed while the
run read it, which writes nothing); 141 when standard output closes early (`| head`).
With no PATH, the current directory is migrated. The files given form one run: a model built in
one file and used in another migrates in both, or in neither. A line ending in
'# fsdp2-port: ignore' is left alone. --list-rules lists the codes.
"""
FORMATS = ("text", "json", "jsonl", "github")


def _codes(values: Sequence[str] | None) -> list[str]:
    return [
        code.strip().upper() for value in values or () for code in value.split(",") if code.strip()
    ]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fsdp2-port migrate",
        description="Rewrite FSDP1 (FullyShardedDataParallel) call sites into FSDP2 (fully_shard).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "paths", nargs="*", metavar="PATH", help="files or directories (default: .)"
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--write", action="store_true", help="apply the changes in place (atomically)"
    )
    mode.add_argument(
        "--check",
        action="store_true",
        help="change nothing; exit 1 if a file would change (markers already in place do not "
        "count: add --fail-on-review)",
    )
    parser.add_argument(
        "--fail-on-review",
        action="store_true",
        help="exit 1 also while findings to review remain (their markers, added or already in "
        "place): CI fails until every one is dealt with",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="with --write, also rewrite read-only files (otherwise an error)",
    )
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default="text",
        help="stdout: diffs (text), a JSON array (json), JSON Lines (jsonl), "
        "workflow annotations (github)",
    )
    parser.add_argument(
        "--jobs",
        "-j",
        type=int,
        default=1,
        metavar="N",
        help="worker processes (default 1; at most the number of files and of CPUs)",
    )
    parser.add_argument(
        "--select", action="append", metavar="CODES", help="only these rule codes (comma-separated)"
    )
    parser.add_argument(
        "--ignore", action="append", metavar="CODES", help="skip these rule codes (comma-separated)"
    )
    parser.add_argument(
        "--target-torch",
        default="2.6",
        metavar="VERSION",
        help="torch release the output targets (>= 2.4)",
    )
    parser.add_argument(
        "--no-runtime-dependency",
        action="store_true",
        help="emit torch-only code, never calls into fsdp2_port (what needs it is marked)",
    )
    parser.add_argument(
        "--drop-fsdp1-branches",
        action="store_true",
        help="FSDP1 branches of dispatches between FSDP versions go: a type dispatch's is "
        "deleted, a config switch's constructor migrates in place (library code kept for both "
        "versions on purpose keeps them otherwise)",
    )
    parser.add_argument(
        "--whole-program",
        action="store_true",
        help="the files given are the whole program: no code outside them imports their "
        "module-level names, so a public one that only the run reads may be respelled or "
        "removed as a private one is, and FSDP1 code in a function nothing in the run calls "
        "holds no model (an application, not a library others import)",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="take no assumption: where a decision would rest on a name (a method name on a "
        "value of unknown type, a word in an identifier), take the conservative branch (hold "
        "or mark rather than rewrite, an unknown value may be a model)",
    )
    parser.add_argument(
        "--show-assumptions",
        action="store_true",
        help="list on stderr each assumption the run took (path:line, kind, list, name)",
    )
    parser.add_argument("--list-rules", action="store_true", help="print the rule codes and exit")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(sys.argv[1:] if argv is None else list(argv))
    except SystemExit as leaving:
        return int(leaving.code or 0)

    from fsdp2_port.codemods import registry
    from fsdp2_port.codemods.options import Options
    from fsdp2_port.codemods.sources import discover
    from fsdp2_port.codemods.writes import recover

    if args.list_rules:
        for code, summary in registry.CODES.items():
            print(f"{code}  {summary}")
        return 0
    try:
        codes = registry.select(_codes(args.select), _codes(args.ignore))
        options = Options.for_torch(
            args.target_torch,
            runtime_dependency=not args.no_runtime_dependency,
            drop_fsdp1_branches=args.drop_fsdp1_branches,
            whole_program=args.whole_program,
            strict=args.strict,
        )
    except ValueError as error:
        parser.print_usage(sys.stderr)
        print(f"fsdp2-port migrate: error: {error}", file=sys.stderr)
        return 2
    if args.jobs < 1:
        print("fsdp2-port migrate: error: --jobs must be >= 1", file=sys.stderr)
        return 2

    args.paths = args.paths or ["."]
    files, problems = discover(args.paths)
    onto = _output_onto_input(files)
    if onto is not None:  # not a byte more goes to standard output
        print(f"fsdp2-port migrate: error: {onto}", file=sys.stderr)
        return 2
    notes, unfinished = recover(args.paths, write=args.write)
    for note in notes:
        print(f"fsdp2-port migrate: {note}", file=sys.stderr)
    problems += unfinished
    for problem in problems:
        print(f"fsdp2-port migrate: error: {problem}", file=sys.stderr)
    if unfinished:  # nothing is read of a tree an interrupted run may have half written
        files = []
    try:
        return _run(args, files, problems, codes, options)
    except KeyboardInterrupt:
        print("fsdp2-port migrate: interrupted (no file half-written)", file=sys.stderr)
        return 130


def _run(args, files: list[str], problems: list[str], codes, options) -> int:
    """Migrate ``files`` as one run and report; the exit code."""
    from fsdp2_port.codemods.engine import migrate_files
    from fsdp2_port.codemods.summary import Summary, count

    everything: list[dict] = []
    for problem in problems:
        path, _, message = problem.partition(": ")
        _error_record(args.format, path, message, everything)
    progress = _Progress() if sys.stderr.isatty() and len(files) > 20 else None
    summary = Summary(args.write, files=len(files), errors=len(problems))
    taken: list[Assumption] = []
    for result in migrate_files(
        files,
        codes,
        options,
        write=args.write,
        force=args.force,
        jobs=args.jobs,
        progress=progress,
    ):
        if progress:
            progress.clear()
        if result.error:
            summary.errors += 1
            print(f"{result.path}: error: {result.error}", file=sys.stderr)
            _error_record(args.format, result.path, result.error, everything)
        summary.add(
            result.findings,
            parsed=result.parsed,
            changed=result.changed and not result.error,
            path=result.path,
            runtime=result.runtime,
        )
        taken += result.assumptions
        _report(args.format, result, everything)
    if args.format == "jsonl":
        sys.stdout.write(json.dumps(summary.as_dict()) + "\n")
    elif args.format == "json":
        print(json.dumps([*everything, summary.as_dict()], indent=1))
    for line in summary.lines():
        print(f"fsdp2-port migrate: {line}", file=sys.stderr)
    _assumptions(taken, args.show_assumptions)
    if summary.errors:
        return 2
    in_place = _markers_in_place(files) if args.fail_on_review else 0
    if in_place:
        print(
            f"fsdp2-port migrate: {count(in_place, 'marker')} to review in the files "
            f"({PREFIX.strip()})",
            file=sys.stderr,
        )
    failed = (args.check and summary.changed) or (
        args.fail_on_review and (summary.review or in_place)
    )
    return 1 if failed else 0


def _markers_in_place(files: list[str]) -> int:
    """The markers the files hold (after ``--write``, the ones it wrote too): review that
    remains even where no finding is reported again (a rewrite done, its marker kept).
    Regular files only: one swapped for a FIFO since the run began is not opened."""
    found = 0
    for path in files:
        try:
            if not stat.S_ISREG(os.stat(path).st_mode):
                continue
            with open(path, encoding="utf-8", errors="replace") as handle:
                found += sum(line.lstrip().startswith(PREFIX) for line in handle)
        except OSError:
            continue
    return found


def _report(fmt: str, result: FileResult, everything: list[dict]) -> None:
    """One file's diff, findings and assumptions, in ``fmt`` (``json``: into ``everything``)."""
    if fmt == "text":
        sys.stdout.write(result.diff)
        for finding in result.findings:
            print(finding.as_text(), file=sys.stderr)
    elif fmt == "jsonl":
        records = [f.as_dict() for f in result.findings]
        for record in records + [a.as_dict() for a in result.assumptions]:
            sys.stdout.write(json.dumps(record) + "\n")
    elif fmt == "json":
        everything += [f.as_dict() for f in result.findings]
        everything += [a.as_dict() for a in result.assumptions]
    else:
        for finding in result.findings:
            print(_annotation(finding))


def _assumptions(taken: list[Assumption], listed: bool) -> None:
    """On stderr: each assumption (``--show-assumptions``), then how many of each kind."""
    from fsdp2_port.codemods.summary import count

    if listed:
        for assumption in taken:
            print(assumption.as_text(), file=sys.stderr)
    if taken:
        kinds = Counter(a.kind for a in taken)
        each = ", ".join(f"{kind} {n}" for kind, n in sorted(kinds.items()))
        more = "" if listed else "--show-assumptions lists them, "
        print(
            f"fsdp2-port migrate: {count(len(taken), 'assumption')} taken ({each}); "
            f"{more}--strict takes none",
            file=sys.stderr,
        )


def _output_onto_input(files: list[str]) -> str | None:
    """Why not to run: standard output is one of the files of the run (``>> train.py``)."""
    try:
        out = os.fstat(sys.stdout.fileno())
    except (OSError, ValueError):
        return None
    if not stat.S_ISREG(out.st_mode):
        return None
    for path in files:
        with contextlib.suppress(OSError):
            status = os.stat(path)
            if (status.st_dev, status.st_ino) == (out.st_dev, out.st_ino):
                return f"standard output is {path}, a file of the run: send it elsewhere"
    return None


def _error_record(fmt: str, path: str, message: str, everything: list[dict]) -> None:
    """A failed path on stdout: ``{"path", "error"}`` in json/jsonl, ``::error`` in github."""
    if fmt == "github":
        print(f"::error file={_escape(path, True)}::{_escape(message)}")
    elif fmt == "jsonl":
        sys.stdout.write(json.dumps({"path": path, "error": message}) + "\n")
    elif fmt == "json":
        everything.append({"path": path, "error": message})


def _annotation(finding) -> str:
    """A GitHub workflow command: review findings warn, rewrites are notices."""
    level = "warning" if finding.severity == "review" else "notice"
    where = f"file={_escape(finding.path, True)},line={finding.line},col={finding.column}"
    title = f"title={_escape(finding.code, True)}"
    return f"::{level} {where},{title}::{_escape(f'{finding.code} {finding.message}')}"


def _escape(text: str, property_value: bool = False) -> str:
    """GitHub's escaping for workflow command data (and, more strictly, property values)."""
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    if property_value:
        text = text.replace(":", "%3A").replace(",", "%2C")
    return text


class _Progress:
    """``analysing [done/total] path`` on one rewritten stderr line (only on a terminal)."""

    def __call__(self, stage: str, done: int, total: int, path: str) -> None:
        sys.stderr.write(f"\r\033[K{stage} [{done}/{total}] {path}")
        sys.stderr.flush()

    def clear(self) -> None:
        sys.stderr.write("\r\033[K")
        sys.stderr.flush()
