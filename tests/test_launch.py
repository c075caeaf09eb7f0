"""The launcher never hangs.

A failing rank kills its peers; a hung one is killed at the deadline.
"""

import os
import signal
import time

import pytest
import torch
import torch.distributed as dist

from fsdp2_port.prove.launch import RankFailure, RankTimeout, run_ranks


def _sums(rank, world):
    t = torch.tensor([float(rank)])
    dist.all_reduce(t)
    assert t.item() == sum(range(world))


def _fails_on_one_rank(rank, world):
    if rank == 1:
        raise ValueError("boom on rank 1")
    dist.all_reduce(torch.ones(1))  # the peer waits here until it is killed


def _sleeps_on_one_rank(rank, world):
    if rank == 0:
        time.sleep(60)
    dist.barrier()


@pytest.mark.slow
def test_ranks_run_and_reduce():
    run_ranks(_sums, 2)


@pytest.mark.slow
def test_a_failing_rank_fails_fast_with_its_traceback():
    start = time.monotonic()
    with pytest.raises(RankFailure, match="ValueError: boom on rank 1"):
        run_ranks(_fails_on_one_rank, 2, timeout=30)
    assert time.monotonic() - start < 20


@pytest.mark.slow
def test_a_hung_rank_is_killed_at_the_deadline():
    start = time.monotonic()
    with pytest.raises(RankTimeout, match="did not finish"):
        run_ranks(_sleeps_on_one_rank, 2, timeout=3)
    assert time.monotonic() - start < 15


def _dies_on_one_rank(rank, world):
    if rank == 1:
        os.kill(os.getpid(), signal.SIGABRT)  # a crash: no traceback, no report
    dist.all_reduce(torch.ones(1))  # the peer reports a closed connection: an echo


@pytest.mark.slow
def test_a_rank_that_dies_without_a_report_is_named_first():
    with pytest.raises(RankFailure) as failure:
        run_ranks(_dies_on_one_rank, 2, timeout=30)
    first = str(failure.value).splitlines()[0]  # the cause first, whether or not a peer reported
    assert first == "rank 1 of 2 died without a report: killed by SIGABRT (exit code -6)"
