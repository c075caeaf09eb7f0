"""``fsdp2-port migrate``: rewrite FSDP1 call sites into FSDP2 and mark what needs review.

stdout carries only machine-readable output: unified diffs (text format) or one JSON object
per finding per line (``--format json``, JSON Lines). Findings, errors, progress and the
summary go to stderr. Exit codes: 0 nothing to change or success, 1 with ``--check`` when
something would change, 2 on errors (bad arguments, unreadable/undecodable/unparseable files).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

EPILOG = """\
exit codes: 0 nothing to change (or changes written), 1 with --check when files would change,
2 on errors (bad arguments; unreadable, undecodable or unparseable files, which are left untouched).
A line ending in '# fsdp2-port: ignore' is left alone. Run with --list-rules for the rule codes.
"""


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
        "paths", nargs="*", metavar="PATH", help="files or directories (none: nothing to do)"
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--write", action="store_true", help="apply the changes in place (atomically)"
    )
    mode.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 if anything would change"
    )
    parser.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="stdout: diffs or JSON Lines findings",
    )
    parser.add_argument(
        "--jobs", "-j", type=int, default=1, metavar="N", help="worker processes (default 1)"
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
        help="emit torch-only code instead of calls into fsdp2_port",
    )
    parser.add_argument("--list-rules", action="store_true", help="print the rule codes and exit")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(sys.argv[1:] if argv is None else list(argv))
    except SystemExit as leaving:
        return int(leaving.code or 0)

    from codemods import registry
    from codemods.batch import migrate_files
    from codemods.options import Options
    from codemods.sources import discover

    if args.list_rules:
        for rule in registry.RULES:
            print(f"{rule.CODE}  {rule.SUMMARY}")
        return 0
    try:
        rules = registry.select(_codes(args.select), _codes(args.ignore))
        options = Options.for_torch(
            args.target_torch, runtime_dependency=not args.no_runtime_dependency
        )
    except ValueError as error:
        parser.print_usage(sys.stderr)
        print(f"fsdp2-port migrate: error: {error}", file=sys.stderr)
        return 2
    if args.jobs < 1:
        print("fsdp2-port migrate: error: --jobs must be >= 1", file=sys.stderr)
        return 2

    files, problems = discover(args.paths)
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    progress = _Progress(len(files)) if sys.stderr.isatty() and len(files) > 20 else None
    changed = errors = parsed = review = 0
    findings = 0
    for result in migrate_files(
        files, [r.CODE for r in rules], options, write=args.write, jobs=args.jobs, progress=progress
    ):
        if progress and (result.findings or result.error):
            progress.clear()
        parsed += result.parsed
        if result.error:
            errors += 1
            print(f"{result.path}: error: {result.error}", file=sys.stderr)
        changed += result.changed
        findings += len(result.findings)
        review += sum(f.severity == "review" for f in result.findings)
        if args.format == "json":
            for finding in result.findings:
                sys.stdout.write(json.dumps(finding.as_dict()) + "\n")
        else:
            sys.stdout.write(result.diff)
            for finding in result.findings:
                print(finding.as_text(), file=sys.stderr)
    if progress:
        progress.clear()
    verb = "changed" if args.write else "would change"
    print(
        f"fsdp2-port migrate: {len(files)} files scanned, {parsed} parsed, {changed} {verb}, "
        f"{findings} findings ({review} to review), {errors + len(problems)} errors",
        file=sys.stderr,
    )
    if errors or problems:
        return 2
    return 1 if args.check and changed else 0


class _Progress:
    """``[done/total] path`` on one rewritten stderr line (only when stderr is a terminal)."""

    def __init__(self, total: int) -> None:
        self.total = total

    def __call__(self, done: int, path: str) -> None:
        sys.stderr.write(f"\r\033[K[{done}/{self.total}] {path}")
        sys.stderr.flush()

    def clear(self) -> None:
        sys.stderr.write("\r\033[K")
        sys.stderr.flush()
