"""Run a function on N local ranks: a free port, a timeout, the failing rank's traceback.

A hung collective kills every rank when the timeout expires (``RankTimeout``, naming the
ranks that never finished); an exception on any rank kills the others at once
(``RankFailure``, with every failed rank's traceback, the first cause first). Used by
``fsdp2-port verify`` and by the test suite.
"""

from __future__ import annotations

import os
import socket
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

# Children are forked from a server that has imported torch but run no op (no OpenMP pool),
# which starts ranks in a fraction of the time a fresh interpreter takes.
_CTX = mp.get_context("forkserver")
_CTX.set_forkserver_preload(["torch", "torch.distributed", "fsdp2_port.launch"])


class RankFailure(RuntimeError):
    """One or more ranks raised; the message holds their tracebacks."""


class RankTimeout(TimeoutError):
    """Some ranks were still running at the deadline and were killed."""


def exit_now(code: int = 0) -> None:
    """Flush stdout and stderr and end this process without the interpreter's shutdown.

    For a rank that torchrun or ``mp.spawn`` started, once its work is written. With torch 2.13
    on gloo, a gloo worker thread may hold the last reference to a finished all-reduce and free
    it (and so the Python tensors it kept) while Python shuts down; taking the GIL then ends the
    thread inside a ``noexcept`` destructor and the rank aborts ("terminate called without an
    active exception", SIGABRT), about 1 run in 40 of a 2-rank script under load here. Not
    shutting down leaves nothing to race with. Ranks of ``run_ranks`` need it not: their
    forkserver children already end this way.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(
    rank: int, world_size: int, port: int, backend: str, fn: Callable, args: tuple, errors
) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank))
    try:
        if backend == "nccl":
            torch.cuda.set_device(rank)
        dist.init_process_group(backend, rank=rank, world_size=world_size)
        try:
            fn(rank, world_size, *args)
        finally:
            dist.destroy_process_group()
    except BaseException:
        errors.put((rank, traceback.format_exc()))
        raise SystemExit(1) from None


def run_ranks(
    fn: Callable[..., Any],
    world_size: int,
    *args: Any,
    timeout: float = 120.0,
    backend: str = "gloo",
) -> None:
    """Call ``fn(rank, world_size, *args)`` on ``world_size`` local ranks; raise on any failure.

    ``fn`` must be importable (a module-level function) and ``args`` picklable. The process
    group is torchrun-compatible (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_*``).
    """
    errors = _CTX.SimpleQueue()
    port = free_port()
    procs = [
        _CTX.Process(
            target=_worker, args=(r, world_size, port, backend, fn, args, errors), daemon=True
        )
        for r in range(world_size)
    ]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout
    # Poll rather than join in order: a rank that fails leaves its peers waiting in a
    # collective, and they are killed at once instead of at the deadline.
    while any(p.is_alive() for p in procs) and time.monotonic() < deadline:
        if any(p.exitcode not in (None, 0) for p in procs):
            break
        time.sleep(0.02)
    failed_first = any(p.exitcode not in (None, 0) for p in procs)
    hung = [r for r, p in enumerate(procs) if p.is_alive()]
    reports = _drain(errors)  # failures from before any rank is killed
    for p in procs:
        if p.is_alive():
            p.kill()
    for p in procs:
        p.join()
    if hung and not failed_first and not reports:
        # What peers report now (a closed connection) is the kill's echo, not a cause.
        raise RankTimeout(f"ranks {hung} of {world_size} did not finish: a hung collective?")
    reports += _drain(errors)
    if reports:  # in the order they failed: the first is the cause, the rest its echoes
        raise RankFailure(
            "\n".join(f"rank {rank} of {world_size} failed:\n{tb}" for rank, tb in reports)
        )
    bad = [(r, p.exitcode) for r, p in enumerate(procs) if p.exitcode != 0]
    if bad:
        raise RankFailure(f"ranks exited abnormally (rank, exit code): {bad}")


def _drain(queue) -> list:
    """Everything a ``SimpleQueue`` holds now."""
    items = []
    while not queue.empty():
        items.append(queue.get())
    return items
