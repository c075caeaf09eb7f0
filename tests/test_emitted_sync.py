"""The pure rewrite of ``sync_module_states=True`` does what FSDP1 promised: every rank starts
from rank 0's parameters and buffers.

FSDP1 refuses ``sync_module_states`` on CPU tensors (even on gloo), so the reference is the
promise itself, on 2 gloo ranks: each rank builds the model from its own seed, runs the code
the codemod emits (migrated from FSDP1 source, then executed), and every full parameter and
buffer must equal rank 0's initial ones bit for bit (a broadcast copies bytes).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fsdp2_port.codemods import engine, registry
from fsdp2_port.codemods.options import Options
from fsdp2_port.prove.launch import run_ranks

pytestmark = pytest.mark.slow  # gloo ranks

SOURCE = """\
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def build(net, flag):
    model = FSDP(net, sync_module_states=flag, device_id=torch.device("cpu"))
    return model
"""


def _net(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.Linear(6, 2))
    net[1].running_mean.uniform_()  # a buffer that differs by seed too
    return net


def _synced(rank: int, world: int, migrated: str) -> None:
    namespace: dict = {}
    exec(compile(migrated, "migrated.py", "exec"), namespace)
    reference = _net(0)
    model = namespace["build"](_net(rank), True)
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        assert torch.equal(p.full_tensor(), q.detach()), name
    for (name, b), c in zip(model.named_buffers(), reference.buffers()):
        assert torch.equal(b, c), name
    own = _net(rank)
    unsynced = namespace["build"](_net(rank), False)
    shard = next(unsynced.parameters()).to_local()
    mine = next(own.parameters()).detach().chunk(world)[rank]
    assert torch.equal(shard, mine), "without the flag each rank keeps its own values"
    if rank:
        assert not torch.equal(shard, next(reference.parameters()).detach().chunk(world)[rank])


def test_sync_module_states_rewrite_starts_every_rank_from_rank_0():
    migrated, findings = engine.migrate_text(SOURCE, "m.py", registry.select(), Options())
    assert "fully_shard(" in migrated and "broadcast" in migrated, migrated
    assert not [f for f in findings if f.severity == "review"]
    run_ranks(_synced, 2, migrated, timeout=60)
