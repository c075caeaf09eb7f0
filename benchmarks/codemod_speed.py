"""How fast ``fsdp2-port migrate`` is, against just parsing the same files with libcst.

    python benchmarks/codemod_speed.py [--rounds 3] [--jobs 2] [--whole-program] [PATH ...]

The tree is ``torch/distributed`` and ``torch/nn`` of the installed torch (found without
importing it) unless paths are given: real code, and the FSDP1 implementation itself, so every
rule has work. Measured side by side, interleaved, each in a fresh process (interpreter start
and imports included), median of ``--rounds``:

- ``fsdp2-port migrate --check --jobs N`` (a dry run that prints the diff);
- ``libcst.parse_module`` over every ``.py`` file of the tree, in one process;
- the same parse spread over N processes (the ratio at equal parallelism).

Writes ``benchmarks/results/codemod_speed.json`` and the ``codemod-speed`` block of
``benchmarks/RESULTS.md`` (``codemod-speed-whole-program`` with ``--whole-program``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import results_md

ROOT = Path(__file__).resolve().parents[1]

_PARSE = """
import sys
from concurrent.futures import ProcessPoolExecutor
import libcst

def parse(path):
    with open(path, encoding="utf-8") as handle:
        libcst.parse_module(handle.read())
    return 1

paths, jobs = sys.argv[2:], int(sys.argv[1])
if jobs == 1:
    done = sum(map(parse, paths))
else:
    with ProcessPoolExecutor(jobs) as pool:
        done = sum(pool.map(parse, paths, chunksize=16))
assert done == len(paths)
"""


def torch_tree() -> list[Path]:
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        raise SystemExit("torch is not installed: give the paths to measure")
    base = Path(spec.origin).parent
    return [base / "distributed", base / "nn"]


def timed(command: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise SystemExit(f"{command[:4]} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return seconds


def results_block(
    trees: list[Path], files: int, command: str, times: dict[str, list[float]]
) -> str:
    """A ``codemod-speed`` block: each command's median and spread, and its ratio."""
    medians = {name: statistics.median(values) for name, values in times.items()}
    labels = {"migrate": f"`{command}`"}
    rows = [
        [
            labels.get(name, name.replace("parse", "`libcst.parse_module`")),
            f"{seconds:.2f} ({min(times[name]):.2f}-{max(times[name]):.2f})",
            f"{seconds / medians['migrate']:.1f}x",
        ]
        for name, seconds in medians.items()
    ]
    try:
        torch = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch = None
    where = ", ".join(f"`{t.parent.name}/{t.name}`" for t in trees)
    return "\n\n".join(
        [
            f"{results_md.machine(torch)} {files} files under {where}; "
            f"median of {len(times['migrate'])} interleaved rounds, each command a fresh "
            "process (interpreter start and imports included).",
            results_md.table(["command", "seconds (min-max)", "x the migrate time"], rows),
        ]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument(
        "--whole-program", action="store_true", help="run migrate with --whole-program"
    )
    parser.add_argument(
        "--no-results-md", action="store_true", help="leave benchmarks/RESULTS.md as it is"
    )
    args = parser.parse_args()
    trees = args.paths or torch_tree()
    files = sorted(str(p) for tree in trees for p in Path(tree).rglob("*.py"))
    migrate = [sys.executable, "-m", "fsdp2_port", "migrate", "--check", f"--jobs={args.jobs}"]
    migrate += ["--whole-program"] if args.whole_program else []
    migrate += [str(t) for t in trees]
    commands = {
        "migrate": migrate,
        "parse, 1 process": [sys.executable, "-c", _PARSE, "1", *files],
        f"parse, {args.jobs} processes": [sys.executable, "-c", _PARSE, str(args.jobs), *files],
    }
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(args.rounds):
        for name, command in commands.items():
            times[name].append(timed(command))
    medians = {name: statistics.median(values) for name, values in times.items()}
    print(f"{len(files)} files under {', '.join(str(t) for t in trees)}; median of {args.rounds}")
    for name, seconds in medians.items():
        ratio = seconds / medians["migrate"]
        spread = f"{min(times[name]):.2f}-{max(times[name]):.2f}"
        print(f"  {name:<22} {seconds:7.2f} s  ({spread})  {ratio:5.1f}x the migrate time")
    results = ROOT / "benchmarks" / "results"
    results.mkdir(exist_ok=True)
    (results / "codemod_speed.json").write_text(
        json.dumps({"files": len(files), "jobs": args.jobs, "seconds": times}, indent=1)
    )
    if not args.no_results_md:
        command = f"fsdp2-port migrate --check --jobs {args.jobs}"
        command += " --whole-program" if args.whole_program else ""
        block = results_block([Path(t) for t in trees], len(files), command, times)
        name = "codemod-speed-whole-program" if args.whole_program else "codemod-speed"
        results_md.write_block(name, block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
