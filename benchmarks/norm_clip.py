"""Norm + clip on FSDP2 gradients: fsdp2_port.clip_grad_norm_ against torch's, on 2 gloo ranks.

    python benchmarks/norm_clip.py [--tensors 200 2000] [--layout fsdp|hsdp]

Each rank holds N DTensor gradients of 4096 elements: Shard(0) on a 1-D mesh of 2 ranks
(fsdp), or (Replicate, Shard(0)) on a 2x2 mesh of 4 ranks (hsdp). Prints the
median time of each, their ratio and the collectives each issued (CommDebugMode); writes
benchmarks/results/norm_clip_<layout>.json.
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


def _time(fn, params, repeats):
    times, counts = [], None
    for _ in range(repeats):
        dist.barrier()
        with CommDebugMode() as comm:
            start = time.perf_counter()
            fn(params, 1.0)
            times.append(time.perf_counter() - start)
        counts = comm.get_total_counts()
    return statistics.median(times), counts


def _worker(rank, world, port, sizes, layout, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
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
        rows.append({"tensors": n, "ours_s": ours, "torch_s": theirs, "ratio": theirs / ours,
                     "ours_collectives": ours_c, "torch_collectives": theirs_c})
    if rank == 0:
        print(f"{layout} on {world} gloo ranks, torch {torch.__version__}")
        print(f"{'tensors':>8} {'ours (ms)':>10} {'torch (ms)':>11} {'ratio':>8} {'collectives ours/torch':>24}")
        for r in rows:
            print(f"{r['tensors']:>8} {r['ours_s'] * 1e3:>10.2f} {r['torch_s'] * 1e3:>11.1f} "
                  f"{r['ratio']:>7.0f}x {r['ours_collectives']:>12}/{r['torch_collectives']}")
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps({"layout": layout, "world_size": world, "numel_per_tensor": NUMEL,
                                         "torch": torch.__version__, "rows": rows}, indent=2))
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tensors", type=int, nargs="+", default=[200, 2000])
    parser.add_argument("--layout", choices=["fsdp", "hsdp"], default="fsdp")
    args = parser.parse_args()
    world = 4 if args.layout == "hsdp" else 2
    out = Path(__file__).parent / "results" / f"norm_clip_{args.layout}.json"
    mp.spawn(_worker, args=(world, free_port(), args.tensors, args.layout, str(out)), nprocs=world)


if __name__ == "__main__":
    main()
