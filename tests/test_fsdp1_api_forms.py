"""The receiver-agnostic forms of FSDP1's clip, summon_full_params, fsdp_modules, the legacy
optimizer-state functions and ``unwrapped``: FSDP1's own result on FSDP1, FSDP1's result on
FSDP2 (same model, seed and batch), torch's or the plain answer on DDP and plain modules.

One model (``tests.models.TinyNet``), wrapped as FSDP1 (``ModuleWrapPolicy`` on the blocks,
``use_orig_params=True``), FSDP2 (``fully_shard`` on the blocks, then the root) and DDP on 2
gloo ranks, in two spawns; a plain module in one process. Independent references: a second
FSDP1 model calling FSDP1 directly, and a single-process model on the whole batch.

Tolerances. On 2 ranks FSDP1 and FSDP2 reduce gradients with the same arithmetic (a sum of two
addends has no order; both divide by 2, exactly), so the full gradients, the moments of one
AdamW step and gathered parameters agree bit for bit. The gradient norm does not: FSDP1 takes
per-tensor norms, the norm of those, squares it and all-reduces; ``fsdp2_port`` sums squares
per rank and all-reduces. Both sums are blocked (pairwise) in torch's CPU kernels, so each is
within about log2(N)·u of the exact value (N ≈ 1100 elements, u = 6e-8: 7e-7), plus a handful
of roundings in the squares, the roots and the cross-rank sum: ``NORM_RTOL`` = 4e-6 bounds
the two norms' difference and so that of the clip coefficients and clipped gradients
(observed here: equal bit for bit). Against the single-process model the gradients themselves
differ (a mean of 8 rows against the mean of two means of 4): ``REF_RTOL`` = 1e-5.

torch 2.13: FSDP1's ``full_optim_state_dict`` (always offloaded) with ``use_orig_params=True``
returns ``exp_avg`` and ``exp_avg_sq`` as views of one buffer (equal, both wrong): the values
FSDP2 must match are read with FSDP1's ``optim_state_dict`` without offloading.
"""

import inspect
import warnings

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import (
    FullOptimStateDictConfig,
    FullStateDictConfig,
    FullyShardedDataParallel,
    StateDictType,
    fully_shard,
)
from torch.distributed.fsdp.wrap import ModuleWrapPolicy
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel

import fsdp2_port
from fsdp2_port.fsdp1 import fsdp1_api
from fsdp2_port.prove.launch import run_ranks
from tests.models import Block, TinyNet, global_batch, local_rows, loss_fn, make_model

FSDP = FullyShardedDataParallel
CPU = torch.device("cpu")
NORM_RTOL = 4e-6  # FSDP1's norm against fsdp2_port's on the same gradients: see above
REF_RTOL = 1e-5  # against one process on the whole batch: see above
MAX_NORM = 1.0  # the norms here are ~170: the clip fires
TIMEOUT = 120
NAMES = [name for name, _ in make_model().named_parameters()]


def _fsdp1() -> FSDP:
    return FSDP(
        make_model(),
        device_id=CPU,
        use_orig_params=True,
        auto_wrap_policy=ModuleWrapPolicy({Block}),
    )


def _fsdp2(world: int, root: bool = True) -> TinyNet:
    model, mesh = make_model(), init_device_mesh("cpu", (world,))
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    if root:
        fully_shard(model, mesh=mesh)
    return model


def _backward(model, rank, world) -> None:
    x, y = global_batch(0)
    loss_fn(model, local_rows(x, rank, world), local_rows(y, rank, world)).backward()


def _reference() -> TinyNet:
    """One process, the whole batch: what the ranks together compute."""
    model = make_model()
    loss_fn(model, *global_batch(0)).backward()
    return model


def _fsdp1_full(model, grads=False) -> dict:
    """FSDP1's full parameters (or gradients), read with FSDP1's own context."""
    with FSDP.summon_full_params(model, writeback=False, with_grads=grads):
        return {
            name.replace("_fsdp_wrapped_module.", ""): (p.grad if grads else p).detach().clone()
            for name, p in model.named_parameters()
        }


def _fsdp2_full(model, grads=False) -> dict:
    """FSDP2's full parameters (or gradients), gathered with DTensor's own ``full_tensor``."""
    return {name: (p.grad if grads else p).full_tensor() for name, p in model.named_parameters()}


def _close(got: dict, want: dict, rtol: float = 0.0) -> None:
    assert list(got) == list(want)
    for key, value in want.items():
        assert type(got[key]) is not DTensor, key
        if rtol == 0.0:
            assert torch.equal(got[key], value), key
        else:
            torch.testing.assert_close(got[key], value, rtol=rtol, atol=0.0, msg=key)


# -- clip, summon_full_params, fsdp_modules, unwrapped ------------------------------------------


def _clip_and_full_params(rank, world):
    warnings.simplefilter("ignore", FutureWarning)
    ref = _reference()
    want_norm = torch.nn.utils.clip_grad_norm_(ref.parameters(), MAX_NORM)
    f1, f1_own, m2 = _fsdp1(), _fsdp1(), _fsdp2(world)
    for model in (f1, f1_own, m2):
        _backward(model, rank, world)
    # Gathered before the clip, FSDP1's and FSDP2's gradients are the same bits.
    _close(_fsdp2_full(m2, grads=True), _fsdp1_full(f1, grads=True))

    # module_clip_grad_norm_: FSDP1 -> its own method, bitwise; FSDP2 -> the global norm.
    norm1 = fsdp2_port.module_clip_grad_norm_(f1, MAX_NORM)
    own = f1_own.clip_grad_norm_(MAX_NORM)
    assert norm1.dtype == own.dtype == torch.float32 and torch.equal(norm1, own)
    _close(_fsdp1_full(f1, grads=True), _fsdp1_full(f1_own, grads=True))
    norm2 = fsdp2_port.module_clip_grad_norm_(m2, MAX_NORM)
    assert type(norm2) is torch.Tensor and norm2.dtype == torch.float32
    torch.testing.assert_close(norm2, norm1, rtol=NORM_RTOL, atol=0.0)
    torch.testing.assert_close(norm2, want_norm, rtol=REF_RTOL, atol=0.0)
    assert norm2 > 100 * MAX_NORM  # a rank's own shard would give about norm / sqrt(2)
    clipped = _fsdp1_full(f1, grads=True)
    _close(_fsdp2_full(m2, grads=True), clipped, NORM_RTOL)
    _close(_fsdp2_full(m2, grads=True), {n: p.grad for n, p in ref.named_parameters()}, REF_RTOL)
    # FSDP2 only inside (no root unit): the blocks' DTensors and the root's plain parameters,
    # whose gradients the caller averages (nothing else does): replicated, counted once.
    inner, inner_ref = _fsdp2(world, root=False), _fsdp2(world, root=False)
    for model in (inner, inner_ref):
        _backward(model, rank, world)
        for p in model.parameters():
            if not isinstance(p, DTensor):
                dist.all_reduce(p.grad)
                p.grad /= world
    got = fsdp2_port.module_clip_grad_norm_(inner, MAX_NORM)
    torch.testing.assert_close(got, norm1, rtol=NORM_RTOL, atol=0.0)
    assert torch.equal(got, fsdp2_port.clip_grad_norm_(inner_ref.parameters(), MAX_NORM))
    # DDP: torch's clip on the (all-reduced) local gradients, bitwise.
    ddp, ddp_ref = DistributedDataParallel(make_model()), DistributedDataParallel(make_model())
    _backward(ddp, rank, world)
    _backward(ddp_ref, rank, world)
    got = fsdp2_port.module_clip_grad_norm_(ddp, MAX_NORM)
    assert torch.equal(got, torch.nn.utils.clip_grad_norm_(ddp_ref.parameters(), MAX_NORM))
    torch.testing.assert_close(got, want_norm, rtol=REF_RTOL, atol=0.0)
    for p, q in zip(ddp.parameters(), ddp_ref.parameters()):
        assert torch.equal(p.grad, q.grad)
    with pytest.raises(ValueError, match="module: ModuleList holds FSDP1 instances"):
        fsdp2_port.module_clip_grad_norm_(f1.blocks, MAX_NORM)

    # summon_full_params: full parameters in the block, FSDP1's values (the initial model).
    init = dict(make_model().named_parameters())
    with fsdp2_port.summon_full_params(f1, writeback=False):
        _close({n.replace("_fsdp_wrapped_module.", ""): p for n, p in f1.named_parameters()}, init)
    before = {n: p for n, p in m2.named_parameters()}
    with fsdp2_port.summon_full_params(m2, writeback=False, with_grads=True):
        inside = dict(m2.named_parameters())
        assert all(type(p) is nn.Parameter for p in inside.values())
        _close(inside, init)  # full, bitwise
        _close({n: p.grad for n, p in inside.items()}, clipped, NORM_RTOL)
        with torch.no_grad():
            for p in inside.values():
                p.mul_(3.0)  # discarded: writeback=False
    after = dict(m2.named_parameters())
    assert all(after[n] is before[n] for n in before)  # the same DTensors, registered again
    _close(_fsdp2_full(m2), init)
    # writeback: the same change on both, then FSDP1's and FSDP2's parameters are equal.
    for model in (f1, m2):
        with fsdp2_port.summon_full_params(model), torch.no_grad():
            for p in model.parameters():
                p.mul_(2.0).add_(1.0)
    _close(_fsdp2_full(m2), _fsdp1_full(f1))
    _close(_fsdp2_full(m2), {n: p * 2.0 + 1.0 for n, p in init.items()})
    # Each rank keeps its own slice of its own full tensor, as FSDP1 does with its flat shard.
    local = {n: p.to_local().clone() for n, p in m2.named_parameters()}
    with fsdp2_port.summon_full_params(m2, with_grads=True), torch.no_grad():
        for p in m2.parameters():
            p.add_(float(rank + 1))
            p.grad.zero_()
    for name, p in m2.named_parameters():
        assert torch.equal(p.to_local(), local[name] + (rank + 1)), name
        assert not p.grad.to_local().any(), name
    with pytest.raises(KeyError), fsdp2_port.summon_full_params(m2):
        raise KeyError("a failing block")
    assert all(isinstance(p, DTensor) for p in m2.parameters())
    # recurse=False: the unit's own parameters only (FSDP1: the root's flat parameter).
    with fsdp2_port.summon_full_params(m2, recurse=False, writeback=False):
        full = {n for n, p in m2.named_parameters() if not isinstance(p, DTensor)}
        assert full == {n for n in NAMES if not n.startswith("blocks.")}
    with fsdp2_port.summon_full_params(m2.blocks[1], recurse=False, writeback=False):
        full = {n for n, p in m2.named_parameters() if not isinstance(p, DTensor)}
        assert full == {n for n in NAMES if n.startswith("blocks.1.")}
    with fsdp2_port.summon_full_params(m2.blocks, recurse=False, writeback=False):
        assert all(isinstance(p, DTensor) for p in m2.parameters())  # not a unit: as FSDP1
    # A forward (generate()'s loop) inside summon_full_params(recurse=False, writeback=False):
    # FSDP1 and FSDP2 give the one-process model's output bit for bit (the same full weights,
    # the same rows), also as an FSDP2 model's first forward; the models train on afterwards.
    x = local_rows(global_batch(1)[0], rank, world)
    with torch.no_grad():
        want_out = make_model()(x)
    used = _fsdp2(world)
    used(x)
    for model in (_fsdp1(), _fsdp2(world), used):
        with torch.no_grad(), fsdp2_port.summon_full_params(model, recurse=False, writeback=False):
            outs = [model(x) for _ in range(3)]
        assert all(torch.equal(out, want_out) for out in outs), type(model).__name__
        with torch.no_grad():
            assert torch.equal(model(x), want_out)
        _backward(model, rank, world)
        if isinstance(model, FSDP):
            continue
        assert all(isinstance(p, DTensor) and p.grad is not None for p in model.parameters())
    # rank0_only: rank 0 sees full tensors, the other ranks their shards (FSDP1 likewise).
    with FSDP.summon_full_params(f1, rank0_only=True, writeback=False):
        shapes1 = [tuple(p.shape) for p in f1.parameters()]
    with fsdp2_port.summon_full_params(m2, rank0_only=True, writeback=False, offload_to_cpu=True):
        if rank == 0:
            assert [tuple(p.shape) for p in m2.parameters()] == shapes1
            assert all(type(p) is nn.Parameter and p.device == CPU for p in m2.parameters())
        else:
            assert all(isinstance(p, DTensor) for p in m2.parameters())
    with pytest.raises(ValueError, match="rank0_only=True with writeback=True"):
        fsdp2_port.summon_full_params(m2, rank0_only=True)
    with pytest.raises(ValueError, match="with_grads=True with offload_to_cpu=True"):
        fsdp2_port.summon_full_params(m2, offload_to_cpu=True, with_grads=True)
    # DDP: already full, nothing changes.
    ddp_params = list(ddp.parameters())
    with fsdp2_port.summon_full_params(ddp):
        assert all(p is q for p, q in zip(ddp.parameters(), ddp_params))

    # fsdp_modules: FSDP1's own; FSDP2's units in modules() order; DDP none.
    for root_only in (False, True):
        got1 = fsdp2_port.fsdp_modules(f1, root_only=root_only)
        assert got1 == FSDP.fsdp_modules(f1, root_only=root_only)
    units = [m2, m2.blocks[0], m2.blocks[1]]
    assert fsdp2_port.fsdp_modules(m2) == units
    assert fsdp2_port.fsdp_modules(m2, root_only=True) == [m2]
    assert fsdp2_port.fsdp_modules(m2.blocks, root_only=True) == units[1:]
    assert fsdp2_port.fsdp_modules(inner) == fsdp2_port.fsdp_modules(inner, True) == [*inner.blocks]
    assert fsdp2_port.fsdp_modules(ddp) == []

    # unwrapped: an FSDP2 module is itself, also when it has a `module` attribute.
    holder = nn.Module()
    holder.module = make_model()
    fully_shard(holder, mesh=init_device_mesh("cpu", (world,)))
    assert fsdp2_port.unwrapped(holder) is holder
    assert fsdp2_port.unwrapped(ddp) is ddp.module and fsdp2_port.unwrapped(f1) is f1.module
    # fsdp_wrapped_module: FSDP1's attribute itself; an FSDP2 module is itself.
    assert fsdp2_port.fsdp_wrapped_module(f1) is f1._fsdp_wrapped_module
    assert fsdp2_port.fsdp_wrapped_module(holder) is holder
    with pytest.raises(AttributeError):
        fsdp2_port.fsdp_wrapped_module(ddp)


@pytest.mark.slow
def test_clip_summon_fsdp_modules_match_fsdp1():
    run_ranks(_clip_and_full_params, 2, timeout=TIMEOUT)


# -- the legacy optimizer-state functions -------------------------------------------------------


def _step(model, rank, world) -> torch.optim.AdamW:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    _backward(model, rank, world)
    opt.step()
    opt.zero_grad()
    return opt


def _assert_osd(got: dict, want: dict) -> None:
    """Same names, groups and state, bitwise, full tensors (see the module docstring)."""
    assert got["param_groups"] == want["param_groups"]
    assert sorted(got["state"]) == sorted(want["state"])
    for name, entry in want["state"].items():
        assert sorted(got["state"][name]) == sorted(entry), name
        for key, value in entry.items():
            assert type(got["state"][name][key]) is torch.Tensor, (name, key)
            assert torch.equal(got["state"][name][key], value), (name, key)


def _local_state(opt) -> list:
    def local(t):
        return t.to_local() if isinstance(t, DTensor) else t

    return [
        (p_id, key, local(value))
        for p_id, state in sorted(opt.state_dict()["state"].items())
        for key, value in sorted(state.items())
    ]


def _assert_local_equal(a, b) -> None:
    a, b = _local_state(a), _local_state(b)
    assert [k[:2] for k in a] == [k[:2] for k in b]
    for (p_id, key, x), (_, _, y) in zip(a, b):
        assert torch.equal(x, y), (p_id, key)


def _by_id(osd: dict) -> dict:
    """``osd`` keyed as ``optim.state_dict()`` keys it: ids in param_groups order."""
    ids = {name: i for i, name in enumerate(osd["param_groups"][0]["params"])}
    return {
        "state": {ids[name]: value for name, value in osd["state"].items()},
        "param_groups": [
            {**g, "params": [ids[n] for n in g["params"]]} for g in osd["param_groups"]
        ],
    }


def _legacy_optimizer_state(rank, world):
    warnings.simplefilter("ignore", FutureWarning)  # FSDP1's legacy functions are deprecated
    f1, m2 = _fsdp1(), _fsdp2(world)
    o1, o2 = _step(f1, rank, world), _step(m2, rank, world)
    unoffloaded = FullOptimStateDictConfig(offload_to_cpu=False)  # see the module docstring
    with FSDP.state_dict_type(
        f1, StateDictType.FULL_STATE_DICT, FullStateDictConfig(), unoffloaded
    ):
        want = FSDP.optim_state_dict(f1, o1)  # FSDP1's values, every rank, by name
    assert list(want["param_groups"][0]["params"]) == NAMES

    # FSDP1: FSDP1's own functions (their outputs compared as FSDP1 returns them).
    ours = fsdp2_port.full_optim_state_dict(f1, o1, rank0_only=False)
    theirs = FSDP.full_optim_state_dict(f1, o1, rank0_only=False)
    assert (
        ours["param_groups"] == theirs["param_groups"]
        and ours["state"].keys() == theirs["state"].keys()
    )
    rank0 = fsdp2_port.full_optim_state_dict(f1, o1)  # rank0_only=True by default
    assert (rank0 == {}) if rank else (rank0["state"].keys() == want["state"].keys())
    sharded1 = fsdp2_port.sharded_optim_state_dict(f1, o1)
    assert sharded1["state"].keys() == want["state"].keys()
    assert type(sharded1["state"]["head.weight"]["exp_avg"]).__name__ == "ShardedTensor"
    scattered1 = fsdp2_port.scatter_full_optim_state_dict(want if rank == 0 else None, f1, optim=o1)
    _assert_osd_ids(
        scattered1, FSDP.scatter_full_optim_state_dict(want if rank == 0 else None, f1, optim=o1)
    )
    _assert_osd_ids(
        fsdp2_port.shard_full_optim_state_dict(want, f1, optim=o1),
        FSDP.shard_full_optim_state_dict(want, f1, optim=o1),
    )
    _assert_osd_ids(scattered1, o1.state_dict())  # FSDP1's own state comes back
    # Without the optimizer, as FSDP1 allows it: FSDP1's own functions, same result.
    no_optim1 = fsdp2_port.scatter_full_optim_state_dict(want if rank == 0 else None, f1)
    _assert_osd_ids(no_optim1, FSDP.scatter_full_optim_state_dict(want if rank == 0 else None, f1))
    _assert_osd_ids(no_optim1, o1.state_dict())
    _assert_osd_ids(
        fsdp2_port.shard_full_optim_state_dict(want, f1),
        FSDP.shard_full_optim_state_dict(want, f1),
    )

    # FSDP2: FSDP1's values, bitwise; rank 0 only by default, on the CPU.
    full = fsdp2_port.full_optim_state_dict(m2, o2)
    if rank == 0:
        _assert_osd(full, want)
        assert all(v.device == CPU for e in full["state"].values() for v in e.values())
    else:
        assert full == {}
    everywhere = fsdp2_port.full_optim_state_dict(m2, o2, rank0_only=False)
    _assert_osd(everywhere, want)
    sharded = fsdp2_port.sharded_optim_state_dict(m2, o2)
    assert isinstance(sharded["state"]["head.weight"]["exp_avg"], DTensor)
    _assert_osd(
        {
            "state": {
                n: {k: v.full_tensor() if isinstance(v, DTensor) else v for k, v in e.items()}
                for n, e in sharded["state"].items()
            },
            "param_groups": sharded["param_groups"],
        },
        want,
    )

    # Round trip on FSDP2: what full_optim_state_dict gave loads, with scatter (rank 0's dict)
    # or shard (every rank's), into a fresh optimizer, to o2's state bit for bit; the optimizer
    # passed is left as it was (FSDP1's result is only an input to optim.load_state_dict).
    for load in (
        lambda opt: fsdp2_port.scatter_full_optim_state_dict(
            full if rank == 0 else None, m2, optim=opt
        ),
        lambda opt: fsdp2_port.shard_full_optim_state_dict(everywhere, m2, optim=opt),
        lambda opt: fsdp2_port.shard_full_optim_state_dict(_by_id(everywhere), m2, optim=opt),
        lambda opt: fsdp2_port.scatter_full_optim_state_dict(
            want if rank == 0 else None, m2, None, opt
        ),
        # Without the optimizer (FSDP1's form): the input of one on model.parameters().
        lambda opt: fsdp2_port.scatter_full_optim_state_dict(full if rank == 0 else None, m2),
        lambda opt: fsdp2_port.shard_full_optim_state_dict(everywhere, m2),
        lambda opt: fsdp2_port.shard_full_optim_state_dict(_by_id(everywhere), m2),
    ):
        fresh = torch.optim.AdamW(m2.parameters(), lr=1e-2)
        result = load(fresh)
        assert not fresh.state
        fresh.load_state_dict(result)
        _assert_local_equal(fresh, o2)
        assert fresh.param_groups[0]["betas"] == o2.param_groups[0]["betas"] == (0.9, 0.999)
        _assert_osd(fsdp2_port.full_optim_state_dict(m2, fresh, rank0_only=False), want)
    # FSDP1's full dicts share one step tensor among the parameters (torch.save keeps that):
    # each loaded parameter gets its own, or every step would advance it once per parameter.
    step = torch.tensor(1.0)
    shared = {
        **everywhere,
        "state": {n: {**e, "step": step} for n, e in everywhere["state"].items()},
    }
    for optim in (True, False):
        fresh = torch.optim.AdamW(m2.parameters(), lr=1e-2)
        fresh.load_state_dict(
            fsdp2_port.shard_full_optim_state_dict(shared, m2, optim=fresh if optim else None)
        )
        steps = [state["step"] for state in fresh.state.values()]
        assert len({id(t) for t in steps}) == len(steps) == len(NAMES)
    odd = {"state": {"head.weight": {"exp_avg": torch.zeros(3)}}, "param_groups": []}
    with pytest.raises(ValueError, match=r"'exp_avg' of 'head.weight' has shape \(3,\)"):
        fsdp2_port.shard_full_optim_state_dict(odd, m2)
    with pytest.raises(ValueError, match="parameter 'nope' is not one of the model's"):
        fsdp2_port.shard_full_optim_state_dict({"state": {"nope": {}}}, m2)
    with pytest.raises(ValueError, match="optim_input"):
        fsdp2_port.full_optim_state_dict(m2, o2, optim_input=list(m2.parameters()))
    with pytest.raises(ValueError, match="optim_input"):
        fsdp2_port.shard_full_optim_state_dict(everywhere, m2, list(m2.parameters()), o2)

    # DDP: names without the wrapper's prefix, its optimizer's own tensors; a round trip.
    inner = make_model()
    ddp = DistributedDataParallel(inner)
    od = _step(ddp, rank, world)
    got = fsdp2_port.full_optim_state_dict(ddp, od, rank0_only=False)
    own = {name: od.state[p] for name, p in inner.named_parameters()}
    _assert_osd(got, {"state": own, "param_groups": got["param_groups"]})
    assert got["param_groups"][0]["params"] == NAMES
    for optim in (True, False):
        fresh = torch.optim.AdamW(ddp.parameters(), lr=1e-2)
        fresh.load_state_dict(
            fsdp2_port.scatter_full_optim_state_dict(
                got if rank == 0 else None, ddp, optim=fresh if optim else None
            )
        )
        _assert_local_equal(fresh, od)


def _assert_osd_ids(got: dict, want: dict) -> None:
    """Two ``optim.load_state_dict`` inputs (keyed by id): the same, bitwise."""
    assert got["param_groups"] == want["param_groups"]
    assert got["state"].keys() == want["state"].keys()
    for p_id, entry in want["state"].items():
        for key, value in entry.items():
            assert torch.equal(got["state"][p_id][key], value), (p_id, key)


@pytest.mark.slow
def test_legacy_optimizer_state_matches_fsdp1():
    run_ranks(_legacy_optimizer_state, 2, timeout=TIMEOUT)


# -- one process ---------------------------------------------------------------------------------

_FSDP1_STATIC = [
    "fsdp_modules",
    "summon_full_params",
    "full_optim_state_dict",
    "sharded_optim_state_dict",
    "scatter_full_optim_state_dict",
    "shard_full_optim_state_dict",
]


@pytest.mark.parametrize("name", _FSDP1_STATIC)
def test_signature_is_fsdp1s(name):
    """The codemod copies FSDP1's arguments verbatim, by position or by name."""

    def shape(fn):
        return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]

    assert isinstance(inspect.getattr_static(FSDP, name), staticmethod)
    assert shape(getattr(fsdp2_port, name)) == shape(getattr(FSDP, name))


def test_clip_signature_is_fsdp1_methods():
    def shape(fn):
        return [(p.name, p.default) for p in inspect.signature(fn).parameters.values()]

    assert shape(fsdp2_port.module_clip_grad_norm_) == [
        ("module", inspect.Parameter.empty),
        *shape(FSDP.clip_grad_norm_)[1:],
    ]


def test_exported_lazily_from_the_package():
    for name in [*_FSDP1_STATIC, "module_clip_grad_norm_", "unwrapped"]:
        assert getattr(fsdp2_port, name) is getattr(fsdp1_api, name)
        assert name in fsdp2_port.__all__ and name in fsdp1_api.__all__


def test_plain_modules():
    model, ref = _reference(), _reference()
    norm = fsdp2_port.module_clip_grad_norm_(model, MAX_NORM, 3.0)
    assert torch.equal(norm, torch.nn.utils.clip_grad_norm_(ref.parameters(), MAX_NORM, 3.0))
    assert all(torch.equal(p.grad, q.grad) for p, q in zip(model.parameters(), ref.parameters()))
    params = list(model.parameters())
    with fsdp2_port.summon_full_params(model, with_grads=True):
        assert all(p is q for p, q in zip(model.parameters(), params))
    assert fsdp2_port.fsdp_modules(model) == fsdp2_port.fsdp_modules(model, root_only=True) == []
    assert FSDP.fsdp_modules(model) == []

    # The legacy optimizer functions without a process group: the optimizer's own state.
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    opt.step()
    full = fsdp2_port.full_optim_state_dict(model, opt)
    assert full["param_groups"][0]["params"] == NAMES
    own = {name: opt.state[p] for name, p in model.named_parameters()}
    _assert_osd(full, {"state": own, "param_groups": full["param_groups"]})
    assert fsdp2_port.sharded_optim_state_dict(model, opt)["state"].keys() == own.keys()
    for given in (full, opt.state_dict()):  # by name (FSDP1's) or by id (the optimizer's)
        fresh = torch.optim.AdamW(model.parameters(), lr=1e-2)
        fresh.load_state_dict(fsdp2_port.scatter_full_optim_state_dict(given, model, optim=fresh))
        _assert_local_equal(fresh, opt)
    with pytest.raises(ValueError, match="parameter id 99"):
        fsdp2_port.shard_full_optim_state_dict(
            {"state": {99: {}}, "param_groups": []}, model, optim=opt
        )


def test_unwrapped_other_receivers():
    """What ``x.module`` read before, on any object: its attribute, else the object."""

    class Engine:  # another library's wrapper
        def __init__(self, module):
            self.module = module

    plain = nn.Linear(2, 2)
    assert fsdp2_port.unwrapped(Engine(plain)) is plain
    holder = nn.Module()
    holder.module = plain
    assert fsdp2_port.unwrapped(holder) is plain
    assert fsdp2_port.unwrapped(plain) is plain
    thing = object()
    assert fsdp2_port.unwrapped(thing) is thing


def test_clip_on_any_receiver():
    """An object with its own clip_grad_norm_ (not a module) gets that method, as it did."""

    class Accelerator:
        def clip_grad_norm_(self, max_norm, norm_type=2.0):
            return torch.tensor([max_norm, norm_type])

    class Model(nn.Linear):
        def clip_grad_norm_(self, max_norm, norm_type=2.0):
            return torch.tensor(-1.0)

    got = fsdp2_port.module_clip_grad_norm_(Accelerator(), 0.5, 3.0)
    assert torch.equal(got, torch.tensor([0.5, 3.0]))
    assert fsdp2_port.module_clip_grad_norm_(Model(2, 2), 0.5).item() == -1.0
    with pytest.raises(TypeError, match="neither a module nor"):
        fsdp2_port.module_clip_grad_norm_(object(), 1.0)
