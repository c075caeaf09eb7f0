"""The codemod over real FSDP1 code: how much migrates, and is anything left half-migrated?

    python benchmarks/corpus.py CORPUS_DIR [--json OUT]

``CORPUS_DIR`` holds one folder per repository (``owner+name/<path in repo>``), such as the
files listed in ``benchmarks/corpus_manifest.json`` (public code under its own licenses: it is
not part of this project; fetch it from the commits named there). Each repository is one run
of ``fsdp2-port migrate --write`` over a copy, then a second run, then these checks on the
output, made by reading the output again rather than trusting the codemod's own report:

- constructors: FSDP1 constructor calls (``FullyShardedDataParallel(...)``, ``partial(FSDP, ...)``)
  before and after; FSDP1 subclasses and ``wrapper_cls=FSDP`` are counted apart;
- half-migrated files: an FSDP2 policy object handed to a remaining FSDP1 constructor; an
  FSDP2-only API (``set_requires_gradient_sync``, ``fully_shard``, ``FSDPModule`` tests,
  ``fsdp2_port.clip_grad_norm_``, ``fsdp2_port.BF16Optimizer``) used on a model still built by
  an FSDP1 constructor; an FSDP1-only API (``no_sync``, ``clip_grad_norm_``, ``.module``) left
  unmarked on a model now built by FSDP2;
- unmarked FSDP1 names: a reference to an FSDP1 name (configuration values that
  ``fully_shard_like_fsdp1`` takes aside) whose statement carries no marker;
- every output parses; the second run changes nothing.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from codemods import engine, markers, registry, sources  # noqa: E402
from codemods.analysis import FileAnalysis, Source  # noqa: E402
from codemods.options import Options  # noqa: E402
from codemods.rules.leftovers import CONFIGURATION  # noqa: E402
from codemods.text import LineIndex  # noqa: E402
from codemods.ties import Ties  # noqa: E402

_FSDP2_POLICIES = {"MixedPrecisionPolicy", "CPUOffloadPolicy", "OffloadPolicy"}
_RUNTIME_CONSTRUCTORS = {"fsdp2_port.fully_shard_like_fsdp1", "fsdp2_port.like_fsdp1.fully_shard_like_fsdp1"}


def run_repository(directory: Path) -> dict:
    files, _ = sources.discover([str(directory)])
    before = {path: _facts(path) for path in files}
    codes = registry.select()
    start = time.perf_counter()
    first = list(engine.migrate_files(files, codes, Options(), write=True))
    seconds = time.perf_counter() - start
    second = list(engine.migrate_files(files, codes, Options(), write=False))
    after = {path: _facts(path) for path in files}
    report = {
        "files": len(files),
        "seconds": round(seconds, 3),
        "errors": [f"{r.path}: {r.error}" for r in first + second if r.error],
        "not_idempotent": [r.path for r in second if r.changed],
        "findings": Counter(f.code for r in first for f in r.findings),
        "review": sum(f.severity == "review" for r in first for f in r.findings),
    }
    for key in ("constructors", "wrapper_classes"):
        report[f"{key}_before"] = sum(f[key] for f in before.values() if f)
        report[f"{key}_after"] = sum(f[key] for f in after.values() if f)
    problems = []
    for path, facts in after.items():
        if facts is None:
            if before[path] is not None:
                problems.append(f"{path}: the output does not parse")
            continue
        problems += facts["problems"]
    remaining = report["constructors_after"] + report["wrapper_classes_after"]
    new_untied = sum(len(f["untied_fsdp2"]) for f in after.values() if f) - sum(
        len(f["untied_fsdp2"]) for f in before.values() if f
    )
    if remaining and new_untied > 0:
        problems += [
            f"{where}: an FSDP2 API on a model of unknown origin, while FSDP1 constructors remain"
            for f in after.values() if f for where in f["untied_fsdp2"]
        ]
    report["half_migrated"] = [p for p in problems if not p.startswith("unmarked")]
    report["unmarked"] = [p for p in problems if p.startswith("unmarked")]
    return report


def _facts(path: str) -> dict | None:
    """What an independent reading of one file finds (None when it does not parse)."""
    text = Path(path).read_text(encoding="utf-8", errors="surrogateescape")
    try:
        a = FileAnalysis(Source(path, text, *engine.module_name(path)), Options())
    except SyntaxError:
        return None
    lines = LineIndex(text)
    direct = [c for c in a.ties.constructors]
    wrapper_classes = sum(
        1
        for node in a.names.by_type[ast.ClassDef]
        for base in node.bases  # type: ignore[attr-defined]
        if a.is_fsdp_class(base)
    ) + sum(
        1
        for node in a.names.by_type[ast.keyword]
        if node.arg == "wrapper_cls" and a.is_fsdp_class(node.value)  # type: ignore[attr-defined]
    )
    problems: list[str] = []
    untied: list[str] = []
    for call in direct:
        for node in ast.walk(call):
            if isinstance(node, (ast.Name, ast.Attribute)) and a.fsdp2_name(node) in _FSDP2_POLICIES:
                problems.append(f"{path}:{call.lineno}: an FSDP2 policy reaches an FSDP1 constructor")
    fsdp1_models = set(a.ties.constructors.values())
    fsdp2 = Ties(a, lambda f: bool(a.names.qualified(f) & _RUNTIME_CONSTRUCTORS) or a.fsdp2_name(f) == "fully_shard")
    for node in a.names.by_type[ast.Call]:
        assert isinstance(node, ast.Call)
        func = node.func
        receiver = None
        fsdp2_api = False
        if isinstance(func, ast.Attribute) and func.attr == "set_requires_gradient_sync":
            receiver, fsdp2_api = func.value, True
        elif a.names.qualified(func) & {"fsdp2_port.clip_grad_norm_", "fsdp2_port.BF16Optimizer"} and node.args:
            first = node.args[0]
            receiver = first.func.value if isinstance(first, ast.Call) and isinstance(first.func, ast.Attribute) and first.func.attr == "parameters" else first
            fsdp2_api = True
        elif a.fsdp2_name(func) == "fully_shard" and node.args:
            receiver, fsdp2_api = node.args[0], True
        elif (
            a.resolves_to(func, "builtins.isinstance")
            and len(node.args) == 2
            and any(a.fsdp2_name(n) == "FSDPModule" for n in ast.walk(node.args[1]))
        ):
            receiver, fsdp2_api = node.args[0], True
        elif isinstance(func, ast.Attribute) and func.attr in ("no_sync", "clip_grad_norm_") and not a.names.qualified(func):
            receiver = func.value
        if receiver is None:
            continue
        if fsdp2_api and set(a.ties.of(receiver)[0]) & fsdp1_models:
            problems.append(f"{path}:{node.lineno}: an FSDP2 API on a model built by FSDP1")
        elif fsdp2_api and not (a.ties.of(receiver)[0] or fsdp2.of(receiver)[0]):
            untied.append(f"{path}:{node.lineno}")
        if not fsdp2_api and fsdp2.of(receiver)[0] and not _marked(a, lines, node):
            problems.append(f"unmarked: {path}:{node.lineno}: an FSDP1 API on a model built by FSDP2")
    for node in [*a.names.by_type[ast.Name], *a.names.by_type[ast.Attribute]]:
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            continue
        parent = a.names.parent.get(node)
        if isinstance(parent, ast.Attribute) and a.fsdp1_name(parent) is not None:
            continue
        name = a.fsdp1_name(node)
        if name is None or name.split(".", 1)[0] in CONFIGURATION or a.is_ignored(node):
            continue
        if not _marked(a, lines, node):
            problems.append(f"unmarked: {path}:{node.lineno}: FSDP1 name {name}")  # type: ignore[attr-defined]
    return {
        "constructors": len(direct),
        "wrapper_classes": wrapper_classes,
        "problems": problems,
        "untied_fsdp2": untied,
    }


def _marked(a: FileAnalysis, lines: LineIndex, node: ast.AST) -> bool:
    anchor = a.statement_start(a.names.statement(node))
    return bool(markers.existing_above(lines, anchor))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", type=Path, help="one folder per repository")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    if not args.corpus.is_dir():
        parser.error(f"{args.corpus}: not a directory")
    totals: Counter = Counter()
    reports = {}
    with tempfile.TemporaryDirectory() as scratch:
        for repository in sorted(p for p in args.corpus.iterdir() if p.is_dir()):
            copy = Path(scratch) / repository.name
            shutil.copytree(repository, copy)
            report = run_repository(copy)
            reports[repository.name] = report
            for key in ("files", "constructors_before", "constructors_after", "wrapper_classes_before", "review"):
                totals[key] += report[key]
            totals["half_migrated"] += len(report["half_migrated"])
            totals["unmarked"] += len(report["unmarked"])
            totals["errors"] += len(report["errors"])
            totals["not_idempotent"] += len(report["not_idempotent"])
            migrated = report["constructors_before"] - report["constructors_after"]
            print(
                f"{repository.name:<34} files {report['files']:>3}  constructors "
                f"{migrated:>2}/{report['constructors_before']:<2} migrated  half-migrated "
                f"{len(report['half_migrated'])}  unmarked {len(report['unmarked'])}  "
                f"errors {len(report['errors'])}  {report['seconds']:.2f} s"
            )
            for problem in report["half_migrated"] + report["unmarked"] + report["errors"]:
                print(f"    {problem.replace(scratch + os.sep, '')}")
    migrated = totals["constructors_before"] - totals["constructors_after"]
    share = migrated / max(totals["constructors_before"], 1)
    print(
        f"\n{len(reports)} repositories, {totals['files']} files: {migrated} of "
        f"{totals['constructors_before']} FSDP1 constructors migrated ({share:.0%}); "
        f"{totals['wrapper_classes_before']} FSDP1 subclasses / wrapper_cls=FSDP marked; "
        f"{totals['half_migrated']} half-migrated sites; {totals['unmarked']} unmarked FSDP1 "
        f"uses; {totals['errors']} errors; {totals['not_idempotent']} files changed by a second run"
    )
    if args.json:
        args.json.write_text(json.dumps({"totals": totals, "repositories": reports}, indent=1, default=list))
    ok = share >= 0.8 and not (totals["half_migrated"] or totals["unmarked"] or totals["errors"] or totals["not_idempotent"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
