"""DTensor-native checkpoints: DCP across world sizes, keys by name, clear refusals; and
FSDP1 + compat against FSDP2 + fsdp2_port on the same model, data and seed."""

import math

import pytest
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import fully_shard
from torch.distributed.fsdp.wrap import ModuleWrapPolicy
from torch.distributed.tensor import DTensor

import fsdp2_port
from fsdp2_port import compat
from fsdp2_port.prove.launch import run_ranks
from tests.models import Block, TinyNet, cpu_mesh, global_batch, local_rows, loss_fn, make_model

LR, MAX_NORM, SAVE_AT, TOTAL = 1e-2, 1.0, 3, 6


def _fsdp2(dtype, seed=0):
    model = make_model(dtype, seed)
    mesh = cpu_mesh()
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def _optimizer(model):
    return fsdp2_port.BF16Optimizer(
        model, LR, max_grad_norm=MAX_NORM, total_steps=100, warmup_ratio=0.1
    )


def _step(model, opt, step, dtype):
    rank, world = dist.get_rank(), dist.get_world_size()
    x, y = global_batch(step, dtype=dtype)
    loss = loss_fn(model, local_rows(x, rank, world), local_rows(y, rank, world))
    loss.backward()
    return opt.step().item()


def _snapshot(opt):
    """Full masters and moments by name (a collective: every rank calls it)."""
    out = {}
    for name, m in zip(opt.param_names, opt.fp32_params):
        state = opt.optimizer.state[m]
        out[name] = {
            "master": m.full_tensor(),
            "exp_avg": state["exp_avg"].full_tensor(),
            "exp_avg_sq": state["exp_avg_sq"].full_tensor(),
            "step": state["step"].clone(),
        }
    return out


def _save_then_continue(rank, world, dtype_name, ckpt, ref_path):
    dtype = getattr(torch, dtype_name)
    model = _fsdp2(dtype)
    opt = _optimizer(model)
    for step in range(SAVE_AT):
        _step(model, opt, step, dtype)
    dcp.save({"optim": opt}, checkpoint_id=ckpt)
    snapshot = _snapshot(opt)
    norms = [_step(model, opt, step, dtype) for step in range(SAVE_AT, TOTAL)]
    final = {n: m.full_tensor() for n, m in zip(opt.param_names, opt.fp32_params)}
    if rank == 0:
        torch.save(
            {"snapshot": snapshot, "norms": norms, "final": final, "lr": opt.get_learning_rate()},
            ref_path,
        )


def _load_then_continue(rank, world, dtype_name, ckpt, ref_path):
    dtype = getattr(torch, dtype_name)
    model = _fsdp2(dtype, seed=1)  # other weights: only the checkpoint can make them right
    opt = _optimizer(model)
    dcp.load({"optim": opt}, checkpoint_id=ckpt)
    ref = torch.load(ref_path, weights_only=False)
    for name, got in _snapshot(opt).items():
        for key, value in got.items():
            assert torch.equal(value, ref["snapshot"][name][key]), (name, key)
    for p, m in zip(opt.model_params, opt.fp32_params):
        assert torch.equal(p.to_local(), m.to_local().to(p.dtype))
    norms = [_step(model, opt, step, dtype) for step in range(SAVE_AT, TOTAL)]
    # Another world size sums gradients in another order: fp32 agrees to a few ulps (rtol
    # 1e-5 after Adam's normalisation); bf16 gradients are rounded to 8 bits (rtol 1e-2).
    rtol, atol = (1e-5, 1e-5) if dtype == torch.float32 else (1e-2, 2e-2)
    for got, want in zip(norms, ref["norms"]):
        assert math.isclose(got, want, rel_tol=rtol), (norms, ref["norms"])
    for name, m in zip(opt.param_names, opt.fp32_params):
        torch.testing.assert_close(m.full_tensor(), ref["final"][name], rtol=0, atol=atol)
    assert opt.get_learning_rate() == ref["lr"]


@pytest.mark.parametrize("save_world,load_world,dtype", [(2, 4, "float32"), (4, 2, "bfloat16")])
@pytest.mark.slow
def test_dcp_reshards_masters_and_moments_bitwise(tmp_path, save_world, load_world, dtype):
    ckpt, ref = str(tmp_path / "ckpt"), str(tmp_path / "ref.pt")
    run_ranks(_save_then_continue, save_world, dtype, ckpt, ref)
    run_ranks(_load_then_continue, load_world, dtype, ckpt, ref)


def _rank0_save_then_resume(rank, world, path):
    """Rank 0 alone saves ``full_state_dict()`` (every rank gathers); a fresh optimizer on
    other weights loads that file on every rank and continues as the uninterrupted run."""
    dtype = torch.float32
    model = _fsdp2(dtype)
    opt = _optimizer(model)
    for step in range(SAVE_AT):
        _step(model, opt, step, dtype)
    full = opt.full_state_dict()
    assert not any(isinstance(t, DTensor) for t in full["fp32_params"].values())
    if rank == 0:
        torch.save(full, path)
    dist.barrier()
    snapshot = _snapshot(opt)
    norms = [_step(model, opt, step, dtype) for step in range(SAVE_AT, TOTAL)]
    final = {n: m.full_tensor() for n, m in zip(opt.param_names, opt.fp32_params)}

    resumed_model = _fsdp2(dtype, seed=1)
    resumed = _optimizer(resumed_model)
    resumed.load_state_dict(torch.load(path, weights_only=True))
    for name, got in _snapshot(resumed).items():
        for key, value in got.items():
            assert torch.equal(value, snapshot[name][key]), (name, key)
    # the same ranks, batches and order of sums: the continued run is bitwise the same
    again = [_step(resumed_model, resumed, step, dtype) for step in range(SAVE_AT, TOTAL)]
    assert again == norms
    for name, m in zip(resumed.param_names, resumed.fp32_params):
        assert torch.equal(m.full_tensor(), final[name]), name


@pytest.mark.slow
def test_a_full_state_saved_by_rank_0_resumes_every_rank(tmp_path):
    run_ranks(_rank0_save_then_resume, 2, str(tmp_path / "optim.pt"))


class ReorderedNet(TinyNet):
    """TinyNet's parameters under the same names, registered in another order."""

    def __init__(self):
        nn.Module.__init__(self)
        self.head = nn.Linear(12, 5)
        self.blocks = nn.ModuleList(Block(12, 17) for _ in range(2))
        self.embed = nn.Linear(7, 12)


def test_state_is_keyed_by_name_not_position():
    model = make_model(torch.bfloat16)
    opt = fsdp2_port.BF16Optimizer(model, LR)
    for step in range(2):
        loss_fn(model, *global_batch(step, dtype=torch.bfloat16)).backward()
        opt.step()
    saved = opt.state_dict()
    other = ReorderedNet().to(torch.bfloat16)
    assert [n for n, _ in other.named_parameters()] != [n for n, _ in model.named_parameters()]
    loaded = fsdp2_port.BF16Optimizer(other, LR)
    loaded.load_state_dict(saved)
    by_name = dict(zip(loaded.param_names, loaded.fp32_params))
    for name, m in zip(opt.param_names, opt.fp32_params):
        assert torch.equal(by_name[name], m)
        assert torch.equal(
            loaded.optimizer.state[by_name[name]]["exp_avg"], opt.optimizer.state[m]["exp_avg"]
        )
    assert torch.equal(other.head.weight, model.head.weight)


def test_checkpoints_without_or_with_wrong_masters_are_refused():
    model = make_model(torch.bfloat16)
    saved = fsdp2_port.BF16Optimizer(model, LR).state_dict()
    fresh = fsdp2_port.BF16Optimizer(make_model(torch.bfloat16), LR)
    without = {**saved, "fp32_params": {}}
    with pytest.raises(KeyError, match="missing"):
        fresh.load_state_dict(without)
    wrong = {**saved, "fp32_params": {**saved["fp32_params"], "head.bias": torch.zeros(3)}}
    with pytest.raises(ValueError, match=r"head\.bias"):
        fresh.load_state_dict(wrong)
    # SpecForge's positional form loads by named_parameters() order (test_resume_old_checkpoints)
    # when its masters are whole tensors of this model; other counts or shapes are refused.
    positional = compat.BF16Optimizer(make_model(torch.bfloat16), LR).state_dict()
    fewer = {**positional, "fp32_params": positional["fp32_params"][:-1]}
    with pytest.raises(ValueError, match="positional masters"):
        fresh.load_state_dict(fewer)
    pieces = {**positional, "fp32_params": [m.flatten()[:1] for m in positional["fp32_params"]]}
    with pytest.raises(ValueError, match="convert-checkpoint"):
        fresh.load_state_dict(pieces)


def test_fresh_state_dict_allocates_moments_without_counting_a_step():
    """DCP loads into the tensors state_dict() returns: they must exist before any step."""
    model = make_model(torch.bfloat16)
    opt = fsdp2_port.BF16Optimizer(model, LR)
    masters = [m.detach().clone() for m in opt.fp32_params]
    state = opt.state_dict()["optimizer_state_dict"]["state"]
    assert set(state) == set(opt.param_names)
    assert all(s["step"].item() == 0 and not s["exp_avg"].any() for s in state.values())
    assert all(torch.equal(a, b) for a, b in zip(masters, opt.fp32_params))
    twin = make_model(torch.bfloat16)
    twin_opt = fsdp2_port.BF16Optimizer(twin, LR)
    for o, m in ((opt, model), (twin_opt, twin)):
        loss_fn(m, *global_batch(0, dtype=torch.bfloat16)).backward()
        o.step()
    assert all(torch.equal(a, b) for a, b in zip(opt.fp32_params, twin_opt.fp32_params))


# -- FSDP1 + compat and FSDP2 + fsdp2_port train the same ------------------------------------


def _fsdp1_and_fsdp2_agree(rank, world):
    v1 = FSDP(
        make_model(),
        device_id=torch.device("cpu"),
        use_orig_params=True,
        auto_wrap_policy=ModuleWrapPolicy({Block}),
    )
    v2 = _fsdp2(torch.float32)
    opt1 = compat.BF16Optimizer(v1, LR, max_grad_norm=MAX_NORM, total_steps=100, warmup_ratio=0.1)
    opt2 = _optimizer(v2)
    for step in range(5):
        x, y = global_batch(step)
        xs, ys = local_rows(x, rank, world), local_rows(y, rank, world)
        losses = [loss_fn(m, xs, ys) for m in (v1, v2)]
        for loss in losses:
            loss.backward()
        n1, n2 = opt1.step(), opt2.step()
        assert n1 > MAX_NORM
        assert math.isclose(n1.item(), n2.item(), rel_tol=1e-5), (step, n1, n2)
        assert math.isclose(losses[0].item(), losses[1].item(), rel_tol=1e-5), (step, losses)


@pytest.mark.slow
def test_fsdp1_compat_and_fsdp2_native_give_the_same_norms_and_losses():
    run_ranks(_fsdp1_and_fsdp2_agree, 2)
