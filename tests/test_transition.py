"""A run in flight: 3 steps on FSDP1 + compat, save, 3 more on FSDP2 + fsdp2_port at any world
size, equals 6 steps on FSDP1. fp32: the world sizes sum gradients in other orders, so norms
and losses agree to rtol 1e-5 and parameters to 1e-5; the carried state itself is bitwise.
The same name-keyed state also loads back into compat on FSDP1 (use_orig_params=True), where
the continued run is the original's bit for bit (same ranks, same arithmetic)."""

import math

import pytest
import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import fully_shard
from torch.distributed.fsdp.wrap import ModuleWrapPolicy

import fsdp2_port
from fsdp2_port import compat
from fsdp2_port.compat.transition import fsdp2_state_dict
from fsdp2_port.prove.launch import run_ranks
from tests.models import Block, cpu_mesh, global_batch, local_rows, loss_fn, make_model

pytestmark = pytest.mark.slow  # gloo ranks

LR, MAX_NORM, SAVE_AT, TOTAL = 1e-2, 1.0, 3, 6
KW = dict(max_grad_norm=MAX_NORM, total_steps=100, warmup_ratio=0.1)


def _step(model, opt, step):
    rank, world = dist.get_rank(), dist.get_world_size()
    x, y = global_batch(step)
    loss = loss_fn(model, local_rows(x, rank, world), local_rows(y, rank, world))
    loss.backward()
    norm = opt.step().item()
    dist.all_reduce(loss := loss.detach(), op=dist.ReduceOp.AVG)
    return norm, loss.item()


def _fsdp1_model(use_orig_params, seed=1):
    return FSDP(
        make_model(seed=seed),
        device_id=torch.device("cpu"),
        use_orig_params=use_orig_params,
        auto_wrap_policy=ModuleWrapPolicy({Block}),
    )


def _fsdp1_run(rank, world, use_orig_params, inner, path):
    fsdp = _fsdp1_model(use_orig_params, seed=0)
    opt = compat.BF16Optimizer(fsdp.module if inner else fsdp, LR, **KW)
    for step in range(SAVE_AT):
        _step(fsdp, opt, step)
    saved = fsdp2_state_dict(opt, root=fsdp)
    again = _fsdp1_model(use_orig_params)
    back = compat.BF16Optimizer(again.module if inner else again, LR, **KW)
    if not use_orig_params:
        with pytest.raises(ValueError, match="needs use_orig_params=True"):
            back.load_state_dict(saved)
    else:  # the name-keyed state back on FSDP1: every rank's own pieces, bit for bit
        back.load_state_dict(saved)
        for m, want in zip(back.fp32_params, opt.fp32_params):
            assert torch.equal(m, want)
            assert sorted(back.optimizer.state[m]) == sorted(opt.optimizer.state[want])
            for key, value in opt.optimizer.state[want].items():
                assert torch.equal(back.optimizer.state[m][key], value), key
    after = [_step(fsdp, opt, step) for step in range(SAVE_AT, TOTAL)]
    if use_orig_params:
        assert [_step(again, back, step) for step in range(SAVE_AT, TOTAL)] == after
    with FSDP.summon_full_params(fsdp):
        final = {
            n.replace("_fsdp_wrapped_module.", ""): p.detach().clone()
            for n, p in fsdp.named_parameters()
        }
    if rank == 0:
        torch.save({"saved": saved, "after": after, "final": final}, path)


def _fsdp2_resume(rank, world, path):
    model = make_model(seed=1)  # other weights: only the checkpoint can make them right
    mesh = cpu_mesh()
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = fsdp2_port.BF16Optimizer(model, LR, **KW)
    ref = torch.load(path, weights_only=False)
    opt.load_state_dict(ref["saved"])
    full = ref["saved"]["fp32_params"]
    for name, m in zip(opt.param_names, opt.fp32_params):
        assert torch.equal(m.full_tensor(), full[name]), name
        state = opt.optimizer.state[m]
        assert torch.equal(
            state["exp_avg"].full_tensor(),
            ref["saved"]["optimizer_state_dict"]["state"][name]["exp_avg"],
        )
        assert state["step"].item() == SAVE_AT
    after = [_step(model, opt, step) for step in range(SAVE_AT, TOTAL)]
    for (norm, loss), (want_norm, want_loss) in zip(after, ref["after"]):
        assert math.isclose(norm, want_norm, rel_tol=1e-5), (after, ref["after"])
        assert math.isclose(loss, want_loss, rel_tol=1e-5), (after, ref["after"])
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.full_tensor(), ref["final"][name], rtol=0, atol=1e-5, msg=name)


@pytest.mark.parametrize(
    "use_orig_params,inner,resume_world",
    [(True, True, 2), (False, False, 4)],
    ids=["inner-module-2to2", "flat-params-2to4"],
)
def test_fsdp1_to_fsdp2_in_flight(tmp_path, use_orig_params, inner, resume_world):
    path = str(tmp_path / "transition.pt")
    run_ranks(_fsdp1_run, 2, use_orig_params, inner, path)
    run_ranks(_fsdp2_resume, resume_world, path)
