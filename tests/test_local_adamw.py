"""The local-shard AdamW path equals ``optimizer.step()`` on the masters, bit for bit.

The master optimizer runs AdamW through ``fsdp2_port.local_adamw`` on local shards, one
block at a time; an AdamW subclass (``supports`` is False for it) takes torch's own
``optimizer.step()`` on all masters at once, with DTensor gradients on FSDP2. Same
gradients, same kernel, elementwise math: masters, moments and step counts must be equal
exactly, for every kernel and with amsgrad.
"""

import pytest
import torch
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

import fsdp2_port
from fsdp2_port import local_adamw
from fsdp2_port.launch import run_ranks
from tests.models import global_batch, local_rows, loss_fn, make_model

KERNELS = [{}, {"foreach": True}, {"fused": True}, {"amsgrad": True}]


class TorchStepAdamW(torch.optim.AdamW):
    """AdamW that the master optimizer must step through ``optimizer.step()``."""


def _train(make, kwargs, optimizer_cls, rank=0, world=1, steps=3):
    model = make()
    opt = fsdp2_port.BF16Optimizer(
        model, 1e-2, 0.1, 1.0, 10, 0.0, optimizer_cls=optimizer_cls, optimizer_kwargs=kwargs
    )
    for step in range(steps):
        x, y = global_batch(step, dtype=torch.bfloat16)
        loss_fn(model, local_rows(x, rank, world), local_rows(y, rank, world)).backward()
        opt.step()
    return opt


def _assert_same_state(a, b):
    for ma, mb in zip(a.fp32_params, b.fp32_params):
        assert torch.equal(local_adamw.local(ma), local_adamw.local(mb))
        sa, sb = a.optimizer.state[ma], b.optimizer.state[mb]
        assert sa.keys() == sb.keys()
        for key in sa:
            assert torch.equal(local_adamw.local(sa[key]), local_adamw.local(sb[key])), key
    for pa, pb in zip(a.model_params, b.model_params):
        assert torch.equal(local_adamw.local(pa), local_adamw.local(pb))


@pytest.mark.parametrize("block_bytes", [0, 1000, 1 << 30], ids=["tensor", "some", "group"])
@pytest.mark.parametrize("kwargs", KERNELS, ids=["default", "foreach", "fused", "amsgrad"])
def test_local_path_is_optimizer_step_in_one_process(kwargs, block_bytes, monkeypatch):
    monkeypatch.setitem(local_adamw.BLOCK_BYTES, "cpu", block_bytes)
    make = lambda: make_model(torch.bfloat16)  # noqa: E731
    local = _train(make, kwargs, torch.optim.AdamW)
    torch_step = _train(make, kwargs, TorchStepAdamW)
    assert local_adamw.supports(local.optimizer, local.fp32_params)
    assert not local_adamw.supports(torch_step.optimizer, torch_step.fp32_params)
    _assert_same_state(local, torch_step)


def test_local_path_is_optimizer_step_on_fsdp2():
    run_ranks(_on_fsdp2, 2)


def _on_fsdp2(rank, world):
    def make():
        model = make_model(torch.bfloat16)  # hidden 17: uneven shards on 2 ranks
        for block in model.blocks:
            fully_shard(block)
        return fully_shard(model)

    for kwargs in KERNELS:
        local = _train(make, kwargs, torch.optim.AdamW, rank, world)
        torch_step = _train(make, kwargs, TorchStepAdamW, rank, world)
        assert isinstance(local.fp32_params[0], DTensor)
        _assert_same_state(local, torch_step)


@pytest.mark.parametrize("block_bytes", [0, 24, 1 << 30])
def test_blocks_cover_every_master_once_within_the_budget(block_bytes, monkeypatch):
    monkeypatch.setitem(local_adamw.BLOCK_BYTES, "cpu", block_bytes)
    sizes = [3, 3, 7, 3, 2]  # fp32: 12, 12, 28, 12, 8 bytes
    masters = [torch.zeros(n, requires_grad=True) for n in sizes]
    opt = torch.optim.AdamW([{"params": masters[:4]}, {"params": masters[4:], "lr": 0.1}])
    given = masters[::-1]  # blocks hold positions in the list given
    blocks = local_adamw.blocks(opt, given)
    assert sorted(k for _, block in blocks for k in block) == [0, 1, 2, 3, 4]
    for group, block in blocks:
        assert all(any(given[k] is p for p in group["params"]) for k in block)
        assert len(block) == 1 or 4 * sum(given[k].numel() for k in block) <= block_bytes
    want = {0: [[4], [3], [2], [1], [0]], 24: [[4, 3], [2], [1], [0]], 1 << 30: [[4, 3, 2, 1], [0]]}
    assert [block for _, block in blocks] == want[block_bytes]
    with pytest.raises(ValueError, match="1 masters are not in the optimizer"):
        local_adamw.blocks(opt, [*masters, torch.zeros(1)])
