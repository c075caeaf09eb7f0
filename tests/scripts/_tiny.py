"""What the test training scripts share: a tiny bf16 model, its global batches, the log line.

Each script runs under torchrun; started bare (no ``RANK`` in the environment) it spawns its
own 2 gloo ranks with ``torch.multiprocessing``, as some real scripts do. Rank 0 prints one
``step N loss L grad_norm G`` line per optimizer step.
"""

import os
import socket
from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from fsdp2_port.prove.launch import exit_now

DIM, ROWS_PER_RANK, MAX_GRAD_NORM, LR = 16, 4, 0.1, 1e-2


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(DIM, DIM)

    def forward(self, x):
        return x + self.linear(x).tanh()


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(2))
        self.head = nn.Linear(DIM, DIM)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def model() -> Net:
    torch.manual_seed(0)
    return Net().to(torch.bfloat16)


def train(model: nn.Module, optimizer, steps: int) -> None:
    """The same global batch at any world size; rank r takes its rows."""
    rank, world = dist.get_rank(), dist.get_world_size()
    for step in range(steps):
        g = torch.Generator().manual_seed(step)
        x, y = torch.randn(2, ROWS_PER_RANK * world, DIM, generator=g)
        rows = slice(rank * ROWS_PER_RANK, (rank + 1) * ROWS_PER_RANK)
        loss = (model(x[rows].bfloat16()).float() - y[rows]).pow(2).mean() * 10
        loss.backward()
        norm = optimizer.step()
        loss = loss.detach()
        dist.all_reduce(loss, op=dist.ReduceOp.AVG)
        if rank == 0:
            print(f"step {step} loss {loss.item():.6f} grad_norm {norm.item():.6f}", flush=True)


def launch(main: Callable[[], None]) -> None:
    """``main()`` on every rank: torchrun's, or 2 spawned here."""
    if "RANK" in os.environ:
        _rank(int(os.environ["RANK"]), main, None)
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_rank, args=(main, port), nprocs=2)


def _rank(rank: int, main: Callable[[], None], port: int | None) -> None:
    if port is not None:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        os.environ.update(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank))
    dist.init_process_group("gloo")
    try:
        main()
    finally:
        dist.destroy_process_group()
    exit_now()  # torch 2.13 + gloo can abort in the interpreter's shutdown: see its docstring
