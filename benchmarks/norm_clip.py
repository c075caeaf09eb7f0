"""Norm + clip: fsdp2_port.clip_grad_norm_ against torch's (FSDP2), compat's against FSDP1's.

    python benchmarks/norm_clip.py [--tensors 200 2000] [--layout fsdp|hsdp|fsdp1]
                                   [--rounds 21] [--device cpu|cuda]

N gradients of 4096 elements each. fsdp: DTensors Shard(0) on a 1-D mesh of 2 ranks; hsdp:
(Replicate, Shard(0)) on a 2x2 mesh of 4 ranks; both time ``fsdp2_port.clip_grad_norm_``
against ``torch.nn.utils.clip_grad_norm_``. fsdp1: one FSDP1 FULL_SHARD unit on 2 ranks
(``use_orig_params=True``, so N gradient views), grads from one backward; times
``fsdp2_port.compat.clip_grad_norm_`` against ``FullyShardedDataParallel.clip_grad_norm_``.

For each N, each side gets its own fresh gradients and is timed on its first call (the one
that pays for caches: torch's DTensor sharding propagation grows quadratically in N there,
14 s at 2000 tensors and 322 s at 10000 on a 2-core machine, hence the default N),
then ``--rounds`` rounds of
one call each, interleaved (the order alternates each round), every call between barriers;
the slowest rank's time counts. Steady state is the median of the rounds, with their spread
(min-max), and the ratio is the median of the per-round ratios (a slow moment of the shared
machine slows both calls of a round alike). Collectives are counted on one extra call
(CommDebugMode; FSDP1's are plain c10d calls it does not see, so those are counted by
wrapping ``dist.all_reduce``). Writes benchmarks/results/norm_clip_<layout>.json and the
``norm-clip-<layout>`` (``-cuda``) block of ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.debug import CommDebugMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fsdp2_port
from benchmarks import results_md
from fsdp2_port import compat
from fsdp2_port.prove.launch import run_ranks

NUMEL = 4096
GOAL_STEADY, GOAL_FIRST = 3.0, 100.0  # at 2000 FSDP2 gradients on 2 ranks


def _params(n, mesh, placements, device):
    g = torch.Generator().manual_seed(mesh.get_local_rank(mesh.ndim - 1))
    params = []
    for _ in range(n):
        local = torch.randn(NUMEL // mesh.size(mesh.ndim - 1), generator=g).to(device)
        p = torch.nn.Parameter(DTensor.from_local(local, mesh, placements, run_check=False))
        p.grad = DTensor.from_local(local * 100, mesh, placements, run_check=False)
        params.append(p)
    return params


class _CountAllReduce:
    """Counts ``dist.all_reduce`` calls made while active (what CommDebugMode misses)."""

    def __enter__(self):
        self.count, self._orig = 0, dist.all_reduce

        def counting(*args, **kwargs):
            self.count += 1
            return self._orig(*args, **kwargs)

        dist.all_reduce = counting
        return self

    def __exit__(self, *exc):
        dist.all_reduce = self._orig

    def get_total_counts(self):
        return self.count


def _slowest(seconds: list[float]) -> list[float]:
    """Each call's time on the slowest rank."""
    t = torch.tensor(seconds, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def _timed(fn: Callable, arg, sync: Callable[[], None]) -> float:
    dist.barrier()
    start = time.perf_counter()
    fn(arg, 1.0)
    sync()
    return time.perf_counter() - start


def _compare(ours, theirs, rounds, counter, sync) -> dict:
    """Time ``ours`` and ``theirs``, each ``(fn, first-call arg, steady arg)``, as said above."""
    firsts = [_timed(f, a, sync) for f, a, _ in (ours, theirs)]
    times: list[list[float]] = [[], []]
    for r in range(rounds):
        order = (0, 1) if r % 2 == 0 else (1, 0)
        for k in order:
            fn, _, arg = (ours, theirs)[k]
            times[k].append(_timed(fn, arg, sync))
    counts = []
    for fn, _, arg in (ours, theirs):
        with counter() as comm:
            fn(arg, 1.0)
        counts.append(comm.get_total_counts())
    firsts = _slowest(firsts)
    ours_t, theirs_t = _slowest(times[0]), _slowest(times[1])
    ratios = [b / a for a, b in zip(ours_t, theirs_t)]
    row = {
        "ours_s": statistics.median(ours_t),
        "torch_s": statistics.median(theirs_t),
        "ours_spread_s": [min(ours_t), max(ours_t)],
        "torch_spread_s": [min(theirs_t), max(theirs_t)],
        "ratio": statistics.median(ratios),
        "ratio_spread": [min(ratios), max(ratios)],
        "ours_collectives": counts[0],
        "torch_collectives": counts[1],
    }
    row.update(ours_first_s=firsts[0], torch_first_s=firsts[1], first_ratio=firsts[1] / firsts[0])
    return row


class _Vectors(torch.nn.Module):
    """``n`` parameter vectors; the loss is each one's dot product with the input, summed."""

    def __init__(self, n):
        super().__init__()
        self.vectors = torch.nn.ParameterList(
            torch.nn.Parameter(torch.randn(NUMEL)) for _ in range(n)
        )

    def forward(self, x):
        return sum((p * x).sum() for p in self.vectors)


def _fsdp1_model(n):
    """One FSDP1 unit over ``n`` parameters of NUMEL elements, gradients from one backward."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    torch.manual_seed(0)
    model = FSDP(_Vectors(n), device_id=torch.device("cpu"), use_orig_params=True)
    model(torch.randn(NUMEL)).backward()
    return model


def _fsdp1_rows(args) -> list[dict]:
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    rows = []
    for n in args.tensors:
        ours = (compat.clip_grad_norm_, _fsdp1_model(n), _fsdp1_model(n))
        theirs = (FSDP.clip_grad_norm_, _fsdp1_model(n), _fsdp1_model(n))
        row = _compare(ours, theirs, args.rounds, _CountAllReduce, lambda: None)
        rows.append({"tensors": n, **row})
    return rows


def _dtensor_rows(args, world) -> list[dict]:
    device = torch.device(args.device, dist.get_rank() if args.device == "cuda" else 0)
    if args.layout == "hsdp":
        mesh = init_device_mesh(args.device, (2, 2), mesh_dim_names=("replicate", "shard"))
        placements = [Replicate(), Shard(0)]
    else:
        mesh, placements = init_device_mesh(args.device, (world,)), [Shard(0)]
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    rows = []
    for n in args.tensors:
        ours = (fsdp2_port.clip_grad_norm_, *(_params(n, mesh, placements, device) for _ in "ab"))
        theirs = (
            torch.nn.utils.clip_grad_norm_,
            *(_params(n, mesh, placements, device) for _ in "ab"),
        )
        rows.append({"tensors": n, **_compare(ours, theirs, args.rounds, CommDebugMode, sync)})
    return rows


def _ms(s: float) -> str:
    return f"{s * 1e3:.2f}"


def _spread(median: float, spread: list[float], unit=_ms) -> str:
    return f"{unit(median)} ({unit(spread[0])}-{unit(spread[1])})"


def report(res: dict) -> str:
    who = "compat vs FSDP1's own" if res["layout"] == "fsdp1" else "fsdp2_port vs torch"
    lines = [
        f"{res['layout']} on {res['world_size']} {res['backend']} ranks, {who} clip_grad_norm_, "
        f"torch {res['torch']}; {res['rounds']} interleaved rounds after the first call",
        f"{'tensors':>8} {'ours ms (min-max)':>22} {'torch ms (min-max)':>22} "
        f"{'ratio (min-max)':>20} {'first ours/torch ms':>22} {'first ratio':>12} {'coll.':>6}",
    ]
    for r in res["rows"]:
        first = f"{_ms(r['ours_first_s'])}/{_ms(r['torch_first_s'])}"
        first_ratio = f"{r['first_ratio']:.0f}x"
        ratio = _spread(r["ratio"], r["ratio_spread"], lambda x: f"{x:.2f}x")
        lines.append(
            f"{r['tensors']:>8} {_spread(r['ours_s'], r['ours_spread_s']):>22} "
            f"{_spread(r['torch_s'], r['torch_spread_s']):>22} {ratio:>20} {first:>22} "
            f"{first_ratio:>12} {r['ours_collectives']:>3}/{r['torch_collectives']}"
        )
    goal = [r for r in res["rows"] if r["tensors"] == 2000]
    if res["layout"] == "fsdp" and res["world_size"] == 2 and goal:
        r = goal[0]
        met = "met" if r["ratio"] >= GOAL_STEADY else "MISSED"
        lines.append(
            f"goal: steady state >= {GOAL_STEADY:.0f}x torch at 2000 tensors on 2 ranks: "
            f"{r['ratio']:.2f}x ({met})"
        )
        met = "met" if r["first_ratio"] >= GOAL_FIRST else "MISSED"
        lines.append(
            f"goal: first call >= {GOAL_FIRST:.0f}x faster than torch's first: "
            f"{r['first_ratio']:.0f}x ({met})"
        )
    return "\n".join(lines)


def results_block(res: dict) -> str:
    """The ``norm-clip-<layout>`` block of RESULTS.md: one row per number of tensors."""
    who = (
        "`fsdp2_port.compat.clip_grad_norm_` against FSDP1's own `clip_grad_norm_`"
        if res["layout"] == "fsdp1"
        else "`fsdp2_port.clip_grad_norm_` against `torch.nn.utils.clip_grad_norm_`"
    )
    intro = (
        f"{results_md.machine(res['torch'])} `--layout {res['layout']}` on {res['world_size']} "
        f"{res['backend']} ranks: {who}; {res['rounds']} interleaved rounds after each side's "
        "first call; the slowest rank counts."
    )
    header = [
        "tensors",
        "ours, ms (min-max)",
        "torch, ms (min-max)",
        "steady ratio (per round)",
        "first call ours / torch, ms",
        "first-call ratio",
        "collectives ours / torch",
    ]
    rows = [
        [
            r["tensors"],
            _spread(r["ours_s"], r["ours_spread_s"]),
            _spread(r["torch_s"], r["torch_spread_s"]),
            _spread(r["ratio"], r["ratio_spread"], lambda x: f"{x:.2f}x"),
            f"{_ms(r['ours_first_s'])} / {_ms(r['torch_first_s'])}",
            f"{r['first_ratio']:.0f}x",
            f"{r['ours_collectives']} / {r['torch_collectives']}",
        ]
        for r in res["rows"]
    ]
    parts = [intro, results_md.table(header, rows)]
    goal = [r for r in res["rows"] if r["tensors"] == 2000]
    if res["layout"] == "fsdp" and res["world_size"] == 2 and goal:
        steady, first = goal[0]["ratio"], goal[0]["first_ratio"]
        parts.append(
            f"Goals at 2000 tensors: steady state at least {GOAL_STEADY:g}x torch's speed, "
            f"{steady:.2f}x ({'met' if steady >= GOAL_STEADY else 'missed'}); first call at "
            f"least {GOAL_FIRST:g}x faster than torch's first, {first:.0f}x "
            f"({'met' if first >= GOAL_FIRST else 'missed'})."
        )
    return "\n\n".join(parts)


def _worker(rank, world, args, out):
    torch.set_num_threads(max(1, torch.get_num_threads() // world))
    rows = _fsdp1_rows(args) if args.layout == "fsdp1" else _dtensor_rows(args, world)
    if rank == 0:
        res = {
            "layout": args.layout,
            "world_size": world,
            "backend": dist.get_backend(),
            "numel_per_tensor": NUMEL,
            "rounds": args.rounds,
            "torch": torch.__version__,
            "rows": rows,
        }
        print(report(res), flush=True)
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(res, indent=2))
        if not args.no_results_md:
            suffix = "" if args.device == "cpu" else f"-{args.device}"
            results_md.write_block(f"norm-clip-{args.layout}{suffix}", results_block(res))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tensors", type=int, nargs="+", default=[200, 2000])
    parser.add_argument("--layout", choices=["fsdp", "hsdp", "fsdp1"], default="fsdp")
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument(
        "--no-results-md", action="store_true", help="leave benchmarks/RESULTS.md as it is"
    )
    args = parser.parse_args()
    world = 4 if args.layout == "hsdp" else 2
    suffix = "" if args.device == "cpu" else f"_{args.device}"
    out = Path(__file__).parent / "results" / f"norm_clip_{args.layout}{suffix}.json"
    backend = "nccl" if args.device == "cuda" else "gloo"
    run_ranks(_worker, world, args, str(out), timeout=1800, backend=backend)


if __name__ == "__main__":
    main()
