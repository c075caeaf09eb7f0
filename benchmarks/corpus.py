"""The codemod over real FSDP1 code: how much migrates, and is anything left half-migrated?

    python benchmarks/corpus.py CORPUS_DIR [--json OUT] [--sample-markers N --seed S]

``CORPUS_DIR`` holds one folder per repository (``owner+name/<path in repo>``), such as the
files listed in ``benchmarks/corpus_manifest.json``: public code under its own licenses, not
part of this project (fetch it from the commits named there). Each repository is one run of
``fsdp2-port migrate --write`` over a copy, then a second run; ``fsdp2_port.codemods.audit`` then
reads
the output again, without the codemod's plan: FSDP1 constructors before and after,
half-migrated sites, FSDP1 uses left without a marker. Every output must parse and the second
run must change nothing. Exit 0 when at least 80% of the constructors migrate and nothing is
half-migrated, unmarked, unparseable or unstable. ``--results NAME`` also writes the figures
into block ``NAME`` of ``benchmarks/RESULTS.md`` (one block per manifest).
"""

from __future__ import annotations

import argparse
import ast
import json
import random
import re
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import live_fsdp1, results_md
from fsdp2_port.codemods import audit, audit_names, engine, registry, sources
from fsdp2_port.codemods.options import Options


def _parsed(files: list[str]) -> tuple[dict[str, str], dict[str, ast.Module], dict[str, str]]:
    """Each file's text and tree, and the FSDP1 names the run's modules hand on to each other
    (``audit_names.handed_on``: the independent readings' own)."""
    texts, trees = {}, {}
    for path in files:
        texts[path] = Path(path).read_text(encoding="utf-8", errors="surrogateescape")
        try:
            trees[path] = ast.parse(texts[path])
        except (SyntaxError, ValueError):
            continue
    modules = {engine.module_name(p): trees[p] for p in trees}
    handed_on = audit_names.handed_on({m: (t, package) for (m, package), t in modules.items() if m})
    return texts, trees, handed_on


def audits(files: list[str]) -> dict[str, audit.Audit]:
    texts, trees, handed_on = _parsed(files)
    return {
        path: audit.audit(path, texts[path], *engine.module_name(path), handed_on) for path in trees
    }


_NAMES_FSDP = re.compile(rb"fsdp|FullyShardedDataParallel|fully_shard", re.IGNORECASE)


def programs_of_their_own(files: list[str]) -> frozenset[str]:
    """Scripts no file of the run imports (a main guard, and no import names their module):
    what another script builds cannot reach them. Read with plain ``ast``, apart from the
    codemod's own account (``fsdp2_port/codemods/programs.py``)."""
    _, trees, _ = _parsed(files)
    imported: set[str] = set()
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imported.update(a.name.split(".")[-1] for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                imported.add((node.module or "").split(".")[-1])
                imported.update(a.name for a in node.names)
    return frozenset(
        path
        for path, tree in trees.items()
        if Path(path).stem not in imported and _has_main_guard(tree)
    )


def _has_main_guard(tree: ast.Module) -> bool:
    return any(
        isinstance(node, ast.If)
        and isinstance(node.test, ast.Compare)
        and isinstance(node.test.left, ast.Name)
        and node.test.left.id == "__name__"
        for node in tree.body
    )


def uncalled(files: list[str]) -> dict[str, list[tuple[int, int]]]:
    """Per file, the lines of module-level functions without decorators whose name no file
    of the repository spells as a word anywhere else (comments included): in a whole
    program nothing calls them. The benchmark's own text reading, not the codemod's."""
    texts = {p: Path(p).read_text(encoding="utf-8", errors="replace") for p in files}
    words = Counter(w for text in texts.values() for w in re.findall(r"\w+", text))
    found: dict[str, list[tuple[int, int]]] = {}
    for path, text in texts.items():
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            continue
        for node in tree.body:
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.decorator_list:
                continue
            if words[node.name] == 1:  # its own ``def`` only
                found.setdefault(path, []).append((node.lineno, node.end_lineno or node.lineno))
    return found


def _in(spans: dict[str, list[tuple[int, int]]], call: str) -> bool:
    """``call`` ("path:line: what") lies in one of ``spans``."""
    path, line, _ = call.split(":", 2)
    return any(start <= int(line) <= end for start, end in spans.get(path, ()))


def readings(files: list[str]) -> dict[str, live_fsdp1.Reading]:
    """Each file's output read independently of the codemod (``benchmarks/live_fsdp1.py``)."""
    texts, trees, handed_on = _parsed(files)
    return {path: live_fsdp1.read(path, texts[path], handed_on) for path in trees}


def _marker(directory: Path, finding) -> dict:
    """A marker with the code it sits on (for people to judge whether it is worth reading)."""
    lines = Path(finding.path).read_text(encoding="utf-8", errors="replace").splitlines()
    below = lines[finding.marker_line : finding.marker_line + 3]
    return {
        "where": f"{Path(finding.path).relative_to(directory.parent)}:{finding.marker_line}",
        "code": finding.code,
        "message": finding.message,
        "context": below,
    }


def run_repository(directory: Path, options: Options | None = None) -> dict:
    options = options or Options()
    files, _ = sources.discover([str(directory)])
    before = audits(files)
    programs = programs_of_their_own(files)
    # a script of its own that names no FSDP (a DDP script beside an FSDP one): its calls
    # (``no_sync()``) are on its own models, which never were FSDP1's
    never_fsdp = {p for p in programs if not _NAMES_FSDP.search(Path(p).read_bytes())}
    codes = registry.select()
    start = time.perf_counter()
    first = list(engine.migrate_files(files, codes, options, write=True))
    seconds = time.perf_counter() - start
    second = list(engine.migrate_files(files, codes, options))
    after = audits(files)
    read = readings(files)
    fsdp1_left = sum(r.fsdp1_constructors for r in read.values())
    fsdp2_made = sum(r.fsdp2_constructors for r in read.values())
    live = [call for p, r in read.items() if p not in never_fsdp for call in r.live]
    # a whole program: a call in a function nothing calls never runs (kept, and marked)
    spans = uncalled(files) if options.whole_program else {}
    never_called = [call for call in live if _in(spans, call)]
    live = [call for call in live if call not in never_called]
    bridges = sum(r.bridges for r in read.values())
    moved = sum(a.constructors for a in before.values()) > 0 and fsdp2_made > 0
    # every constructor moved by both readings (the audit also follows aliases such as
    # ``Wrapper: TypeAlias = FSDP``, the live-call reading does not)
    all_moved = moved and fsdp1_left == 0 and sum(a.constructors for a in after.values()) == 0
    # files that built FSDP1 models and build none now: FSDP1 names they still import
    migrated_files = [
        p for p, a in before.items() if a.constructors and p in after and not after[p].constructors
    ]
    return {
        "bridges": bridges,
        "migrated_files": len(migrated_files),
        "fsdp1_imports_in_migrated_files": [
            f"{p}: {name}" for p in migrated_files if p in read for name in read[p].fsdp1_imports
        ],
        # read only in FSDP1 parts of dual-version dispatches: the exception
        "fsdp1_dual_in_migrated_files": [
            f"{p}: {name}" for p in migrated_files if p in read for name in read[p].fsdp1_dual
        ],
        # every constructor moved: an FSDP1 call that can still run is on a migrated model
        "live_on_migrated": live if all_moved else [],
        # some stay FSDP1: a live call may be theirs (listed for a person to judge)
        "live_to_judge": live if moved and not all_moved else [],
        # in functions nothing in the repository calls (whole programs only): they never run
        "live_never_called": never_called,
        "files": len(files),
        "changed_files": sum(r.changed for r in first),
        "seconds": round(seconds, 3),
        "constructors_before": sum(a.constructors for a in before.values()),
        "constructors_after": sum(a.constructors for a in after.values()),
        "wrapper_classes": sum(a.wrapper_classes for a in before.values()),
        "half_migrated": audit.run_problems(before, after, programs),
        "unmarked": audit.run_unmarked(before, after),
        "unparseable": sorted(set(before) - set(after)),
        "errors": [f"{r.path}: {r.error}" for r in first + second if r.error],
        "not_idempotent": [r.path for r in second if r.changed],
        "markers": [_marker(directory, f) for r in first for f in r.findings if f.marker_line],
        "findings": dict(Counter(f.code for r in first for f in r.findings)),
        # plain forms that read a value only the run knows with an fsdp2_port reader (the
        # codemod's own account: the plain/bridge split above is read from the output)
        "plain_with_readers": sum(
            f.code in ("F2P002", "F2P003") and "read at run time by fsdp2_port" in f.message
            for r in first
            for f in r.findings
        ),
        "review": sum(f.severity == "review" for r in first for f in r.findings),
    }


def results_block(totals: Counter, repositories: int, flags: list[str]) -> str:
    """The figures of one corpus run, for its block of RESULTS.md."""
    before, after = totals["constructors_before"], totals["constructors_after"]
    migrated = before - after
    share = f"{migrated / max(before, 1):.0%}"
    plain = migrated - totals["bridges"]
    command = " ".join(["`python benchmarks/corpus.py CORPUS_DIR", *flags]).strip() + "`"
    rows = [
        [
            "repositories / files (changed)",
            f"{repositories} / {totals['files']} ({totals['changed_files']})",
        ],
        ["FSDP1 constructors migrated", f"{migrated} of {before} ({share})"],
        [
            "of them plain `fully_shard` code",
            f"{plain} ({totals['plain_with_readers']} reading a run-time value with a reader)",
        ],
        ["of them `fully_shard_like_fsdp1`", totals["bridges"]],
        ["files whose models all migrated", totals["migrated_files"]],
        [
            "of them still importing FSDP1 names",
            f"{totals['files_importing_fsdp1']} ({totals['fsdp1_imports']} "
            f"name{'s' * (totals['fsdp1_imports'] != 1)})",
        ],
        ["FSDP1 calls left live on migrated models", totals["live_on_migrated"]],
        [
            "half-migrated sites / FSDP1 uses without a marker",
            f"{totals['half_migrated']} / {totals['unmarked']}",
        ],
        [
            "errors / outputs that do not parse / files a second run changes",
            f"{totals['errors']} / {totals['unparseable']} / {totals['not_idempotent']}",
        ],
        ["findings to review", totals["review"]],
    ]
    return f"{results_md.machine()} {command}\n\n" + results_md.table(["figure", "value"], rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", type=Path, help="one folder per repository")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--sample-markers",
        type=int,
        default=0,
        metavar="N",
        help="print N markers drawn with --seed, with the code under each, to be judged",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--drop-fsdp1-branches",
        action="store_true",
        help="migrate as `fsdp2-port migrate --drop-fsdp1-branches` (the destination for code "
        "that dispatches between FSDP versions)",
    )
    parser.add_argument(
        "--whole-program",
        action="store_true",
        help="migrate as `fsdp2-port migrate --whole-program` (each repository is an "
        "application: nothing outside it imports its modules)",
    )
    parser.add_argument(
        "--results",
        metavar="NAME",
        help="also write the figures into block NAME of benchmarks/RESULTS.md",
    )
    args = parser.parse_args()
    if not args.corpus.is_dir():
        parser.error(f"{args.corpus}: not a directory")
    totals: Counter = Counter()
    reports = {}
    lists = (
        "live_on_migrated",
        "half_migrated",
        "unmarked",
        "unparseable",
        "errors",
        "not_idempotent",
    )
    with tempfile.TemporaryDirectory() as scratch:
        for repository in sorted(p for p in args.corpus.iterdir() if p.is_dir()):
            copy = Path(scratch) / repository.name
            shutil.copytree(repository, copy)
            options = Options(
                drop_fsdp1_branches=args.drop_fsdp1_branches, whole_program=args.whole_program
            )
            report = run_repository(copy, options)
            reports[repository.name] = report
            for key in (
                "files",
                "changed_files",
                "bridges",
                "plain_with_readers",
                "constructors_before",
                "constructors_after",
                "wrapper_classes",
                "review",
                "migrated_files",
            ):
                totals[key] += report[key]
            totals["fsdp1_imports"] += len(report["fsdp1_imports_in_migrated_files"])
            totals["fsdp1_dual"] += len(report["fsdp1_dual_in_migrated_files"])
            totals["files_importing_fsdp1"] += len(
                {x.rsplit(": ", 1)[0] for x in report["fsdp1_imports_in_migrated_files"]}
            )
            for key in lists:
                totals[key] += len(report[key])
            migrated = report["constructors_before"] - report["constructors_after"]
            print(
                f"{repository.name:<34} {report['files']:>3} files "
                f"({report['changed_files']} changed)  constructors "
                f"{migrated:>2}/{report['constructors_before']:<2} migrated  "
                + "  ".join(f"{key.replace('_', '-')} {len(report[key])}" for key in lists)
                + f"  {report['seconds']:.2f} s"
            )
            for key in (*lists, "live_to_judge", "live_never_called"):
                for problem in report[key]:
                    print(f"    {key}: {problem.replace(scratch + '/', '')}")
            totals["live_to_judge"] += len(report["live_to_judge"])
            totals["live_never_called"] += len(report["live_never_called"])
    migrated = totals["constructors_before"] - totals["constructors_after"]
    share = migrated / max(totals["constructors_before"], 1)
    plain = migrated - totals["bridges"]
    print(
        f"\n{len(reports)} repositories, {totals['files']} files ({totals['changed_files']} "
        f"changed): {migrated} of "
        f"{totals['constructors_before']} FSDP1 constructors migrated ({share:.0%}), "
        f"{plain} of them to plain fully_shard code ({plain / max(migrated, 1):.0%}; "
        f"{totals['plain_with_readers']} of these read values only the run knows with "
        "fsdp2_port's readers) and "
        f"{totals['bridges']} to fully_shard_like_fsdp1; {totals['migrated_files']} files whose "
        f"models all migrated, {totals['files_importing_fsdp1']} of them importing "
        f"{totals['fsdp1_imports']} FSDP1 names (and {totals['fsdp1_dual']} read only in the "
        "FSDP1 parts of dual-version dispatches, the exception); "
        f"{totals['wrapper_classes']} FSDP1 subclasses / wrapper_cls=FSDP (marked); "
        f"{totals['live_on_migrated']} FSDP1 calls live on migrated models; "
        f"{totals['live_to_judge']} live FSDP1 calls in runs that keep FSDP1 models (to judge); "
        f"{totals['live_never_called']} FSDP1 calls in functions nothing calls (whole "
        "program, marked); "
        f"{totals['half_migrated']} half-migrated sites; {totals['unmarked']} FSDP1 uses "
        f"without a marker; {totals['unparseable']} outputs that do not parse; "
        f"{totals['errors']} errors; {totals['not_idempotent']} files a second run changes; "
        f"{totals['review']} findings to review"
    )
    if args.sample_markers:
        every = [m for report in reports.values() for m in report["markers"]]
        drawn = random.Random(args.seed).sample(every, min(args.sample_markers, len(every)))
        print(f"\n{len(drawn)} of {len(every)} markers, drawn with seed {args.seed}:")
        for number, marker in enumerate(drawn, start=1):
            print(f"[{number}] {marker['where']} {marker['code']} {marker['message']}")
            for line in marker["context"]:
                print(f"      | {line}")
    if args.json:
        args.json.write_text(json.dumps({"totals": totals, "repositories": reports}, indent=1))
    if args.results:
        flags = ["--drop-fsdp1-branches"] * args.drop_fsdp1_branches
        flags += ["--whole-program"] * args.whole_program
        results_md.write_block(args.results, results_block(totals, len(reports), flags))
    bad = any(totals[key] for key in lists)
    return 0 if share >= 0.8 and not bad else 1


if __name__ == "__main__":
    sys.exit(main())
