"""Norm + clip: fsdp2_port.clip_grad_norm_ against torch's (FSDP2), compat's against FSDP1's.

    python benchmarks/norm_clip.py [--tensors 200 2000 10000] [--layout fsdp|hsdp|fsdp1]

N gradients of 4096 elements each. fsdp: DTensors Shard(0) on a 1-D mesh of 2 ranks; hsdp:
(Replicate, Shard(0)) on a 2x2 mesh of 4 ranks; both time ``fsdp2_port.clip_grad_norm_``
against ``torch.nn.utils.clip_grad_norm_``. fsdp1: one FSDP1 FULL_SHARD unit on 2 ranks
(``use_orig_params=True``, so N gradient views), grads from one backward; times
``compat.clip_grad_norm_`` against ``FullyShardedDataParallel.clip_grad_norm_``. Prints the
median time of each, their ratio and the collectives each issued (CommDebugMode; FSDP1's
are plain c10d calls it does not see, so those are counted by wrapping ``dist.all_reduce``);
writes benchmarks/results/norm_clip_<layout>.json.
"""

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.debug import CommDebugMode

import fsdp2_port
from fsdp2_port.launch import free_port

NUMEL = 4096


def _params(n, mesh, placements):
    g = torch.Generator().manual_seed(mesh.get_local_rank(mesh.ndim - 1))
    params = []
    for _ in range(n):
        local = torch.randn(NUMEL // mesh.size(mesh.ndim - 1), generator=g)
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


def _time(fn, params, repeats, counter=CommDebugMode):
    times, counts = [], None
    for _ in range(repeats):
        dist.barrier()
        with counter() as comm:
            start = time.perf_counter()
            fn(params, 1.0)
            times.append(time.perf_counter() - start)
        counts = comm.get_total_counts()
    return statistics.median(times), counts


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


def _fsdp1_rows(sizes):
    import compat

    rows = []
    for n in sizes:
        model = _fsdp1_model(n)
        ours, ours_c = _time(compat.clip_grad_norm_, model, 10, _CountAllReduce)
        theirs, theirs_c = _time(type(model).clip_grad_norm_, model, 3, _CountAllReduce)
        rows.append(
            {
                "tensors": n,
                "ours_s": ours,
                "torch_s": theirs,
                "ratio": theirs / ours,
                "ours_collectives": ours_c,
                "torch_collectives": theirs_c,
            }
        )
    return rows


def _dtensor_rows(sizes, layout, world):
    if layout == "hsdp":
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))
        placements = [Replicate(), Shard(0)]
    else:
        mesh, placements = init_device_mesh("cpu", (world,)), [Shard(0)]
    rows = []
    for n in sizes:
        params = _params(n, mesh, placements)
        ours, ours_c = _time(fsdp2_port.clip_grad_norm_, params, 10)
        theirs, theirs_c = _time(torch.nn.utils.clip_grad_norm_, params, 3)
        rows.append(
            {
                "tensors": n,
                "ours_s": ours,
                "torch_s": theirs,
                "ratio": theirs / ours,
                "ours_collectives": ours_c,
                "torch_collectives": theirs_c,
            }
        )
    return rows


def _worker(rank, world, port, sizes, layout, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    rows = _fsdp1_rows(sizes) if layout == "fsdp1" else _dtensor_rows(sizes, layout, world)
    if rank == 0:
        who = "compat vs FSDP1's own" if layout == "fsdp1" else "fsdp2_port vs torch"
        print(f"{layout} on {world} gloo ranks, {who} clip_grad_norm_, torch {torch.__version__}")
        print(
            f"{'tensors':>8} {'ours (ms)':>10} {'torch (ms)':>11} {'ratio':>8} "
            f"{'collectives ours/torch':>24}"
        )
        for r in rows:
            print(
                f"{r['tensors']:>8} {r['ours_s'] * 1e3:>10.2f} {r['torch_s'] * 1e3:>11.1f} "
                f"{r['ratio']:>7.2f}x {r['ours_collectives']:>12}/{r['torch_collectives']}"
            )
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(
            json.dumps(
                {
                    "layout": layout,
                    "world_size": world,
                    "numel_per_tensor": NUMEL,
                    "torch": torch.__version__,
                    "rows": rows,
                },
                indent=2,
            )
        )
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tensors", type=int, nargs="+", default=[200, 2000, 10000])
    parser.add_argument("--layout", choices=["fsdp", "hsdp", "fsdp1"], default="fsdp")
    args = parser.parse_args()
    world = 4 if args.layout == "hsdp" else 2
    out = Path(__file__).parent / "results" / f"norm_clip_{args.layout}.json"
    mp.spawn(_worker, args=(world, free_port(), args.tensors, args.layout, str(out)), nprocs=world)


if __name__ == "__main__":
    main()
