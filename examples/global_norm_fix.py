"""What the fix changes, on 2 CPU ranks: FSDP1 shards clipped by their own or the global norm.

    python examples/global_norm_fix.py

Each rank trains the same FSDP1 model on its half of a global batch. The old SpecForge step
clips each rank's shard by that shard's norm; fsdp2_port.compat.BF16Optimizer clips by the norm of
the
whole gradient. A single-process replica on the global batch says which one is right.
"""

import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

from fsdp2_port import compat
from fsdp2_port.prove.launch import exit_now

LR, MAX_NORM, STEPS = 1e-2, 1.0, 3


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 16)).to(torch.bfloat16)


def batch(step: int):
    g = torch.Generator().manual_seed(step)
    return torch.randn(8, 16, generator=g).to(torch.bfloat16), torch.randn(8, 16, generator=g)


def loss(m: nn.Module, x, y):
    return ((m(x).float() - y) ** 2).mean() * 100  # large grads, so clipping fires


@torch.no_grad()
def rank_local_clip_norm(fsdp: nn.Module) -> float:
    """The rank-local clip: torch's clip over this rank's shard alone."""
    masters = [p.detach().float() for p in fsdp.parameters() if p.grad is not None]
    for m, p in zip(masters, [p for p in fsdp.parameters() if p.grad is not None]):
        m.grad = p.grad.float()
    return torch.nn.utils.clip_grad_norm_(masters, MAX_NORM).item()


def worker(rank: int, port: int) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    fsdp = FSDP(model(), device_id=torch.device("cpu"), use_orig_params=True)
    opt = compat.BF16Optimizer(fsdp, LR, max_grad_norm=MAX_NORM, total_steps=100, warmup_ratio=0.0)
    replica = model()
    ref = compat.BF16Optimizer(
        replica, LR, max_grad_norm=MAX_NORM, total_steps=100, warmup_ratio=0.0
    )
    ref.configure_grad_norm_reduction(enabled=False)  # one process, the whole batch
    for step in range(STEPS):
        x, y = batch(step)
        loss(fsdp, x[rank * 4 : rank * 4 + 4], y[rank * 4 : rank * 4 + 4]).backward()
        local = rank_local_clip_norm(fsdp)
        norm = opt.step().item()
        loss(replica, x, y).backward()
        want = ref.step().item()
        for r in range(2):
            if r == rank:
                print(
                    f"step {step} rank {rank}: single-process {want:9.4f} | "
                    f"compat (global) {norm:9.4f} | old rank-local {local:9.4f}",
                    flush=True,
                )
            dist.barrier()
    dist.destroy_process_group()
    exit_now()  # torch 2.13 + gloo can abort in the interpreter's shutdown: see its docstring


if __name__ == "__main__":
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.spawn(worker, args=(port,), nprocs=2)
