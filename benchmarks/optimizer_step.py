"""The BF16 master-weight optimizer step against what users would run instead.

    python benchmarks/optimizer_step.py [--sizes 20e6:100 50e6:200] [--steps 11] [--warmup 2]
                                        [--world-size 2] [--device cpu|cuda]

For each size ``PARAMS:TENSORS``: a bf16 model of PARAMS parameters in TENSORS tensors (Linear
weights and biases), fp32 masters, stepped in one process and on ``--world-size`` ranks under
FSDP2 (``fully_shard``; gloo on the CPU, NCCL with ``--device cuda``, one GPU per rank).
Variants, interleaved round by round in one run (the order rotates each round), each on its
own copy of the model:

- ``fsdp2_port``: ``fsdp2_port.BF16Optimizer.step()`` as constructed by default (fused AdamW
  where torch has the kernel); ``fsdp2_port-single``: the same with
  ``optimizer_kwargs={"foreach": False}`` (torch's default AdamW on the CPU, bit for bit);
  ``compat``: ``fsdp2_port.compat.BF16Optimizer.step()`` (one process, plain model; SpecForge's
  bits);
- ``specforge``: the SpecForge loop, written here: grads cast one by one into fp32 masters,
  ``torch.nn.utils.clip_grad_norm_``, AdamW, masters copied back one by one;
- ``adamw-single/foreach/fused``: plain ``torch.optim.AdamW`` on fp32 masters (the local
  shards under FSDP2) with ready fp32 grads: no cast, no norm, no write-back.

Times are medians of the rounds after warm-up, with their spread (min-max); under FSDP2 each
round counts the slowest rank. Ratios are medians of per-round ratios (both variants of a
ratio ran in the same round, so a slow moment of a shared machine slows both), with their
spread. A copy probe measures memory bandwidth and states the bytes floor: a BF16-master
AdamW step moves at least 28 B/param (read p32, g32, m, v; write p32, m, v).

Peak memory is what one step allocates beyond what was live when it began (params, masters,
moments and bf16 grads). On CUDA: ``max_memory_allocated``. On the CPU: one extra step under
``torch.profiler`` with ``profile_memory=True``, whose CPU allocator reports every allocation
with its running total; the peak of that total, from the step's start. (RSS would hide
reuse by the C allocator.) Reported per local parameter.

Goals, printed as met or missed: the default step at least 2x faster than the SpecForge loop,
within 2x of plain fused AdamW, and at most 0.5 B/param of peak beyond params, masters and
moments. Writes ``benchmarks/results/optimizer_step[_cuda].json`` and the
``optimizer-step-cpu`` (or ``-cuda``) block of ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fsdp2_port
from benchmarks import results_md
from fsdp2_port import compat
from fsdp2_port.codemods.options import fully_shard_module
from fsdp2_port.prove.launch import run_ranks
from fsdp2_port.train.lr_schedules import build_scheduler
from fsdp2_port.versions import installed_torch

LR, MAX_NORM, BYTES_FLOOR = 1e-4, 0.5, 28
GOAL_VS_SPECFORGE, GOAL_VS_FUSED, GOAL_PEAK = 2.0, 2.0, 0.5
RESULTS = Path(__file__).parent / "results"


def build_model(params: float, tensors: int, device: torch.device) -> nn.Module:
    """``tensors // 2`` square bf16 Linears (weight + bias), ``params`` parameters in all."""
    layers = tensors // 2
    width = int((params / layers) ** 0.5) // 2 * 2  # even: shards evenly on 2 ranks
    torch.manual_seed(0)
    with torch.device(device):
        layers_ = [nn.Linear(width, width) for _ in range(layers)]
    return nn.Sequential(*layers_).to(torch.bfloat16)


def local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if isinstance(t, DTensor) else t


def grad_like(p: torch.Tensor, dtype: torch.dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    data = torch.randn(local(p).shape, generator=g).mul_(1e-2).to(dtype=dtype, device=p.device)
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


def make_variants(params: float, tensors: int, sharded: bool, device) -> list[Variant]:
    def model():
        m = build_model(params, tensors, device)
        if sharded:
            fully_shard = importlib.import_module(fully_shard_module(installed_torch())).fully_shard
            for layer in m:
                fully_shard(layer)
            fully_shard(m)
        return m

    def bf16_grads(ps):
        return [grad_like(p, torch.bfloat16, i) for i, p in enumerate(ps)]

    variants = []
    for name, kw in (("fsdp2_port", {}), ("fsdp2_port-single", {"foreach": False})):
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


def copy_floor_s(numel: int, device, repeats: int = 5) -> tuple[float, float]:
    """Memory bandwidth (bytes read + written per second) and the 28 B/param floor.

    The better of ``copy_`` and ``mul(out=)`` on fp32 (each moves 8 B/element), median of
    ``repeats`` after one pass that faults the pages in.
    """
    src, dst = torch.randn(numel, device=device), torch.zeros(numel, device=device)
    best = 0.0
    for op in (lambda: dst.copy_(src), lambda: torch.mul(src, 1.0, out=dst)):
        op()
        times = []
        for _ in range(repeats):
            _barrier()
            start = time.perf_counter()
            op()
            _sync(src.device)
            times.append(time.perf_counter() - start)
        best = max(best, 8 * numel / statistics.median(times))
    return best, BYTES_FLOOR * numel / best


def _barrier():
    if dist.is_initialized():
        dist.barrier()


def _sync(device: torch.device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_extra_bytes(v: Variant, device: torch.device) -> int:
    """Bytes one step allocates beyond what was live when it began (see module docstring)."""
    v.prepare()
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        v.step()
        torch.cuda.synchronize()
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


def _slowest(seconds: list[float], device: torch.device) -> list[float]:
    """Per round, the slowest rank's time (the time itself in one process); reduced on
    ``device``, where the backend has it (NCCL takes no CPU tensor)."""
    if not dist.is_initialized():
        return seconds
    t = torch.tensor(seconds, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def measure(args, params: float, tensors: int, sharded: bool) -> dict:
    device = torch.device(args.device, torch.cuda.current_device() if args.device == "cuda" else 0)
    variants = make_variants(params, tensors, sharded, device)
    numel = sum(local(p).numel() for p in variants[0].params)
    times: dict[str, list[float]] = {v.name: [] for v in variants}
    for r in range(args.warmup + args.steps):
        k = r % len(variants)
        for v in variants[k:] + variants[:k]:
            v.prepare()
            _barrier()
            start = time.perf_counter()
            v.step()
            _sync(device)
            if r >= args.warmup:
                times[v.name].append(time.perf_counter() - start)
    times = {name: _slowest(t, device) for name, t in times.items()}
    peaks = {v.name: peak_extra_bytes(v, device) / numel for v in variants}
    bandwidth, floor = copy_floor_s(numel, device)
    return {
        "world_size": dist.get_world_size() if dist.is_initialized() else 1,
        "backend": dist.get_backend() if dist.is_initialized() else "-",
        "params": params,
        "local_params": numel,
        "tensors": len(variants[0].params),
        "times_s": times,
        "median_s": {n: statistics.median(t) for n, t in times.items()},
        "peak_extra_bytes_per_param": peaks,
        "copy_bandwidth_gbs": bandwidth / 1e9,
        "floor_s": floor,
    }


def _rank(rank, world, args, path):
    if args.device == "cpu":
        torch.set_num_threads(max(1, torch.get_num_threads() // world))
    results = [measure(args, p, t, sharded=True) for p, t in args.sizes]
    if rank == 0:
        Path(path).write_text(json.dumps(results))


def ratio(res: dict, slow: str, fast: str) -> tuple[float, float, float]:
    """Median and spread (min, max) of the per-round ratios ``slow / fast``."""
    per_round = [a / b for a, b in zip(res["times_s"][slow], res["times_s"][fast])]
    return statistics.median(per_round), min(per_round), max(per_round)


def table(res: dict) -> str:
    t = res["median_s"]
    best = min(v for k, v in t.items() if k.startswith("adamw-"))
    where = (
        "1 process"
        if res["world_size"] == 1
        else f"{res['world_size']} {res['backend']} ranks, FSDP2"
    )
    lines = [
        f"{where}: {res['params'] / 1e6:.0f} M params in {res['tensors']} tensors, "
        f"{res['local_params'] / 1e6:.1f} M local; copy bandwidth "
        f"{res['copy_bandwidth_gbs']:.1f} GB/s, floor {BYTES_FLOOR} B/param = "
        f"{res['floor_s'] * 1e3:.1f} ms",
        f"{'variant':<18} {'median ms (min-max)':>22} {'/best adamw':>12} {'specforge/x':>12} "
        f"{'/floor':>7} {'peak B/param':>13}",
    ]
    for name, s in t.items():
        spread = f"{s * 1e3:.1f} ({min(res['times_s'][name]) * 1e3:.1f}-"
        spread += f"{max(res['times_s'][name]) * 1e3:.1f})"
        lines.append(
            f"{name:<18} {spread:>22} {s / best:>11.2f}x {t['specforge'] / s:>11.2f}x "
            f"{s / res['floor_s']:>6.1f}x {res['peak_extra_bytes_per_param'][name]:>13.2f}"
        )
    vs_sf = ratio(res, "specforge", "fsdp2_port")
    vs_fused = ratio(res, "fsdp2_port", "adamw-fused")
    peak = res["peak_extra_bytes_per_param"]["fsdp2_port"]
    lines += [
        f"goal: default >= {GOAL_VS_SPECFORGE:.0f}x faster than SpecForge: {vs_sf[0]:.2f}x "
        f"(per round {vs_sf[1]:.2f}-{vs_sf[2]:.2f}) "
        f"({'met' if vs_sf[0] >= GOAL_VS_SPECFORGE else 'MISSED'})",
        f"goal: default within {GOAL_VS_FUSED:.0f}x of fused AdamW: {vs_fused[0]:.2f}x "
        f"(per round {vs_fused[1]:.2f}-{vs_fused[2]:.2f}) "
        f"({'met' if vs_fused[0] <= GOAL_VS_FUSED else 'MISSED'})",
        f"goal: default's peak <= {GOAL_PEAK} B/param beyond params, masters, moments: "
        f"{peak:.2f} ({'met' if peak <= GOAL_PEAK else 'MISSED'})",
    ]
    return "\n".join(lines)


def _met(met: bool) -> str:
    return "met" if met else "missed"


def results_row(res: dict) -> list[str]:
    """One setting's row of the RESULTS.md table: time, both ratios and peak, each goal
    marked met or missed."""
    ranks = f"{res['world_size']} {res['backend']} rank" + "s" * (res["world_size"] > 1)
    where = f"{ranks}, FSDP2" if res.get("layout") == "fsdp2" else "1 process"
    vs_sf = ratio(res, "specforge", "fsdp2_port")
    vs_fused = ratio(res, "fsdp2_port", "adamw-fused")
    peak = res["peak_extra_bytes_per_param"]["fsdp2_port"]
    return [
        f"{where}, {res['params'] / 1e6:.0f} M params in {res['tensors']} tensors",
        f"{res['median_s']['fsdp2_port'] * 1e3:.1f}",
        f"{vs_sf[0]:.2f}x faster ({vs_sf[1]:.2f}-{vs_sf[2]:.2f}), "
        f"{_met(vs_sf[0] >= GOAL_VS_SPECFORGE)}",
        f"{vs_fused[0]:.2f}x its time ({vs_fused[1]:.2f}-{vs_fused[2]:.2f}), "
        f"{_met(vs_fused[0] <= GOAL_VS_FUSED)}",
        f"{peak:.2f}, {_met(peak <= GOAL_PEAK)}",
    ]


def results_block(settings: list[dict], args) -> str:
    """The ``optimizer-step-<device>`` block of RESULTS.md."""
    header = [
        "setting",
        "default step, ms",
        f"vs SpecForge's loop (goal ≥ {GOAL_VS_SPECFORGE:g}x faster)",
        f"vs fused AdamW (goal ≤ {GOAL_VS_FUSED:g}x its time)",
        f"peak B/param (goal ≤ {GOAL_PEAK:g})",
    ]
    intro = (
        f"{results_md.machine(torch.__version__)} `--device {args.device}`, median of "
        f"{args.steps} steps after {args.warmup} warm-up, variants interleaved; ratios are "
        "medians of per-round ratios, with their spread."
    )
    return intro + "\n\n" + results_md.table(header, [results_row(r) for r in settings])


def _size(text: str) -> tuple[float, int]:
    params, tensors = text.split(":")
    return float(params), int(tensors)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes", type=_size, nargs="+", default=[_size("20e6:100"), _size("50e6:200")]
    )
    parser.add_argument("--steps", type=int, default=11, help="timed steps per variant")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument(
        "--no-results-md", action="store_true", help="leave benchmarks/RESULTS.md as it is"
    )
    args = parser.parse_args()
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads, {args.device}; "
        f"median of {args.steps} steps after {args.warmup} warm-up, variants interleaved"
    )
    results = {"args": {**vars(args), "sizes": args.sizes}, "torch": torch.__version__}
    started = time.perf_counter()
    if args.device == "cuda":
        torch.cuda.set_device(0)
    settings = []
    for p, t in args.sizes:
        settings.append(measure(args, p, t, sharded=False))
        print(table(settings[-1]), flush=True)
    suffix = "" if args.device == "cpu" else f"_{args.device}"
    out = RESULTS / f"optimizer_step{suffix}.json"
    part = out.with_suffix(".rank0.json")
    RESULTS.mkdir(parents=True, exist_ok=True)
    backend = "nccl" if args.device == "cuda" else "gloo"
    run_ranks(_rank, args.world_size, args, str(part), timeout=1800, backend=backend)
    for res in json.loads(part.read_text()):
        res["layout"] = "fsdp2"
        print(table(res))
        settings.append(res)
    part.unlink()
    results["settings"] = settings
    results["seconds"] = time.perf_counter() - started
    out.write_text(json.dumps(results, indent=2))
    print(f"({results['seconds']:.0f} s; wrote {out})")
    if not args.no_results_md:
        results_md.write_block(f"optimizer-step-{args.device}", results_block(settings, args))


if __name__ == "__main__":
    main()
