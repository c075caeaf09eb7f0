"""The demo: migrate the bundled FSDP1 script to FSDP2 and show that it trains the same.

    python examples/demo.py [--steps 6] [--out build/demo]

1. copies examples/train_fsdp1.py to OUT/train_fsdp2.py and runs `fsdp2-port migrate` on it
   (the diff and the report are shown, then the rewrite is written);
2. runs `fsdp2-port compare` on the original and the migration: both train on 2 CPU ranks
   (torchrun, gloo), their losses and grad norms side by side, a verdict, and an HTML report
   in OUT/compare.html. With `--resume-at`, both save a checkpoint half way, and the
   migration resumes twice, from its own checkpoint and from the original's (its per-rank
   optimizer files through `fsdp2-port convert-checkpoint`): each continuation must follow
   the original's uninterrupted run;
3. compares the full state dicts both saved at the end.

Exit 0 when compare says "same" and the final weights agree, 1 otherwise.
"""

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Both scripts compute in bf16 from the same fp32 weights and reduce in fp32. Weights drift
# further than the per-step figures: Adam moves an element whose true gradient is ~0
# (attention key biases) by +-lr whichever way rounding tips it, ~1e-3 of the weights' norm
# after a few steps.
WEIGHT_RTOL = 5e-3


def fsdp2_port(*args: str, **kwargs) -> subprocess.CompletedProcess:
    """``fsdp2-port ARGS``, shown as typed, run with this interpreter (no PATH needed)."""
    print(f"$ fsdp2-port {' '.join(args)}", flush=True)
    return subprocess.run([sys.executable, "-m", "fsdp2_port", *args], text=True, **kwargs)


def weight_difference(a: Path, b: Path) -> float:
    import torch

    sa, sb = torch.load(a), torch.load(b)
    if sa.keys() != sb.keys():
        sys.exit(f"the saved state dicts differ in their keys: {sorted(sa.keys() ^ sb.keys())}")
    diff = sum((sa[k].float() - sb[k].float()).pow(2).sum() for k in sa)
    return (diff / sum(v.float().pow(2).sum() for v in sa.values())).sqrt().item()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--out", type=Path, default=Path("build/demo"))
    args = parser.parse_args()
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    original, migrated = HERE / "train_fsdp1.py", args.out / "train_fsdp2.py"
    shutil.copyfile(original, migrated)

    print("== 1. migrate: what would change (diff on stdout, report on stderr)", flush=True)
    fsdp2_port("migrate", str(migrated), check=True)
    fsdp2_port("migrate", "--write", str(migrated), check=True, capture_output=True)
    if fsdp2_port("migrate", "--check", str(migrated), capture_output=True).returncode:
        sys.exit("the migrated script would change again: the codemods are not idempotent")

    print(f"\n== 2. compare: train both on 2 CPU ranks for {args.steps} steps", flush=True)
    compared = fsdp2_port(
        "compare",
        str(original),
        str(migrated),
        "--nproc-per-node",
        "2",
        "--forbid-fsdp1",  # the migration must run no FSDP1 code, not only train the same
        "--html",
        str(args.out / "compare.html"),
        "--resume-at",
        str(args.steps // 2 - 1),
        "--resume-from-old",
        "--convert",
        "optim_{rank}.pt",
        "--convert-args",
        "--model examples.train_fsdp1:TinyLM",
        "--",
        "--steps",
        str(args.steps),
        "--save",
        str(args.out / "{run}_full_state.pt"),
    )
    if compared.returncode == 2:
        return 1  # a run failed: compare said which, with its output

    print("\n== 3. the weights at the end")
    weights = weight_difference(args.out / "old_full_state.pt", args.out / "new_full_state.pt")
    print(
        f"final full state dicts: ||FSDP2 - FSDP1|| / ||FSDP1|| = {weights:.1e} "
        f"(tolerance {WEIGHT_RTOL:g})"
    )
    print(f"HTML report: {args.out / 'compare.html'}")
    same = compared.returncode == 0 and weights <= WEIGHT_RTOL
    print(
        "DEMO: "
        + (
            "the migrated FSDP2 script trains the same as the FSDP1 original"
            if same
            else "the migrated FSDP2 script does NOT train the same"
        )
    )
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
