"""compat on FSDP1, gloo ranks on the CPU, against a single-process replica on the global batch.

Tolerances. fp32: FSDP1 averages per-rank gradients in a different order than the replica's
one big batch, so gradients differ by a few fp32 ulps; the norm's relative error stays
below 1e-5, and Adam's normalised updates keep the parameters within 1e-5 absolute after
a few steps of lr 1e-2. bf16: every gradient is rounded to 8 bits once in backward and once
more in FSDP1's bf16 reduce-scatter, so norms agree to about 2^-8 relative (we allow 1e-2),
and the bf16 parameters to within one bf16 ulp of lr-sized updates (we allow 2e-2 absolute).
"""

import copy
import math

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import ShardingStrategy
from torch.distributed.fsdp.wrap import ModuleWrapPolicy
from torch.distributed.tensor.debug import CommDebugMode
from torch.nn.parallel import DistributedDataParallel as DDP

from fsdp2_port import compat
from fsdp2_port.prove.launch import run_ranks
from tests.models import Block, global_batch, local_rows, loss_fn, make_model
from tests.reference import SpecForgeLoop

pytestmark = pytest.mark.slow  # gloo ranks

CPU = torch.device("cpu")
LR, MAX_NORM, STEPS = 1e-2, 1.0, 4
TOL = {  # dtype -> (norm rtol, parameter atol), justified in the module docstring
    "float32": (1e-5, 1e-5),
    "bfloat16": (1e-2, 2e-2),
}


def _wrap(model, strategy, use_orig_params, mesh=None, **kwargs):
    return FSDP(
        model,
        device_id=CPU,
        sharding_strategy=ShardingStrategy[strategy],
        use_orig_params=use_orig_params,
        auto_wrap_policy=ModuleWrapPolicy({Block}),
        device_mesh=mesh,
        **kwargs,
    )


def _all_equal(t: torch.Tensor) -> bool:
    gathered = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, t)
    return all(torch.equal(g, t) for g in gathered)


def _full_params(fsdp_model):
    with FSDP.summon_full_params(fsdp_model):
        return {
            n.replace("_fsdp_wrapped_module.", ""): p.detach().float().clone()
            for n, p in fsdp_model.named_parameters()
        }


def _train_against_replica(rank, world, model, opt, dtype, steps=STEPS, before_step=None):
    """Train ``model`` (distributed) and a replica side by side; check norms every step."""
    replica = make_model(dtype)
    ref = SpecForgeLoop(replica.parameters(), LR, MAX_NORM)
    rtol, _ = TOL[str(dtype).removeprefix("torch.")]
    for step in range(steps):
        x, y = global_batch(step, dtype=dtype)
        loss_fn(model, local_rows(x, rank, world), local_rows(y, rank, world)).backward()
        if before_step is not None:
            before_step(model)
        norm = opt.step()
        loss_fn(replica, x, y).backward()
        want = ref.step()
        assert norm.dtype == torch.float32 and not hasattr(norm, "placements")
        assert _all_equal(norm), f"step {step}: ranks disagree on the norm"
        assert want > MAX_NORM, "clipping must fire for the test to mean anything"
        assert math.isclose(norm.item(), want.item(), rel_tol=rtol), (step, norm, want)
    return replica


def _assert_params_match(full, replica, dtype):
    _, atol = TOL[str(dtype).removeprefix("torch.")]
    for name, p in replica.named_parameters():
        diff = (full[name] - p.detach().float()).abs().max().item()
        assert diff <= atol, f"{name}: max |diff| {diff} > {atol}"


# -- FULL_SHARD and SHARD_GRAD_OP on 2 ranks ---------------------------------------------------


def _sharded_matches_replica(rank, world, strategy, use_orig_params, dtype_name, inner):
    dtype = getattr(torch, dtype_name)
    fsdp = _wrap(make_model(dtype), strategy, use_orig_params)
    target = fsdp.module if inner else fsdp  # SpecForge hands the optimizer an inner module
    opt = compat.BF16Optimizer(
        target, LR, max_grad_norm=MAX_NORM, total_steps=100, warmup_ratio=0.0
    )
    replica = _train_against_replica(rank, world, fsdp, opt, dtype)
    _assert_params_match(_full_params(fsdp), replica, dtype)
    for p, m in zip(opt.model_params, opt.fp32_params):
        assert torch.equal(p, m.to(p.dtype))


# Every pair of the three choices once (4 runs, not the 8 of every triple: the suite's CPU
# time is what keeps CI under its limit); FULL_SHARD with use_orig_params also hands the
# optimizer the inner module (SpecForge's), in fp32.
@pytest.mark.parametrize(
    "strategy,use_orig_params,dtype",
    [
        ("FULL_SHARD", True, "float32"),
        ("FULL_SHARD", False, "bfloat16"),
        ("SHARD_GRAD_OP", True, "bfloat16"),
        ("SHARD_GRAD_OP", False, "float32"),
    ],
)
def test_sharded_strategies_match_the_replica(strategy, use_orig_params, dtype):
    inner = use_orig_params and strategy == "FULL_SHARD"
    run_ranks(_sharded_matches_replica, 2, strategy, use_orig_params, dtype, inner)


# -- HYBRID_SHARD on 4 ranks: replicas of a shard count once ------------------------------------


def _hybrid_matches_replica(rank, world, strategy):
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))
    fsdp = _wrap(make_model(), strategy, True, mesh)
    opt = compat.BF16Optimizer(fsdp, LR, max_grad_norm=MAX_NORM, total_steps=100, warmup_ratio=0.0)
    assert opt._copies == [2] * len(opt._copies)  # each shard lives on both replicas
    replica = _train_against_replica(rank, world, fsdp, opt, torch.float32)
    _assert_params_match(_full_params(fsdp), replica, torch.float32)


@pytest.mark.parametrize("strategy", ["HYBRID_SHARD", "_HYBRID_SHARD_ZERO2"])
def test_hybrid_shard_counts_replicas_once(strategy):
    run_ranks(_hybrid_matches_replica, 4, strategy)


# -- whole tensors: NO_SHARD, ignored modules, an unwrapped (DDP) model -------------------------


def _average_grads(module):
    for p in module.parameters():
        dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)


def _whole_tensors_count_once(rank, world, layout):
    model = make_model()
    before_step = None
    if layout == "NO_SHARD":
        wrapped = _wrap(model, "NO_SHARD", True)
    elif layout == "ignored":  # FSDP1 leaves ignored modules' grads unreduced: the user syncs
        wrapped = _wrap(model, "FULL_SHARD", True, ignored_modules=[model.head])
        before_step = lambda m: _average_grads(m.module.head)  # noqa: E731
    else:
        wrapped = DDP(model)
    opt = compat.BF16Optimizer(
        wrapped, LR, max_grad_norm=MAX_NORM, total_steps=100, warmup_ratio=0.0
    )
    _train_against_replica(rank, world, wrapped, opt, torch.float32, before_step=before_step)


@pytest.mark.parametrize("layout", ["NO_SHARD", "ignored", "unwrapped"])
def test_whole_tensors_are_not_over_counted(layout):
    run_ranks(_whole_tensors_count_once, 2, layout)


# -- a rank with no gradient at all -------------------------------------------------------------


def _empty_shard(rank, world, use_orig_params):
    torch.manual_seed(0)
    model = nn.Linear(1, 1, bias=False)  # one element: rank 1 holds only padding
    replica = copy.deepcopy(model)
    fsdp = FSDP(model, device_id=CPU, use_orig_params=use_orig_params)
    opt = compat.BF16Optimizer(fsdp, LR, max_grad_norm=MAX_NORM, total_steps=100, warmup_ratio=0.0)
    ref = SpecForgeLoop(replica.parameters(), LR, MAX_NORM)
    x = torch.full((2, 1), 3.0)
    (fsdp(x[rank : rank + 1]) * 100).sum().backward()
    if rank == 1 and use_orig_params:
        assert opt.model_params[0].numel() == 0 and opt.model_params[0].grad is None
    norm = opt.step()
    (replica(x) * 50).sum().backward()  # the mean over ranks of the per-rank losses
    want = ref.step()
    assert math.isclose(norm.item(), want.item(), rel_tol=1e-6), (norm, want)


@pytest.mark.parametrize("use_orig_params", [True, False])
def test_rank_without_gradient_joins_and_gets_the_norm(use_orig_params):
    run_ranks(_empty_shard, 2, use_orig_params, timeout=60)


# -- one collective -----------------------------------------------------------------------------


def _one_collective(rank, world):
    fsdp = _wrap(make_model(torch.bfloat16), "FULL_SHARD", True)
    opt = compat.BF16Optimizer(fsdp, LR, max_grad_norm=MAX_NORM)
    x, y = global_batch(0, dtype=torch.bfloat16)
    loss_fn(fsdp, local_rows(x, rank, world), local_rows(y, rank, world)).backward()
    with CommDebugMode() as comm:
        opt.step()
    assert comm.get_total_counts() == 1, comm.get_comm_counts()
    x, y = global_batch(1, dtype=torch.bfloat16)
    loss_fn(fsdp, local_rows(x, rank, world), local_rows(y, rank, world)).backward()
    with CommDebugMode() as comm:
        compat.clip_grad_norm_(fsdp, MAX_NORM)
    assert comm.get_total_counts() == 1, comm.get_comm_counts()
    # An explicit group spanning the same ranks: still one collective, the same norm.
    opt.zero_grad()
    loss_fn(fsdp, local_rows(x, rank, world), local_rows(y, rank, world)).backward()
    want = compat.clip_grad_norm_(fsdp, math.inf)  # a coefficient of 1: grads unchanged
    opt.configure_grad_norm_reduction(process_group=dist.new_group(list(range(world))))
    with CommDebugMode() as comm:
        got = opt.step()
    assert comm.get_total_counts() == 1 and torch.equal(got, want), (got, want)


def test_exactly_one_collective_per_step():
    run_ranks(_one_collective, 2)


# -- non-finite gradients on one rank -----------------------------------------------------------


def _nonfinite_on_one_rank(rank, world, policy):
    fsdp = _wrap(make_model(), "FULL_SHARD", True)
    opt = compat.BF16Optimizer(fsdp, LR, max_grad_norm=MAX_NORM, nonfinite=policy)
    x, y = global_batch(0)
    loss_fn(fsdp, local_rows(x, rank, world), local_rows(y, rank, world)).backward()
    opt.step()
    masters = [m.detach().clone() for m in opt.fp32_params]
    moments = {
        i: opt.optimizer.state[m]["exp_avg_sq"].clone()
        for i, m in enumerate(opt.fp32_params)
        if m in opt.optimizer.state
    }
    lr = opt.get_learning_rate()
    x, y = global_batch(1)
    loss_fn(fsdp, local_rows(x, rank, world), local_rows(y, rank, world)).backward()
    if rank == 0:
        next(p for p in opt.model_params if p.grad is not None).grad.view(-1)[0] = math.inf
    if policy == "raise":
        with pytest.raises(RuntimeError, match="nonfinite='raise'"):
            opt.step()
        return
    with pytest.warns(UserWarning, match="skipping"):
        norm = opt.step()
    assert not math.isfinite(norm.item()) and opt.skipped_steps == 1
    assert all(torch.equal(a, b) for a, b in zip(masters, opt.fp32_params))
    for i, m in enumerate(opt.fp32_params):
        if i in moments:
            assert torch.equal(moments[i], opt.optimizer.state[m]["exp_avg_sq"])
            assert opt.optimizer.state[m]["step"].item() == 1
    assert opt.get_learning_rate() == lr
    full = _full_params(fsdp)
    assert all(torch.isfinite(p).all() for p in full.values())
    # grads were cleared: the next step trains normally
    loss_fn(fsdp, local_rows(x, rank, world), local_rows(y, rank, world)).backward()
    assert math.isfinite(opt.step().item())


@pytest.mark.parametrize("policy", ["skip", "raise"])
def test_inf_on_one_rank_is_decided_the_same_everywhere(policy):
    run_ranks(_nonfinite_on_one_rank, 2, policy)


# -- the rank-local clip: each shard clipped by its own norm --------------------------------------


def _old_local_clip_differs(rank, world):
    fsdp_fixed = _wrap(make_model(), "FULL_SHARD", True)
    fsdp_old = _wrap(make_model(), "FULL_SHARD", True)
    fixed = compat.BF16Optimizer(
        fsdp_fixed, LR, max_grad_norm=MAX_NORM, total_steps=100, warmup_ratio=0.0
    )
    old = SpecForgeLoop(fsdp_old.parameters(), LR, MAX_NORM)  # per-rank clip of the local shard
    replica = make_model()
    ref = SpecForgeLoop(replica.parameters(), LR, MAX_NORM)
    for step in range(STEPS):
        x, y = global_batch(step)
        for m in (fsdp_fixed, fsdp_old):
            loss_fn(m, local_rows(x, rank, world), local_rows(y, rank, world)).backward()
        norm, old_norm = fixed.step(), old.step()
        loss_fn(replica, x, y).backward()
        want = ref.step()
        assert math.isclose(norm.item(), want.item(), rel_tol=1e-5)
        assert old_norm < want * 0.95, "a shard's norm is below the global one"
    assert not _all_equal(old_norm), "and every rank sees a different one"
    _assert_params_match(_full_params(fsdp_fixed), replica, torch.float32)
    with pytest.raises(AssertionError):
        _assert_params_match(_full_params(fsdp_old), replica, torch.float32)


def test_the_old_rank_local_clip_gives_a_different_update():
    run_ranks(_old_local_clip_differs, 2)


# -- fsdp2_port.compat.clip_grad_norm_ against FSDP1's own -----------------------------------------


def _clip_like_fsdp1(rank, world, strategy, dtype_name):
    dtype = getattr(torch, dtype_name)
    ours_model = _wrap(make_model(dtype), strategy, False)
    theirs_model = _wrap(make_model(dtype), strategy, False)
    x, y = global_batch(0, dtype=dtype)
    for m in (ours_model, theirs_model):
        loss_fn(m, local_rows(x, rank, world), local_rows(y, rank, world)).backward()
    ours = compat.clip_grad_norm_(ours_model, MAX_NORM)
    theirs = theirs_model.clip_grad_norm_(MAX_NORM)
    assert ours.dtype == torch.float32 and theirs.dtype == dtype
    # fp32: only the summation order differs. bf16: theirs is a bf16 norm (8-bit mantissa,
    # 2^-8 relative); the clipped bf16 grads then round once more: one bf16 ulp, 2^-7.
    norm_rtol, grad_rtol = (1e-6, 1e-6) if dtype == torch.float32 else (2**-8, 2**-7)
    assert math.isclose(ours.item(), theirs.item(), rel_tol=norm_rtol), (ours, theirs)
    for a, b in zip(ours_model.parameters(), theirs_model.parameters()):
        torch.testing.assert_close(a.grad, b.grad, rtol=grad_rtol, atol=0)


@pytest.mark.parametrize(
    "strategy,dtype", [("FULL_SHARD", "float32"), ("SHARD_GRAD_OP", "bfloat16")]
)
def test_compat_clip_matches_fsdp1_with_an_fp32_result(strategy, dtype):
    run_ranks(_clip_like_fsdp1, 2, strategy, dtype)
