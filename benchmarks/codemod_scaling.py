"""How ``fsdp2-port migrate --check`` time grows with the length of one file.

    python benchmarks/codemod_scaling.py [--lines 2500,5000,10000,20000]

Each file repeats one FSDP1 training function (a constructor, ``no_sync``, the model's clip, a
plain state dict) until it has the given number of lines; every copy is one model, so the
work per line is the same at every size. Prints seconds per size and per 1,000 lines (a
linear codemod keeps the second column flat), and writes them into the ``codemod-scaling``
block of ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import results_md

HEAD = "import torch\nfrom torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n\n"
BLOCK = """
def train_{i}(net, make_optimizer, max_norm):
    model = FSDP(net, use_orig_params=True)
    optimizer = make_optimizer(model.parameters())
    with model.no_sync():
        model(1).sum().backward()
    norm = model.clip_grad_norm_(max_norm)
    state = model.state_dict()
    return model, optimizer, norm, state

"""


def source(lines: int) -> str:
    parts, count, i = [HEAD], HEAD.count("\n"), 0
    while count < lines:
        parts.append(BLOCK.format(i=i))
        count += BLOCK.count("\n")
        i += 1
    return "".join(parts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", default="2500,5000,10000,20000")
    parser.add_argument(
        "--no-results-md", action="store_true", help="leave benchmarks/RESULTS.md as it is"
    )
    args = parser.parse_args()
    sizes = [int(x) for x in args.lines.split(",")]
    rows: list[list[object]] = []
    print(f"{'lines':>7} {'seconds':>8} {'s / 1k lines':>13}")
    with tempfile.TemporaryDirectory() as scratch:
        for lines in sizes:
            path = Path(scratch) / f"train_{lines}.py"
            path.write_text(source(lines))
            start = time.perf_counter()
            command = [sys.executable, "-m", "fsdp2_port", "migrate", "--check", str(path)]
            subprocess.run(command, capture_output=True, check=False)
            seconds = time.perf_counter() - start
            print(f"{lines:>7} {seconds:>8.2f} {seconds / lines * 1000:>13.3f}")
            rows.append([lines, f"{seconds:.2f}", f"{seconds / lines * 1000:.3f}"])
    if not args.no_results_md:
        intro = f"{results_md.machine()} `fsdp2-port migrate --check` on one file, one process."
        table = results_md.table(["lines", "seconds", "seconds per 1,000 lines"], rows)
        results_md.write_block("codemod-scaling", f"{intro}\n\n{table}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
