"""fsdp2_port's FSDP1 module APIs: on FSDP2 they give what FSDP1 gives, on FSDP1 and DDP they are
FSDP1's and DDP's own.

One model, one seed, wrapped twice on 2 gloo ranks: FSDP1 (``ModuleWrapPolicy`` on the blocks,
``use_orig_params=True``) and FSDP2 (``fully_shard`` on the same blocks, then the root). Before
any step their full state dicts agree bit for bit. After one fp32 AdamW step they may differ
by what the step allows: Adam's first update is ``lr * g / (|g| + eps)`` per element (the bias
corrections cancel), so gradients that differ in their last bits (FSDP1 reduces one flat
buffer, FSDP2 each parameter's shard: another summation order, a few ulps) move it by at most
``lr * 1e-6``, plus one rounding of the parameter (6e-8 for |p| <= 1). ``AFTER_STEP`` = 1e-6
bounds both; on 2 ranks a sum of two addends has no order, and the runs agree bit for bit.

torch 2.13 on the CPU: FSDP1's FULL_STATE_DICT with ``offload_to_cpu=True`` segfaults, and
its ``optim_state_dict`` with the default ``offload_to_cpu=True`` returns every state key of a
parameter as views of one buffer (exp_avg == exp_avg_sq). The FSDP1 side is therefore read
without offloading; the offloading cases are checked on the FSDP2 side against its own
non-offloaded result (on the CPU offloading moves nothing, but ``rank0_only`` must hold).
Everything runs in three spawns to keep the file's wall time small.
"""

import inspect
import warnings
from unittest import mock

import pytest
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import (
    FullOptimStateDictConfig,
    FullStateDictConfig,
    FullyShardedDataParallel,
    ShardedOptimStateDictConfig,
    ShardedStateDictConfig,
    StateDictType,
    fully_shard,
)
from torch.distributed.fsdp.wrap import ModuleWrapPolicy
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.debug import CommDebugMode
from torch.nn.parallel import DistributedDataParallel

import fsdp2_port
from fsdp2_port.fsdp1 import fsdp1_api
from fsdp2_port.prove.launch import run_ranks
from tests.models import Block, TinyNet, global_batch, local_rows, loss_fn, make_model

FSDP = FullyShardedDataParallel
CPU = torch.device("cpu")
FULL, SHARDED = StateDictType.FULL_STATE_DICT, StateDictType.SHARDED_STATE_DICT
AFTER_STEP = 1e-6  # absolute, after one AdamW step: see the module docstring
TIMEOUT = 90
_EMPTY = inspect.Parameter.empty


def _fsdp1() -> FSDP:
    return FSDP(
        make_model(),
        device_id=CPU,
        use_orig_params=True,
        auto_wrap_policy=ModuleWrapPolicy({Block}),
    )


def _fsdp2(world: int) -> TinyNet:
    model, mesh = make_model(), init_device_mesh("cpu", (world,))
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def _step(model, rank, world, step=0) -> torch.optim.Optimizer:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x, y = global_batch(step)
    loss_fn(model, local_rows(x, rank, world), local_rows(y, rank, world)).backward()
    opt.step()
    opt.zero_grad()
    return opt


def _fsdp1_full(model, rank0_only=False) -> dict:
    with FSDP.state_dict_type(model, FULL, FullStateDictConfig(rank0_only=rank0_only)):
        return model.state_dict()


def _trainer_save(model) -> dict:
    """What a trainer's save_model() does: a plain state_dict() call, no context of its own."""
    return model.state_dict()


def _assert_close(got: dict, want: dict, atol: float = 0.0) -> None:
    assert list(got) == list(want)
    for key, value in want.items():
        assert not isinstance(got[key], DTensor), key
        if atol == 0.0:
            assert torch.equal(got[key], value), key
        else:
            diff = (got[key] - value).abs().max().item()
            assert diff <= atol, f"{key}: max |diff| {diff} > {atol}"


def _perturb(model) -> None:
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)


def _zeros_like(state_dict: dict) -> dict:
    return {k: torch.zeros_like(v) for k, v in state_dict.items()}


# -- model state dicts: FULL, SHARDED, set_state_dict_type, LOCAL ------------------------------


def _model_state_dicts(rank, world, path):
    warnings.simplefilter("ignore", FutureWarning)  # FSDP1's state_dict_type is deprecated
    f1, m2 = _fsdp1(), _fsdp2(world)
    with fsdp2_port.state_dict_type(m2, FULL, FullStateDictConfig()):
        _assert_close(_trainer_save(m2), _fsdp1_full(f1))  # bitwise before any step
    _step(f1, rank, world)
    _step(m2, rank, world)
    want, want_rank0 = _fsdp1_full(f1), _fsdp1_full(f1, rank0_only=True)
    with fsdp2_port.state_dict_type(f1, FULL, FullStateDictConfig()):  # FSDP1: FSDP1's own
        _assert_close(f1.state_dict(), want)
    # module_state_dict: a plain state_dict() as FSDP1 answers it, FULL when nothing is set.
    _assert_close(fsdp2_port.module_state_dict(f1), want)
    _assert_close(fsdp2_port.module_state_dict(m2), want, AFTER_STEP)

    # FULL, each of FSDP1's (offload_to_cpu, rank0_only): through a helper, plain state_dict()
    with fsdp2_port.state_dict_type(m2, FULL, FullStateDictConfig()):
        full = _trainer_save(m2)
    _assert_close(full, want, AFTER_STEP)
    with fsdp2_port.state_dict_type(m2, FULL, FullStateDictConfig(rank0_only=True)):
        got = _trainer_save(m2)
    assert len(want_rank0) == (len(want) if rank == 0 else 0)  # FSDP1: empty off rank 0
    _assert_close(got, full if rank == 0 else {})
    for offload, rank0_only in [(True, False), (True, True)]:
        config = FullStateDictConfig(offload_to_cpu=offload, rank0_only=rank0_only)
        with fsdp2_port.state_dict_type(m2, FULL, config):
            got = _trainer_save(m2)
        _assert_close(got, full if rank == 0 or not rank0_only else {})
        assert all(v.device == CPU for v in got.values())

    # The block restores FSDP2's own state_dict (DTensors), also when it raises; nesting.
    assert all(isinstance(v, DTensor) for v in m2.state_dict().values())
    assert "state_dict" not in vars(m2) and "load_state_dict" not in vars(m2)
    with pytest.raises(KeyError), fsdp2_port.state_dict_type(m2, FULL):
        raise KeyError("a failing save")
    assert all(isinstance(v, DTensor) for v in m2.state_dict().values())
    with fsdp2_port.state_dict_type(m2, FULL):
        with fsdp2_port.state_dict_type(m2, SHARDED):
            assert all(isinstance(v, DTensor) for v in m2.state_dict().values())
        _assert_close(m2.state_dict(), full)
    assert all(isinstance(v, DTensor) for v in m2.state_dict().values())

    # FULL load: full tensors on every rank, bitwise back; the caller's dict is left as it was.
    given = dict(full)
    _perturb(m2)
    with fsdp2_port.state_dict_type(m2, FULL):
        result = m2.load_state_dict(given)
        assert not result.missing_keys and not result.unexpected_keys
        _assert_close(m2.state_dict(), full)
        assert all(given[k] is full[k] for k in full)
        partial = {k: v for k, v in full.items() if k != "head.bias"}
        with pytest.raises(RuntimeError, match=r"Missing key.*head\.bias"):
            m2.load_state_dict(partial)
        assert m2.load_state_dict(partial, strict=False).missing_keys == ["head.bias"]
    _perturb(m2)  # load_module_state_dict: FSDP1's plain load, FULL when nothing is set
    assert not fsdp2_port.load_module_state_dict(m2, given).missing_keys
    _assert_close(fsdp2_port.module_state_dict(m2), full)
    loaded = fsdp2_port.load_module_state_dict(m2, partial, strict=False)
    assert loaded.missing_keys == ["head.bias"]
    assert "state_dict" not in vars(m2) and "load_state_dict" not in vars(m2)

    # SHARDED: DTensors, saved with DCP and loaded back bitwise (into fresh zeros, so that
    # only load_state_dict can bring the values back).
    with fsdp2_port.state_dict_type(m2, SHARDED, ShardedStateDictConfig()):
        sharded = m2.state_dict()
        assert all(isinstance(v, DTensor) for v in sharded.values())
        dcp.save(sharded, checkpoint_id=f"{path}/fsdp2")
        _perturb(m2)
        target = _zeros_like(m2.state_dict())
        dcp.load(target, checkpoint_id=f"{path}/fsdp2")
        m2.load_state_dict(target)
    with fsdp2_port.state_dict_type(m2, FULL):
        _assert_close(m2.state_dict(), full)

    # A checkpoint FSDP1 saved SHARDED (ShardedTensors) loads into FSDP2 through the helper.
    with FSDP.state_dict_type(f1, SHARDED):
        dcp.save(f1.state_dict(), checkpoint_id=f"{path}/fsdp1")
    _perturb(m2)
    with fsdp2_port.state_dict_type(m2, SHARDED):
        target = _zeros_like(m2.state_dict())
        dcp.load(target, checkpoint_id=f"{path}/fsdp1")
        m2.load_state_dict(target)
    with fsdp2_port.state_dict_type(m2, FULL):
        _assert_close(m2.state_dict(), want)  # FSDP1's own weights, bitwise

    # set_state_dict_type: persists across calls, returns the previous settings as FSDP1 does.
    rank0 = FullStateDictConfig(rank0_only=True)
    assert fsdp2_port.set_state_dict_type(m2, FULL, rank0) == FSDP.set_state_dict_type(
        f1, FULL, rank0
    )
    for _ in range(2):
        _assert_close(_trainer_save(m2), full if rank == 0 else {})
    offload = ShardedStateDictConfig(offload_to_cpu=True)
    previous = fsdp2_port.set_state_dict_type(m2, SHARDED, offload)
    assert previous == FSDP.set_state_dict_type(f1, SHARDED, offload)
    assert previous.state_dict_type == FULL and previous.state_dict_config is rank0
    assert fsdp2_port.get_state_dict_type(m2) == FSDP.get_state_dict_type(f1)
    assert all(isinstance(v, DTensor) for v in _trainer_save(m2).values())
    # A type that was set is followed, as FSDP1 follows its own.
    assert all(isinstance(v, DTensor) for v in fsdp2_port.module_state_dict(m2).values())

    # What FSDP2 cannot honour.
    with pytest.raises(ValueError, match=r"LOCAL_STATE_DICT.*SHARDED_STATE_DICT.*checkpoint"):
        fsdp2_port.state_dict_type(m2, StateDictType.LOCAL_STATE_DICT)
    with pytest.raises(ValueError, match="LOCAL_STATE_DICT"):
        fsdp2_port.set_state_dict_type(m2, StateDictType.LOCAL_STATE_DICT)
    with pytest.raises(ValueError, match="state_dict_config: FULL_STATE_DICT takes a Full"):
        fsdp2_port.state_dict_type(m2, FULL, ShardedStateDictConfig())
    assert fsdp2_port.get_state_dict_type(m2).state_dict_type == SHARDED  # nothing changed


@pytest.mark.slow
def test_model_state_dicts_match_fsdp1(tmp_path):
    run_ranks(_model_state_dicts, 2, str(tmp_path), timeout=TIMEOUT)


# -- optimizer state -----------------------------------------------------------------------------


def _assert_optim_equal(got: dict, want: dict, atol: float = 0.0) -> None:
    assert set(got["state"]) == set(want["state"])
    for fqn, entry in want["state"].items():
        assert set(got["state"][fqn]) == set(entry), fqn
        for key, value in entry.items():
            mine = got["state"][fqn][key]
            assert not isinstance(mine, DTensor), (fqn, key)
            if key == "step" or atol == 0.0:
                assert torch.equal(mine, value), (fqn, key)
            else:
                assert (mine - value).abs().max().item() <= atol, (fqn, key)
    assert got["param_groups"] == want["param_groups"], (got["param_groups"], want["param_groups"])


def _scaled(osd: dict, factor: float) -> dict:
    state = {
        fqn: {k: v if k == "step" else v * factor for k, v in entry.items()}
        for fqn, entry in osd["state"].items()
    }
    return {"state": state, "param_groups": osd["param_groups"]}


def _local_state(opt) -> list:
    return [
        v.to_local().clone() if isinstance(v, DTensor) else v.clone()
        for state in opt.state.values()
        for v in state.values()
    ]


def _optimizer_state(rank, world):
    warnings.simplefilter("ignore", FutureWarning)
    f1, m2 = _fsdp1(), _fsdp2(world)
    o1, o2 = _step(f1, rank, world), _step(m2, rank, world)
    unoffloaded = FullOptimStateDictConfig(offload_to_cpu=False)  # see the module docstring
    with FSDP.state_dict_type(f1, FULL, FullStateDictConfig(), unoffloaded):
        want = FSDP.optim_state_dict(f1, o1)
        assert fsdp2_port.optim_state_dict(f1, o1).keys() == want.keys()  # FSDP1's own
    with FSDP.state_dict_type(f1, FULL, None, FullOptimStateDictConfig(False, rank0_only=True)):
        assert len(FSDP.optim_state_dict(f1, o1)) == (2 if rank == 0 else 0)

    # No type set: FSDP1's default, FULL (offloaded, every rank). Keys, steps, moments.
    full = fsdp2_port.optim_state_dict(m2, o2)
    _assert_optim_equal(full, want, AFTER_STEP)
    assert all(v.device == CPU for e in full["state"].values() for v in e.values())
    _assert_optim_equal(fsdp2_port.optim_state_dict(m2, o2, o2.state_dict()), full)
    for offload, rank0_only in [(False, False), (True, True), (False, True)]:
        config = FullOptimStateDictConfig(offload_to_cpu=offload, rank0_only=rank0_only)
        with fsdp2_port.state_dict_type(m2, FULL, None, config):
            got = fsdp2_port.optim_state_dict(m2, o2)
        if rank0_only and rank != 0:
            assert got == {}
        else:
            _assert_optim_equal(got, full)
    with fsdp2_port.state_dict_type(m2, SHARDED, None, ShardedOptimStateDictConfig()):
        sharded = fsdp2_port.optim_state_dict(m2, o2)
    assert isinstance(sharded["state"]["head.weight"]["exp_avg"], DTensor)

    # optim_state_dict_to_load: without load_directly the optimizer is left as it was, and
    # the result, given to optim.load_state_dict, loads the moments bit for bit.
    doubled = _scaled(full, 2.0)
    before = _local_state(o2)
    result = fsdp2_port.optim_state_dict_to_load(m2, o2, doubled)
    assert all(torch.equal(a, b) for a, b in zip(_local_state(o2), before))
    o2.load_state_dict(result)
    _assert_optim_equal(fsdp2_port.optim_state_dict(m2, o2), doubled)
    # Before the first step there is no state, and asking for it creates none (torch's own
    # function would give the optimizer a zero-lr step, so that its first real one is step 2).
    fresh, fresh1 = torch.optim.AdamW(m2.parameters()), torch.optim.AdamW(f1.parameters())
    empty = fsdp2_port.optim_state_dict(m2, fresh)
    assert empty["state"] == {} and not fresh.state
    with FSDP.state_dict_type(f1, FULL, FullStateDictConfig(), unoffloaded):
        _assert_optim_equal(empty, FSDP.optim_state_dict(f1, fresh1))
    fsdp2_port.optim_state_dict_to_load(m2, fresh, empty, load_directly=True)
    assert not fresh.state
    fsdp2_port.optim_state_dict_to_load(m2, fresh, full, load_directly=True)
    _assert_optim_equal(fsdp2_port.optim_state_dict(m2, fresh), full)
    # FULL with rank0_only: rank 0's dict counts (FSDP1 ignores the other ranks' input).
    config = FullOptimStateDictConfig(rank0_only=True)
    with fsdp2_port.state_dict_type(m2, FULL, None, config):
        given = doubled if rank == 0 else {}
        fsdp2_port.optim_state_dict_to_load(m2, fresh, given, load_directly=True)
    _assert_optim_equal(fsdp2_port.optim_state_dict(m2, fresh), doubled)

    # A dict without state for some parameters: they are left without state, as on FSDP1
    # (whose own optim_state_dict then refuses the optimizer, so its state is read directly).
    def without_head(osd):
        state = {k: v for k, v in osd["state"].items() if k != "head.weight"}
        return {"state": state, "param_groups": osd["param_groups"]}

    fsdp2_port.optim_state_dict_to_load(m2, o2, without_head(full), load_directly=True)
    _assert_optim_equal(fsdp2_port.optim_state_dict(m2, o2), without_head(full))
    with FSDP.state_dict_type(f1, FULL, FullStateDictConfig(), unoffloaded):
        FSDP.optim_state_dict_to_load(f1, o1, without_head(want), load_directly=True)
    names = {p: n.replace("_fsdp_wrapped_module.", "") for n, p in f1.named_parameters()}
    held = {name for p, name in names.items() if p.numel() > 0}  # this rank's FSDP1 shards
    assert {names[p] for p, state in o1.state.items() if state} == held - {"head.weight"}
    with pytest.raises(ValueError, match="is_named_optimizer"):
        fsdp2_port.optim_state_dict_to_load(m2, fresh, full, is_named_optimizer=True)


@pytest.mark.slow
def test_optimizer_state_matches_fsdp1():
    run_ranks(_optimizer_state, 2, timeout=TIMEOUT)


# -- no_sync and unwrapped -----------------------------------------------------------------------


def _reduce_scatters(model, rank, world, step=0) -> int:
    x, y = global_batch(step)
    with CommDebugMode() as comm:
        loss_fn(model, local_rows(x, rank, world), local_rows(y, rank, world)).backward()
    counts = comm.get_comm_counts()
    return sum(n for op, n in counts.items() if "reduce_scatter" in str(op))


def _gathered(t: torch.Tensor) -> list:
    every = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(every, t)
    return every


def _no_sync_and_unwrapped(rank, world):
    # FSDP2 holds a gradient that is not reduced outside .grad (unsharded, until the next
    # synced backward), so "skipped" is read from the collectives the backward issues.
    m2, ref = _fsdp2(world), _fsdp2(world)
    with fsdp2_port.no_sync(m2):
        assert _reduce_scatters(m2, rank, world, 0) == 0
        with fsdp2_port.no_sync(m2):  # nested: the inner exit keeps sync off
            pass
        assert _reduce_scatters(m2, rank, world, 1) == 0
    assert _reduce_scatters(m2, rank, world, 2) > 0
    for step in range(3):  # the same three backward passes, each synced
        _reduce_scatters(ref, rank, world, step)
    # Held back, then reduced once, against reduced three times: the same fp32 additions in
    # another order, a few ulps apart.
    for (name, p), q in zip(m2.named_parameters(), ref.parameters()):
        got, want = p.grad.full_tensor(), q.grad.full_tensor()
        diff, scale = (got - want).abs().max().item(), want.abs().max().item()
        assert diff <= 1e-6 * scale, f"{name}: accumulated grads differ by {diff} of {scale}"
    with pytest.raises(KeyError), fsdp2_port.no_sync(m2):
        raise KeyError("a failing micro-batch")
    assert _reduce_scatters(m2, rank, world) > 0  # sync back on after the exception

    # DDP: its own no_sync (grads stay local, so they differ per rank), then a synced pass.
    torch.manual_seed(0)
    inner = make_model()
    ddp = DistributedDataParallel(inner)
    with fsdp2_port.no_sync(ddp):
        assert not ddp.require_backward_grad_sync
        _reduce_scatters(ddp, rank, world)
        grads = _gathered(inner.head.weight.grad)
        assert not torch.equal(grads[0], grads[1])
    assert ddp.require_backward_grad_sync
    _reduce_scatters(ddp, rank, world, 1)
    grads = _gathered(inner.head.weight.grad)
    assert torch.equal(grads[0], grads[1])
    # FSDP1's context cannot even exit on DDP; here FULL means what it means on FSDP1: names
    # without the wrapper's prefix, and rank0_only.
    with fsdp2_port.state_dict_type(ddp, FULL, FullStateDictConfig(rank0_only=True)):
        _assert_close(ddp.state_dict(), inner.state_dict() if rank == 0 else {})
    with fsdp2_port.state_dict_type(ddp, FULL):
        ddp.load_state_dict(inner.state_dict())
    assert next(iter(ddp.state_dict())) == "module.embed.weight"  # DDP's own again
    assert list(fsdp2_port.module_state_dict(ddp)) == list(ddp.state_dict())  # DDP: its own
    fsdp2_port.load_module_state_dict(ddp, ddp.state_dict())
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-2)
    opt.step()
    osd = fsdp2_port.optim_state_dict(ddp, opt)
    assert list(osd["state"]) == [name for name, _ in inner.named_parameters()]
    assert torch.equal(
        osd["state"]["head.weight"]["exp_avg"], opt.state[inner.head.weight]["exp_avg"]
    )

    f1 = _fsdp1()
    assert fsdp2_port.unwrapped(ddp) is inner
    assert fsdp2_port.unwrapped(f1) is f1.module and type(f1.module) is TinyNet
    assert fsdp2_port.unwrapped(m2) is m2


@pytest.mark.slow
def test_no_sync_and_unwrapped_on_fsdp2_ddp_and_fsdp1():
    run_ranks(_no_sync_and_unwrapped, 2, timeout=TIMEOUT)


# -- one process ---------------------------------------------------------------------------------

_FSDP1_STATIC = [
    "state_dict_type",
    "set_state_dict_type",
    "get_state_dict_type",
    "optim_state_dict",
    "optim_state_dict_to_load",
]


@pytest.mark.parametrize("name", _FSDP1_STATIC)
def test_signature_is_fsdp1s(name):
    """The codemod copies FSDP1's arguments verbatim, by position or by name."""

    def shape(fn):
        return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]

    assert isinstance(inspect.getattr_static(FSDP, name), staticmethod)
    ours, fsdp1 = shape(getattr(fsdp2_port, name)), shape(getattr(FSDP, name))
    if name in ("state_dict_type", "set_state_dict_type"):
        # the settings may be given as DCP's options instead: the type became optional
        keyword = inspect.Parameter.KEYWORD_ONLY
        assert ours[-2:] == [("options", keyword, None), ("optim_options", keyword, None)]
        assert fsdp1[1] == ("state_dict_type", inspect.Parameter.POSITIONAL_OR_KEYWORD, _EMPTY)
        ours, fsdp1 = ours[:-2], [fsdp1[0], (*fsdp1[1][:2], None), *fsdp1[2:]]
    assert ours == fsdp1


def test_exported_lazily_from_the_package():
    names = ["no_sync", "unwrapped", "module_state_dict", "load_module_state_dict"]
    for name in [*_FSDP1_STATIC, *names]:
        assert getattr(fsdp2_port, name) is getattr(fsdp1_api, name)
        assert name in fsdp2_port.__all__


def test_plain_modules():
    plain = torch.nn.Linear(2, 2)
    assert fsdp2_port.unwrapped(plain) is plain
    state = fsdp2_port.module_state_dict(plain, prefix="p.")
    assert list(state) == ["p.weight", "p.bias"]
    with pytest.raises(RuntimeError, match="Missing key"):
        fsdp2_port.load_module_state_dict(plain, {"weight": state["p.weight"]})
    with pytest.raises(TypeError, match="no_sync: Linear is neither"):
        fsdp2_port.no_sync(plain)


def test_module_state_dict_of_an_object_that_is_no_module():
    """What the codemod writes for ``x.state_dict()`` where it cannot tell what ``x`` is (an
    optimizer here) answers as ``x`` itself does."""
    optimizer = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.5, momentum=0.9)
    assert fsdp2_port.module_state_dict(optimizer) == optimizer.state_dict()
    changed = optimizer.state_dict()
    changed["param_groups"][0]["lr"] = 0.25
    fsdp2_port.load_module_state_dict(optimizer, changed)
    assert optimizer.param_groups[0]["lr"] == 0.25


def test_reshard_is_the_handles_on_fsdp1_and_reshard_on_fsdp2(one_rank):
    """``fsdp2_port.reshard(m, flag)``, what ``m._handle.reshard(flag)`` becomes: FSDP1's handle
    call on FSDP1, ``FSDPModule.reshard()`` on FSDP2 (whose root keeps its parameters
    unsharded after a forward, as FSDP1's does), AttributeError on anything else."""
    torch.manual_seed(0)
    m2 = _fsdp2(1)
    with torch.no_grad():
        m2(global_batch(0)[0])
    assert not isinstance(m2.head.weight, DTensor)  # the root's parameters, unsharded
    fsdp2_port.reshard(m2, True)
    assert isinstance(m2.head.weight, DTensor)

    f1 = _fsdp1()
    handle = f1._handle
    with mock.patch.object(type(handle), "reshard", autospec=True) as reshard:
        fsdp2_port.reshard(f1, False)
    reshard.assert_called_once_with(handle, False)

    with pytest.raises(AttributeError, match="Linear has no _handle to reshard"):
        fsdp2_port.reshard(torch.nn.Linear(2, 2))
