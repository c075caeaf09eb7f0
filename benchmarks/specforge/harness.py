"""SpecForge's ``scripts/train_eagle3.py`` (its last FSDP1 commit) on 2 CPU gloo ranks, and its
migration judged by ``fsdp2-port compare``. Fetches nothing: the checkout is given.

    python benchmarks/specforge/harness.py SPECFORGE_CHECKOUT [--work DIR] [--steps 6]
        [--migrated DIR] [--resume-at K [--from-old]] [--timeout S]

1. writes the tiny synthetic inputs (``inputs.py``) into ``--work``;
2. runs the checkout's script unchanged through ``run_train_eagle3.py`` (stand-ins only for
   what needs a GPU or a download, ``standins.py``) on 2 ranks and prints its steps;
3. with ``--migrated DIR`` (a copy of the checkout after ``fsdp2-port migrate --write``):
   ``fsdp2-port compare`` of the original and the migration (bf16 tolerances, the lr compared
   exactly), and with ``--resume-at K`` also the migration resumed from its own checkpoint;
   with ``--from-old`` too from the original's ``training_state.pt`` converted with
   ``--rebuild-missing`` from the draft weights SpecForge saved beside it. SpecForge saves
   rank 0's optimizer pieces only: the other ranks' Adam moments restart at zero, which the
   converter announces, so that run departs from OLD by design (about 6e-3 in the grad norm
   two steps later) and makes the verdict "different".

Exit status: the last command's (the original run's, or compare's).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RUNNER = HERE / "run_train_eagle3.py"
LR = r"lr=\blr ([-+0-9.eE]+|nan)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkout", type=Path)
    parser.add_argument("--work", type=Path, default=Path("build/specforge"))
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--migrated", type=Path)
    parser.add_argument("--resume-at", type=int)
    parser.add_argument("--from-old", action="store_true")
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args()
    work = args.work.resolve()
    sys.path.insert(0, str(HERE))
    import inputs

    inputs.prepare(work)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "SPECFORGE_CHECKOUT": str(args.checkout.resolve()),
        "SPECFORGE_HARNESS_WORK": str(work),
    }
    run_args = ["--work", str(work), "--steps", str(args.steps)]
    if args.migrated is None:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        command += ["--nproc-per-node", "2", str(RUNNER), "--checkout", str(args.checkout)]
        command += [*run_args, "--out", str(work / "runs" / "original")]
        print("$", " ".join(command), flush=True)
        return subprocess.run(command, env=env, timeout=args.timeout).returncode
    checkouts = work / "checkouts"
    checkouts.mkdir(parents=True, exist_ok=True)
    for label, target in (
        ("old", args.checkout),
        ("new", args.migrated),
        ("new-resumed", args.migrated),
        ("new-from-old", args.migrated),
    ):
        link = checkouts / label
        if link.is_symlink():
            link.unlink()
        link.symlink_to(target.resolve())
    command = [sys.executable, "-m", "fsdp2_port", "compare", str(RUNNER), str(RUNNER)]
    command += ["--nproc-per-node", "2", "--dtype", "bf16", "--metric", LR, "--rtol", "lr=0"]
    command += ["--timeout", str(args.timeout), "--html", str(work / "compare.html")]
    if args.resume_at is not None:
        k = args.resume_at
        state = f"epoch_0_step_{k}/training_state.pt"
        convert = f"--model draft:build --rebuild-missing {{old}}/epoch_0_step_{k}"
        command += ["--resume-at", str(k)]
        if args.from_old:
            command += ["--resume-from-old", "--convert", state, "--convert-args", convert]
    command += ["--", "--checkout", str(checkouts / "{run}"), *run_args]
    command += ["--out", str(work / "runs" / "{run}")]
    print("$", " ".join(command), flush=True)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env["PYTHONPATH"]])
    done = subprocess.run(
        [*command[:4], "--format", "json", *command[4:]],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    (work / "compare.json").write_text(done.stdout)
    print(figures(json.loads(done.stdout)))
    return done.returncode


def figures(result: dict) -> str:
    """compare's JSON as the table this harness reports: every step of OLD beside NEW and the
    continued runs, the relative differences, the verdict and what departed or failed."""
    lines = [f"{'run':>12} {'step':>4} {'loss':>12} {'grad_norm':>12} {'lr':>12}  rel diff"]
    old = {s["step"]: s["old"] for s in result["steps"]}

    def row(label: str, step: int, values: dict) -> str:
        base = old.get(step, {})
        rel = {
            m: abs(values[m] - base[m]) / abs(base[m])
            for m in ("loss", "grad_norm", "lr")
            if m in values and m in base and base[m]
        }
        cells = " ".join(
            f"{values.get(m, float('nan')):>12.6g}" for m in ("loss", "grad_norm", "lr")
        )
        diffs = " ".join(f"{m} {d:.1e}" for m, d in rel.items()) if label != "old" else ""
        return f"{label:>12} {step:>4} {cells}  {diffs}"

    for s in result["steps"]:
        lines += [row("old", s["step"], s["old"]), row("new", s["step"], s["new"])]
    for label, steps in result.get("continued", {}).items():
        lines += [row(label, s["step"], s) for s in steps]
    for label, run in result["runs"].items():
        lines.append(f"{label}: exit {run['returncode']}, {run['seconds']:.1f} s")
        if label.startswith("convert"):
            lines += [f"  {line}" for line in run["stdout_tail"].splitlines()]
    lines.append(
        f"VERDICT: {result['verdict']}" + (f": {result['error']}" if result["error"] else "")
    )
    lines += [f"  {f}" for f in result["failures"]]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
