"""The BF16 master-weight optimizer step against what users would run instead.

    python benchmarks/optimizer_step.py [--params 50e6] [--tensors 200] [--steps 11] [--warmup 2]

A bf16 model of ``--params`` parameters in ``--tensors`` tensors (Linear weights and biases),
fp32 masters, stepped in one process and on 2 gloo ranks under FSDP2 (``fully_shard``).
Variants, interleaved round by round in one run (the order rotates each round), each on its
own copy of the model:

- ``fsdp2_port``: ``fsdp2_port.BF16Optimizer.step()`` (default kernel, bit-identical to
  torch's default AdamW); ``fsdp2_port+fused``: the same with ``optimizer_kwargs={"fused": True}``
  (opt-in: fused AdamW differs from the default in the last bit); ``compat``:
  ``compat.BF16Optimizer.step()`` (single process, plain model);
- ``specforge``: the SpecForge loop, written here: grads cast one by one into fp32 masters,
  ``torch.nn.utils.clip_grad_norm_``, AdamW, masters copied back one by one;
- ``adamw-single/foreach/fused``: plain ``torch.optim.AdamW`` on fp32 masters (the local
  shards under FSDP2) with ready fp32 grads: no cast, no norm, no write-back.

Times are medians after warm-up (the slowest rank's time per step under FSDP2). A copy
probe measures memory bandwidth and states the floor: a BF16-master AdamW step moves at least
28 B/param (read p32, g32, m, v; write p32, m, v).

Peak memory is what one step allocates beyond what was live when it began (params, masters,
moments and bf16 grads). On CUDA: ``max_memory_allocated``. On the CPU: one extra step under
``torch.profiler`` with ``profile_memory=True``, whose CPU allocator reports every allocation
with its running total; the peak of that total, from the step's start. (RSS would hide
reuse by the C allocator.) Reported per local parameter; the goal is <= 4 B/param.

Prints a table per setting and writes ``benchmarks/results/optimizer_step.json``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor

import compat
import fsdp2_port
from fsdp2_port.launch import run_ranks
from fsdp2_port.lr_schedules import build_scheduler
from fsdp2_port.versions import fully_shard_module, installed_torch

LR, MAX_NORM, BYTES_FLOOR = 1e-4, 0.5, 28
OUT = Path(__file__).parent / "results" / "optimizer_step.json"


def build_model(params: float, tensors: int) -> nn.Module:
    """``tensors // 2`` square bf16 Linears (weight + bias), ``params`` parameters in all."""
    layers = tensors // 2
    width = int((params / layers) ** 0.5) // 2 * 2  # even: shards evenly on 2 ranks
    torch.manual_seed(0)
    return nn.Sequential(*(nn.Linear(width, width) for _ in range(layers))).to(torch.bfloat16)


def local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if isinstance(t, DTensor) else t


def grad_like(p: torch.Tensor, dtype: torch.dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    data = torch.randn(local(p).shape, generator=g).mul_(1e-2).to(dtype)
    if isinstance(p, DTensor):
        return DTensor.from_local(data, p.device_mesh, p.placements, run_check=False)
    return data


class Variant:
    """A model copy, its grads (made once, reused each step) and a ``step()``."""

    def __init__(self, name, params, grads, step):
        self.name, self.params, self.grads, self.step = name, params, grads, step

    def prepare(self) -> None:
        for p, g in zip(self.params, self.grads):
            p.grad = g


class SpecForgeLoop:
    """SpecForge's step: per-parameter casts and copies, torch's clip, AdamW on the masters."""

    def __init__(self, params):
        self.params = params
        self.masters = [p.detach().float().requires_grad_(True) for p in params]
        self.optimizer = torch.optim.AdamW(self.masters, lr=LR)
        self.scheduler = build_scheduler(self.optimizer, "cosine", 1000, 0.0)

    @torch.no_grad()
    def step(self):
        for p, m in zip(self.params, self.masters):
            m.grad = p.grad.float()
        norm = torch.nn.utils.clip_grad_norm_(self.masters, MAX_NORM)
        self.optimizer.step()
        self.scheduler.step()
        for p, m in zip(self.params, self.masters):
            p.copy_(m)
            p.grad = None
        return norm


def make_variants(args, sharded: bool) -> list[Variant]:
    def model():
        m = build_model(args.params, args.tensors)
        if sharded:
            fully_shard = importlib.import_module(fully_shard_module(installed_torch())).fully_shard
            for layer in m:
                fully_shard(layer)
            fully_shard(m)
        return m

    def bf16_grads(ps):
        return [grad_like(p, torch.bfloat16, i) for i, p in enumerate(ps)]

    variants = []
    for name, kw in (("fsdp2_port", {}), ("fsdp2_port+fused", {"fused": True})):
        m = model()
        opt = fsdp2_port.BF16Optimizer(
            m, LR, max_grad_norm=MAX_NORM, total_steps=1000, warmup_ratio=0, optimizer_kwargs=kw
        )
        ps = list(m.parameters())
        variants.append(Variant(name, ps, bf16_grads(ps), opt.step))
    if not sharded:
        m = model()
        opt = compat.BF16Optimizer(m, LR, max_grad_norm=MAX_NORM, total_steps=1000, warmup_ratio=0)
        ps = list(m.parameters())
        variants.append(Variant("compat", ps, bf16_grads(ps), opt.step))
    m = model()
    ps = list(m.parameters())
    variants.append(Variant("specforge", ps, bf16_grads(ps), SpecForgeLoop(ps).step))
    for impl, kw in (
        ("single", {"foreach": False}),
        ("foreach", {"foreach": True}),
        ("fused", {"fused": True}),
    ):
        masters = [local(p).detach().float().requires_grad_(True) for p in model().parameters()]
        opt = torch.optim.AdamW(masters, lr=LR, **kw)
        grads = [grad_like(p, torch.float32, i) for i, p in enumerate(masters)]
        variants.append(Variant(f"adamw-{impl}", masters, grads, opt.step))
    return variants


def copy_floor_s(numel: int, repeats: int = 5) -> tuple[float, float]:
    """Memory bandwidth (bytes read + written per second) and the 28 B/param floor.

    The better of ``copy_`` and ``mul(out=)`` on fp32 (each moves 8 B/element), median of
    ``repeats`` after one pass that faults the pages in.
    """
    src, dst = torch.randn(numel), torch.zeros(numel)
    best = 0.0
    for op in (lambda: dst.copy_(src), lambda: torch.mul(src, 1.0, out=dst)):
        op()
        times = []
        for _ in range(repeats):
            _barrier()
            start = time.perf_counter()
            op()
            times.append(time.perf_counter() - start)
        best = max(best, 8 * numel / statistics.median(times))
    return best, BYTES_FLOOR * numel / best


def _barrier():
    if dist.is_initialized():
        dist.barrier()


def peak_extra_bytes(v: Variant) -> int:
    """Bytes one step allocates beyond what was live when it began (see module docstring)."""
    v.prepare()
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        v.step()
        return torch.cuda.max_memory_allocated() - before
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        v.step()
    allocs = []

    def walk(nodes):
        for n in nodes:
            if n.tag == _EventType.Allocation:
                allocs.append(
                    (n.start_time_ns, n.extra_fields.alloc_size, n.extra_fields.total_allocated)
                )
            walk(n.children)

    walk(prof.profiler.kineto_results.experimental_event_tree())
    if not allocs:
        return 0
    allocs.sort()
    start = allocs[0][2] - allocs[0][1]
    return max(total for _, _, total in allocs) - start


def measure(args, sharded: bool) -> dict:
    variants = make_variants(args, sharded)
    numel = sum(local(p).numel() for p in variants[0].params)
    times = {v.name: [] for v in variants}
    for r in range(args.warmup + args.steps):
        k = r % len(variants)
        for v in variants[k:] + variants[:k]:
            v.prepare()
            _barrier()
            start = time.perf_counter()
            v.step()
            _barrier()
            if r >= args.warmup:
                times[v.name].append(time.perf_counter() - start)
    medians = {n: statistics.median(t) for n, t in times.items()}
    if dist.is_initialized():  # the slowest rank's median
        vals = torch.tensor(list(medians.values()), dtype=torch.float64)
        dist.all_reduce(vals, op=dist.ReduceOp.MAX)
        medians = dict(zip(medians, vals.tolist()))
    peaks = {v.name: peak_extra_bytes(v) / numel for v in variants}
    bandwidth, floor = copy_floor_s(numel)
    return {
        "world_size": dist.get_world_size() if dist.is_initialized() else 1,
        "local_params": numel,
        "tensors": len(variants[0].params),
        "median_s": medians,
        "peak_extra_bytes_per_param": peaks,
        "copy_bandwidth_gbs": bandwidth / 1e9,
        "floor_s": floor,
    }


def _rank(rank, world, args, path):
    torch.set_num_threads(max(1, torch.get_num_threads() // world))
    result = measure(args, sharded=True)
    if rank == 0:
        Path(path).write_text(json.dumps(result))


def table(res: dict) -> str:
    t = res["median_s"]
    best = min(v for k, v in t.items() if k.startswith("adamw-"))
    lines = [
        f"{res['world_size']} process(es), {res['local_params'] / 1e6:.1f} M local params in "
        f"{res['tensors']} tensors; copy bandwidth {res['copy_bandwidth_gbs']:.1f} GB/s, "
        f"floor {BYTES_FLOOR} B/param = {res['floor_s'] * 1e3:.1f} ms",
        f"{'variant':<16} {'median ms':>10} {'/best adamw':>12} {'specforge/x':>12} {'/floor':>7} "
        f"{'peak B/param':>13}",
    ]
    for name, s in t.items():
        lines.append(
            f"{name:<16} {s * 1e3:>10.1f} {s / best:>11.2f}x {t['specforge'] / s:>11.2f}x "
            f"{s / res['floor_s']:>6.1f}x {res['peak_extra_bytes_per_param'][name]:>13.2f}"
        )
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=float, default=50e6)
    parser.add_argument("--tensors", type=int, default=200)
    parser.add_argument("--steps", type=int, default=11, help="timed steps per variant")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--world-size", type=int, default=2)
    args = parser.parse_args()
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads, "
        f"{'CUDA' if torch.cuda.is_available() else 'CPU'}; median of {args.steps} steps "
        f"after {args.warmup} warm-up, variants interleaved"
    )
    results = {"args": vars(args), "torch": torch.__version__, "settings": []}
    started = time.perf_counter()
    single = measure(args, sharded=False)
    print(table(single))
    results["settings"].append(single)
    part = OUT.with_suffix(".rank0.json")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    run_ranks(_rank, args.world_size, args, str(part), timeout=900)
    sharded = json.loads(part.read_text())
    part.unlink()
    sharded["layout"] = "fsdp2"
    print(table(sharded))
    results["settings"].append(sharded)
    results["seconds"] = time.perf_counter() - started
    OUT.write_text(json.dumps(results, indent=2))
    print(f"({results['seconds']:.0f} s; wrote {OUT})")


if __name__ == "__main__":
    main()
