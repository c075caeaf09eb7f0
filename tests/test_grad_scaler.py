"""``fsdp2_port.GradScaler``: what the codemod writes for FSDP1's ``ShardedGradScaler``.

On 2 gloo ranks on the CPU (device="cpu" scalers), a step where only rank 1's gradient shard
holds an inf: FSDP1 + ShardedGradScaler against FSDP1 + ours, FSDP2 + torch.amp.GradScaler
against FSDP2 + ours. Both arms of a pair run the same ops on the same numbers (the same
model, batches and unscale kernel; only the flag's reduction differs, and a 0/1 flag reduces
to the same verdict), so losses, parameters and scales are compared exactly. Plain
``torch.amp.GradScaler`` on FSDP1 is shown to let the ranks disagree: the reason the rewrite
is not simply GradScaler.
"""

import inspect
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor

from fsdp2_port import GradScaler
from fsdp2_port.prove.launch import run_ranks
from tests.models import Block, global_batch, local_rows, loss_fn, make_model

CPU = torch.device("cpu")
STEPS, INF_STEP = 5, 2
#: small enough not to overflow fp32, growing every 2 good steps: the scale moves both ways
SCALER_ARGS = {"init_scale": 2.0**8, "growth_interval": 2}


def _poison(model: nn.Module) -> None:
    """An inf in the first element this rank holds of the first gradient it holds."""
    with torch.no_grad():
        for p in model.parameters():
            grad = p.grad
            if grad is None:
                continue
            local = grad.to_local() if isinstance(grad, DTensor) else grad
            if local.numel():
                local.view(-1)[0] = float("inf")
                return
    raise AssertionError("this rank holds no gradient to poison")


def _train(rank, world, model, scaler, poison_at=INF_STEP, steps=STEPS, poison_rank=1):
    """Per step: (loss, whether the optimizer stepped, scale after update); at step
    ``poison_at`` an inf goes into ``poison_rank``'s gradient shard after backward."""
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
    stepped: list[int] = []
    optimizer.register_step_post_hook(lambda *_: stepped.append(1))
    record = []
    for step in range(steps):
        x, y = global_batch(step)
        optimizer.zero_grad()
        loss = loss_fn(model, local_rows(x, rank, world), local_rows(y, rank, world))
        scaler.scale(loss).backward()
        if step == poison_at and rank == poison_rank:
            _poison(model)
        before = len(stepped)
        scaler.step(optimizer)
        scaler.update()
        record.append((loss.item(), len(stepped) > before, scaler.get_scale()))
    return record


def _gathered(record):
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, record)
    return out


def _assert_same_on_every_rank(record, poison_at=INF_STEP):
    ranks = _gathered([(stepped, scale) for _, stepped, scale in record])
    assert all(r == ranks[0] for r in ranks), f"ranks disagree: {ranks}"
    assert [stepped for stepped, _ in ranks[0]] == [s != poison_at for s in range(len(record))]


def _fsdp1(model):
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    return FSDP(model, device_id=CPU, auto_wrap_policy=ModuleWrapPolicy({Block}))


def _fsdp2(model):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    return fully_shard(model, mesh=mesh)


def _local(model):
    return [
        (p.to_local() if isinstance(p, DTensor) else p).detach().clone() for p in model.parameters()
    ]


# -- FSDP1: ShardedGradScaler and ours take the same steps -----------------------------------------


def _fsdp1_like_sharded_grad_scaler(rank, world):
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    theirs_model, ours_model = _fsdp1(make_model()), _fsdp1(make_model())
    theirs = _train(rank, world, theirs_model, ShardedGradScaler("cpu", **SCALER_ARGS))
    ours = _train(rank, world, ours_model, GradScaler("cpu", **SCALER_ARGS))
    assert ours == theirs  # losses, step decisions, scales: exactly
    _assert_same_on_every_rank(ours)
    assert [scale for *_, scale in ours] == [2.0**8, 2.0**9, 2.0**8, 2.0**8, 2.0**9]
    for a, b in zip(_local(theirs_model), _local(ours_model), strict=True):
        assert torch.equal(a, b)


@pytest.mark.slow
def test_fsdp1_steps_as_sharded_grad_scaler():
    run_ranks(_fsdp1_like_sharded_grad_scaler, 2, timeout=120)


# -- FSDP2: torch.amp.GradScaler (DTensor reduces the flag) and ours take the same steps -----------


def _fsdp2_like_amp_grad_scaler(rank, world):
    theirs_model, ours_model = _fsdp2(make_model()), _fsdp2(make_model())
    theirs = _train(rank, world, theirs_model, torch.amp.GradScaler("cpu", **SCALER_ARGS))
    ours = _train(rank, world, ours_model, GradScaler("cpu", **SCALER_ARGS))
    assert ours == theirs
    _assert_same_on_every_rank(ours)
    for a, b in zip(_local(theirs_model), _local(ours_model), strict=True):
        assert torch.equal(a, b)


@pytest.mark.slow
def test_fsdp2_steps_as_amp_grad_scaler():
    run_ranks(_fsdp2_like_amp_grad_scaler, 2, timeout=120)


# -- why the rewrite is not simply torch.amp.GradScaler --------------------------------------------


def _amp_grad_scaler_disagrees_on_fsdp1(rank, world):
    plain = _train(rank, world, _fsdp1(make_model()), torch.amp.GradScaler("cpu"), 0, steps=1)
    ranks = _gathered(plain)
    # rank 0 saw no inf in its shard and stepped; rank 1 skipped and halved its scale
    assert [r[0][1] for r in ranks] == [True, False]
    assert [r[0][2] for r in ranks] == [2.0**16, 2.0**15]
    ours = _train(rank, world, _fsdp1(make_model()), GradScaler("cpu"), 0, steps=1)
    assert [r[0][1:] for r in _gathered(ours)] == [(False, 2.0**15)] * 2


@pytest.mark.slow
def test_amp_grad_scaler_lets_fsdp1_ranks_disagree():
    run_ranks(_amp_grad_scaler_disagrees_on_fsdp1, 2, timeout=120)


# -- a rank without gradients still joins the verdict (plain replicas) -----------------------------


def _rank_without_gradients(rank, world):
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    scaler = GradScaler("cpu")
    x, y = global_batch(0)
    scaled = scaler.scale(loss_fn(model, x, y))
    if rank == 0:  # rank 1 has no gradient at all (FSDP1 gives empty shards grad=None)
        scaled.backward()
        next(model.parameters()).grad.view(-1)[0] = float("nan")
    before = [p.detach().clone() for p in model.parameters()]
    scaler.step(optimizer)
    scaler.update()
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters(), strict=True))
    assert _gathered(scaler.get_scale()) == [2.0**15, 2.0**15]


@pytest.mark.slow
def test_a_rank_without_gradients_joins_the_verdict():
    run_ranks(_rank_without_gradients, 2, timeout=60)


# -- no FSDP1 code runs ----------------------------------------------------------------------------


def _no_fsdp1_calls(rank, world):
    from fsdp2_port.prove.no_fsdp1 import forbid_fsdp1_calls

    model = _fsdp2(make_model())
    with forbid_fsdp1_calls() as calls:
        record = _train(rank, world, model, GradScaler("cpu", **SCALER_ARGS))
    assert not calls
    _assert_same_on_every_rank(record)


@pytest.mark.slow
def test_runs_no_fsdp1_code():
    run_ranks(_no_fsdp1_calls, 2, timeout=120)


def test_imports_no_fsdp1():
    code = (
        "import sys, fsdp2_port; fsdp2_port.GradScaler('cpu');"
        "print([m for m in sys.modules if m.startswith('torch.distributed.fsdp')])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# -- one process -----------------------------------------------------------------------------------


def test_constructor_is_sharded_grad_scalers():
    """The codemod keeps the call's arguments: same names, order and defaults."""
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    theirs = inspect.signature(ShardedGradScaler.__init__).parameters
    ours = inspect.signature(GradScaler.__init__).parameters
    assert [(p.name, p.default) for p in ours.values()] == [
        (p.name, p.default) for p in theirs.values()
    ]
    scaler = GradScaler("cpu", 8.0, 0.25, 4.0, 3, True, None)
    assert (scaler.get_backoff_factor(), scaler.get_growth_factor()) == (0.25, 4.0)
    assert scaler.get_growth_interval() == 3 and scaler.process_group is None


def test_without_a_process_group_it_is_grad_scaler():
    """A plain model in one process: torch.amp.GradScaler's numbers exactly, inf step
    included."""
    runs = []
    for scaler in (torch.amp.GradScaler("cpu", **SCALER_ARGS), GradScaler("cpu", **SCALER_ARGS)):
        model = make_model()
        runs.append((_train(0, 1, model, scaler, poison_rank=0), _local(model)))
    (theirs, theirs_params), (ours, ours_params) = runs
    assert ours == theirs
    assert [stepped for _, stepped, _ in ours] == [s != INF_STEP for s in range(STEPS)]
    assert all(torch.equal(a, b) for a, b in zip(theirs_params, ours_params, strict=True))


def test_fp16_gradients_are_unscaled_as_sharded_grad_scaler_does():
    """torch.amp.GradScaler refuses fp16 gradients; ShardedGradScaler (and so ours) unscales
    them."""
    model = nn.Linear(4, 3).half()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    x = torch.randn(2, 4).half()
    with pytest.raises(ValueError, match="FP16 gradients"):
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**4)
        scaler.scale(model(x).float().sum()).backward()
        scaler.step(optimizer)
    model.zero_grad()
    scaler = GradScaler("cpu", init_scale=2.0**4)
    scaler.scale(model(x).float().sum()).backward()
    scaled = model.weight.grad.clone()
    scaler.step(optimizer)
    assert torch.equal(model.weight.grad, scaled / 2.0**4)  # a power of two: exact
