"""The local-shard AdamW path equals ``optimizer.step()`` on the masters, bit for bit.

The master optimizer runs AdamW through ``fsdp2_port.train.local_adamw`` on local shards, one
block at a time (fused blocks cutting tensors); an AdamW subclass (``supports`` is False for
it) takes torch's own ``optimizer.step()`` on all masters at once, with DTensor gradients on
FSDP2, with the kernel the local optimizer resolved to. Same gradients, same kernel,
elementwise math: masters, moments and step counts must be equal exactly, for every kernel
(the default, fused on the CPU; single-tensor, torch's own default; foreach; fused) and with
amsgrad.
"""

import pytest
import torch
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

import fsdp2_port
from fsdp2_port import compat
from fsdp2_port.prove.launch import run_ranks
from fsdp2_port.train import local_adamw
from tests.models import cpu_mesh, global_batch, local_rows, loss_fn, make_model

KERNELS = [
    {},
    {"foreach": False},
    {"foreach": True},
    {"fused": True},
    {"amsgrad": True},
    {"amsgrad": True, "foreach": False},
]
KERNEL_IDS = ["default", "single", "foreach", "fused", "amsgrad", "amsgrad-single"]


class TorchStepAdamW(torch.optim.AdamW):
    """AdamW that the master optimizer must step through ``optimizer.step()``."""


def _train(make, kwargs, optimizer_cls, rank=0, world=1, steps=3, dtype=torch.bfloat16):
    model = make()
    opt = fsdp2_port.BF16Optimizer(
        model, 1e-2, 0.1, 1.0, 10, 0.0, optimizer_cls=optimizer_cls, optimizer_kwargs=kwargs
    )
    for step in range(steps):
        x, y = global_batch(step, dtype=dtype)
        loss_fn(model, local_rows(x, rank, world), local_rows(y, rank, world)).backward()
        opt.step()
    return opt


def _local_and_torch_step(make, kwargs, rank=0, world=1, dtype=torch.bfloat16):
    """The local path, and ``optimizer.step()`` with the kernel the local one resolved to."""
    local = _train(make, kwargs, torch.optim.AdamW, rank, world, dtype=dtype)
    resolved = {k: local.optimizer.defaults[k] for k in ("fused", "foreach")}
    torch_step = _train(make, {**kwargs, **resolved}, TorchStepAdamW, rank, world, dtype=dtype)
    return local, torch_step


def _assert_same_state(a, b):
    for ma, mb in zip(a.fp32_params, b.fp32_params):
        assert torch.equal(local_adamw.local(ma), local_adamw.local(mb))
        sa, sb = a.optimizer.state[ma], b.optimizer.state[mb]
        assert sa.keys() == sb.keys()
        for key in sa:
            assert torch.equal(local_adamw.local(sa[key]), local_adamw.local(sb[key])), key
    for pa, pb in zip(a.model_params, b.model_params):
        assert torch.equal(local_adamw.local(pa), local_adamw.local(pb))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("block_bytes", [0, 1000, 1 << 30], ids=["cut", "some", "group"])
@pytest.mark.parametrize("kwargs", KERNELS, ids=KERNEL_IDS)
def test_local_path_is_optimizer_step_in_one_process(kwargs, block_bytes, dtype, monkeypatch):
    """block_bytes 0: fused groups cut every tensor at ``ALIGN``, tails included."""
    monkeypatch.setitem(local_adamw.BLOCK_BYTES, "cpu", block_bytes)
    local, torch_step = _local_and_torch_step(lambda: make_model(dtype), kwargs, dtype=dtype)
    assert local_adamw.supports(local.optimizer, local.fp32_params)
    assert not local_adamw.supports(torch_step.optimizer, torch_step.fp32_params)
    _assert_same_state(local, torch_step)


def test_cut_tensors_are_bitwise_whole_ones(monkeypatch):
    """A large tensor cut into blocks on 2 threads: every element takes the kernel's vector
    path it takes in one call on the whole tensor (whose thread ranges split it elsewhere)."""
    monkeypatch.setitem(local_adamw.BLOCK_BYTES, "cpu", 64 << 10)  # cut at 16384 elements
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:

        def make():
            torch.manual_seed(0)
            return torch.nn.Linear(317, 331).to(torch.bfloat16)  # 104,927 weights, odd tail

        def train(cls, kwargs):
            model = make()
            opt = fsdp2_port.BF16Optimizer(model, 1e-2, optimizer_cls=cls, optimizer_kwargs=kwargs)
            for step in range(3):
                x = torch.randn(4, 317, generator=torch.Generator().manual_seed(step))
                model(x.to(torch.bfloat16)).float().square().mean().backward()
                opt.step()
            return opt

        local = train(torch.optim.AdamW, {})
        assert local.optimizer.defaults["fused"]
        cuts = local_adamw.blocks(local.optimizer, local.fp32_params)
        assert len(cuts) > 6 and all(e - s <= 16384 for _, seg in cuts for _, s, e in seg)
        _assert_same_state(local, train(TorchStepAdamW, {"fused": True}))
    finally:
        torch.set_num_threads(threads)


def test_fused_is_fsdp2_ports_default_only():
    """fsdp2_port: fused AdamW unless a kernel is named; compat: torch's default (SpecForge's
    bits); another optimizer class: untouched."""
    fused = fsdp2_port.BF16Optimizer(make_model(torch.bfloat16), 1e-2).optimizer
    assert fused.defaults["fused"] is True
    single = fsdp2_port.BF16Optimizer(
        make_model(torch.bfloat16), 1e-2, optimizer_kwargs={"foreach": False}
    ).optimizer
    assert not single.defaults["fused"] and single.defaults["foreach"] is False
    assert not compat.BF16Optimizer(make_model(torch.bfloat16), 1e-2).optimizer.defaults["fused"]
    other = fsdp2_port.BF16Optimizer(
        make_model(torch.bfloat16), 1e-2, optimizer_cls=TorchStepAdamW
    ).optimizer
    assert not other.defaults["fused"]


@pytest.mark.slow
def test_local_path_is_optimizer_step_on_fsdp2():
    run_ranks(_on_fsdp2, 2)


def _on_fsdp2(rank, world):
    def make():
        model = make_model(torch.bfloat16)  # hidden 17: uneven shards on 2 ranks
        mesh = cpu_mesh()
        for block in model.blocks:
            fully_shard(block, mesh=mesh)
        return fully_shard(model, mesh=mesh)

    for kwargs in KERNELS:
        local, torch_step = _local_and_torch_step(make, kwargs, rank, world)
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
    assert sorted(k for _, block in blocks for k, _, _ in block) == [0, 1, 2, 3, 4]
    for group, block in blocks:
        assert all(any(given[k] is p for p in group["params"]) for k, _, _ in block)
        assert all(s == 0 and e == given[k].numel() for k, s, e in block)  # not fused: whole
        assert len(block) == 1 or 4 * sum(given[k].numel() for k, _, _ in block) <= block_bytes
    want = {0: [[4], [3], [2], [1], [0]], 24: [[4, 3], [2], [1], [0]], 1 << 30: [[4, 3, 2, 1], [0]]}
    assert [[k for k, _, _ in block] for _, block in blocks] == want[block_bytes]
    with pytest.raises(ValueError, match="1 masters are not in the optimizer"):
        local_adamw.blocks(opt, [*masters, torch.zeros(1)])


def test_fused_blocks_cut_large_tensors_at_aligned_offsets(monkeypatch):
    monkeypatch.setitem(local_adamw.BLOCK_BYTES, "cpu", 24)  # 6 elements a block
    monkeypatch.setattr(local_adamw, "ALIGN", 2)
    masters = [torch.zeros(n, requires_grad=True) for n in [3, 3, 7, 3, 2]]
    opt = torch.optim.AdamW(
        [{"params": masters[:4], "fused": True}, {"params": masters[4:], "lr": 0.1}]
    )
    blocks = [block for _, block in local_adamw.blocks(opt, masters[::-1])]
    assert blocks == [
        [(4, 0, 3), (3, 0, 3)],
        [(2, 0, 6)],  # cut alone; its tail starts the next block
        [(2, 6, 7), (1, 0, 3)],
        [(0, 0, 2)],  # not fused: whole
    ]
    not_cuttable = local_adamw.blocks(opt, masters[::-1], cuttable=[True, True, False, True, True])
    assert [block for _, block in not_cuttable][1] == [(2, 0, 7)]
