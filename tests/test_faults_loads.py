"""A refused checkpoint load changes nothing (masters, moments, steps, lr, params).

Most cases run in one process: ``fsdp2_port.BF16Optimizer`` takes plain tensors too, and DCP
saves and loads without a process group. One 2-rank gloo run covers DTensor masters.
"""

import copy

import pytest
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import fsdp2_port
from fsdp2_port import compat
from fsdp2_port.prove.launch import run_ranks
from tests.models import TinyNet, cpu_mesh, global_batch, local_rows, loss_fn, make_model

LR = 1e-2
KW = dict(max_grad_norm=1.0, total_steps=50, warmup_ratio=0.1)


class Wider(TinyNet):
    """TinyNet plus one parameter: a checkpoint of it holds an extra one."""

    def __init__(self):
        super().__init__()
        self.extra = nn.Linear(3, 3)


def _trained(cls, model, steps, rank=0, world=1):
    opt = cls(model, LR, **KW)
    dtype = next(model.parameters()).dtype
    for step in range(steps):
        x, y = global_batch(step, dtype=dtype)
        loss_fn(model, local_rows(x, rank, world), local_rows(y, rank, world)).backward()
        opt.step()
    return opt


def _local(t):
    return t.to_local() if hasattr(t, "to_local") else t


def _snapshot(opt):
    """Everything a load may change, as independent copies (local shards of DTensors)."""
    return {
        "masters": [_local(m).clone() for m in opt.fp32_params],
        "params": [_local(p).detach().clone() for p in opt.model_params],
        "state": [
            {k: _local(v).clone() for k, v in opt.optimizer.state[m].items()}
            for m in opt.fp32_params
        ],
        "lr": [g["lr"] for g in opt.optimizer.param_groups],
        "scheduler": copy.deepcopy(opt.scheduler.state_dict()),
    }


def _assert_bitwise_equal(a, b, where="state"):
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            _assert_bitwise_equal(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_bitwise_equal(x, y, f"{where}[{i}]")
    else:
        assert a == b, (where, a, b)


def _refused_changes_nothing(opt, load, match):
    before = _snapshot(opt)
    with pytest.raises((ValueError, KeyError), match=match):
        load()
    _assert_bitwise_equal(_snapshot(opt), before)


def _refused_dcp_load_changes_nothing(opt, path, match):
    """DCP itself refuses a key the checkpoint lacks, in planning (CheckpointException, not
    an Exception); the rest is refused by ``load_state_dict`` on the staged copies."""
    before = _snapshot(opt)
    with pytest.raises((ValueError, KeyError, CheckpointException), match=match):
        dcp.load({"optim": opt}, checkpoint_id=path)
    _assert_bitwise_equal(_snapshot(opt), before)


# -- tampering: (what, function of a state dict -> a bad state dict, error pattern) ---------


def _bad_scheduler(sd):
    return {**sd, "scheduler_state_dict": {**sd["scheduler_state_dict"], "last_epoch": "7"}}


def _no_after_scheduler(sd):
    return {**sd, "scheduler_state_dict": {**sd["scheduler_state_dict"], "after_scheduler": None}}


def _masters_as(sd, fn):
    masters = sd["fp32_params"]
    if isinstance(masters, dict):
        last = list(masters)[-1]
        return {**sd, "fp32_params": {**masters, last: fn(masters[last])}}
    return {**sd, "fp32_params": [*masters[:11], fn(masters[11]), *masters[12:]]}


def _late_moment(sd):
    optim = sd["optimizer_state_dict"]
    last = list(optim["state"])[-1]
    state = {**optim["state"], last: {**optim["state"][last], "exp_avg": torch.zeros(2, 2)}}
    return {**sd, "optimizer_state_dict": {**optim, "state": state}}


BAD = {
    "late master shape": (lambda sd: _masters_as(sd, lambda t: torch.zeros(3, 3)), "shape"),
    "late master dtype": (lambda sd: _masters_as(sd, lambda t: t.to(torch.bfloat16)), "dtype"),
    "late moment shape": (_late_moment, "exp_avg"),
    "scheduler value": (_bad_scheduler, "last_epoch"),
    "scheduler phase": (_no_after_scheduler, "after_scheduler"),
}


@pytest.mark.parametrize("cls", [compat.BF16Optimizer, fsdp2_port.BF16Optimizer])
@pytest.mark.parametrize("case", list(BAD))
def test_refused_load_state_dict_changes_nothing(cls, case):
    """The tampered entry is the last (compat: the 12th of 16 masters) so that a load that
    wrote before checking would have copied the others first."""
    saved = _trained(cls, make_model(torch.bfloat16, seed=0), 3).state_dict()
    opt = _trained(cls, make_model(torch.bfloat16, seed=1), 2)
    tamper, match = BAD[case]
    _refused_changes_nothing(opt, lambda: opt.load_state_dict(tamper(saved)), match)
    opt.load_state_dict(saved)  # the untampered state loads, and changes everything
    for m, want in zip(opt.fp32_params, saved["fp32_params"]):
        assert torch.equal(m, saved["fp32_params"][want] if isinstance(want, str) else want)


def _dcp_checkpoints(tmp_path, prepare, rank=0, world=1):
    """(path, error pattern) of DCP checkpoints the ``fsdp2_port`` optimizer must refuse:
    one of a model with an extra parameter, and tampered states of the right model."""
    cls = fsdp2_port.BF16Optimizer
    torch.manual_seed(0)
    wider = _trained(cls, prepare(Wider()), 3, rank, world)
    dcp.save({"optim": wider}, checkpoint_id=str(tmp_path / "extra"))
    out = [(str(tmp_path / "extra"), "other parameters")]
    good = _trained(cls, prepare(make_model()), 3, rank, world).state_dict()
    # A dtype is not among them: DCP reads each saved tensor into the staging copy of this
    # optimizer's dtype (torch's cast), so a bf16 master arrives as its exact fp32 value.
    for case in ("scheduler value", "scheduler phase"):
        tamper, match = BAD[case]
        path = str(tmp_path / case.replace(" ", "_"))
        dcp.save({"optim": tamper(good)}, checkpoint_id=path)
        out.append((path, match))
    return out


def test_refused_dcp_load_changes_nothing_in_one_process(tmp_path):
    for path, match in _dcp_checkpoints(tmp_path, lambda m: m.to(torch.bfloat16)):
        opt = _trained(fsdp2_port.BF16Optimizer, make_model(torch.bfloat16, seed=1), 2)
        _refused_dcp_load_changes_nothing(opt, path, match)


def _shard(model):
    mesh = cpu_mesh()
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    return fully_shard(model.to(torch.bfloat16), mesh=mesh)


def _refusals_on_dtensors(rank, world, tmp_path):
    for path, match in _dcp_checkpoints(tmp_path, _shard, rank, world):
        model = _shard(make_model(seed=1))
        opt = _trained(fsdp2_port.BF16Optimizer, model, 2, rank, world)
        _refused_dcp_load_changes_nothing(opt, path, match)
    _refusals_of_one_ranks_file(rank, world, tmp_path)


def _refusals_of_one_ranks_file(rank, world, tmp_path):
    """``torch.save(optimizer.state_dict())`` on each rank: the other rank's file is refused
    (its shards have this rank's shapes: only their mesh coordinate tells), so is a file
    loaded into a model sharded over another number of ranks; a rank's own file loads."""
    opt = _trained(fsdp2_port.BF16Optimizer, _shard(make_model(seed=1)), 2, rank, world)
    torch.save(opt.state_dict(), tmp_path / f"optim{rank}.pt")
    dist.barrier()
    other = torch.load(tmp_path / f"optim{1 - rank}.pt", weights_only=False)
    match = rf"holds rank {1 - rank}'s shard, this is rank {rank}: a torch.save of one rank's"
    _refused_changes_nothing(opt, lambda: opt.load_state_dict(other), match)
    own = torch.load(tmp_path / f"optim{rank}.pt", weights_only=False)
    opt.load_state_dict(own)
    solo = init_device_mesh("cpu", (world, 1), mesh_dim_names=("dp", "solo"))["solo"]
    model = make_model(seed=1)
    for block in model.blocks:
        fully_shard(block, mesh=solo)
    alone = fsdp2_port.BF16Optimizer(fully_shard(model.to(torch.bfloat16), mesh=solo), LR, **KW)
    match = r"sharded over 2 ranks \(mesh \(2,\)\), this run over 1 \(mesh \(1,\)\)"
    _refused_changes_nothing(alone, lambda: alone.load_state_dict(own), match)


@pytest.mark.slow
def test_refused_dcp_load_changes_nothing_on_two_ranks(tmp_path):
    """DTensor masters and moments sharded over 2 gloo ranks, DCP checkpoints and one rank's
    torch.save; 60 s is ~6x its run time."""
    run_ranks(_refusals_on_dtensors, 2, tmp_path, timeout=60)
