"""Checkpoints written before the migration resume after it, nothing lost.

One FSDP1 job on 2 gloo ranks trains three runs for TOTAL steps and saves at SAVE_AT: the
SpecForge optimizer (fsdp2_port.compat.BF16Optimizer, use_orig_params=True, every rank's
state_dict()),
and plain AdamW with a schedule in FULL_STATE_DICT, SHARDED_STATE_DICT through DCP and
torch.save (the legacy form), and LOCAL_STATE_DICT (use_orig_params False and True). Each
checkpoint is converted offline (no process group), then resumed by FSDP2 code on 2 and on 4
ranks: the state arrives bit for bit (against FSDP1's own full gather at the save) and the
continued losses equal the uninterrupted FSDP1 run's (fp32, rtol 1e-5).
"""

import math

import pytest
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import (
    FullOptimStateDictConfig,
    FullStateDictConfig,
    StateDictType,
    fully_shard,
)
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import ModuleWrapPolicy

import fsdp2_port
from fsdp2_port import cli, compat
from fsdp2_port.compat.transition import fsdp2_state_dict
from fsdp2_port.fsdp1.convert import ConversionError, convert_checkpoint
from fsdp2_port.prove.launch import run_ranks
from fsdp2_port.train.lr_schedules import build_scheduler
from tests.models import Block, cpu_mesh, global_batch, local_rows, loss_fn, make_model

LR, MAX_NORM, SAVE_AT, TOTAL = 1e-2, 1.0, 3, 5
KW = dict(max_grad_norm=MAX_NORM, total_steps=100, warmup_ratio=0.1)
MODEL = "tests.models:make_model"
ADAMW_RUNS = {"flat": False, "orig": True}  # run name -> FSDP1 use_orig_params
SPECFORGE_RUNS = {"specforge": True, "specforge_flat": False}
UNITS = ",blocks.0,blocks.1"  # the FSDP1 units of _fsdp1 (ModuleWrapPolicy({Block})) and root


def _step(model, step_fn, step):
    rank, world = dist.get_rank(), dist.get_world_size()
    x, y = global_batch(step)
    loss = loss_fn(model, local_rows(x, rank, world), local_rows(y, rank, world))
    loss.backward()
    norm = step_fn()
    dist.all_reduce(loss := loss.detach(), op=dist.ReduceOp.AVG)
    return norm, loss.item()


def _fsdp1(use_orig_params):
    return FSDP(
        make_model(),
        device_id=torch.device("cpu"),
        use_orig_params=use_orig_params,
        auto_wrap_policy=ModuleWrapPolicy({Block}),
    )


def _full_params(fsdp):
    with FSDP.summon_full_params(fsdp):
        return {
            n.replace("_fsdp_wrapped_module.", ""): p.detach().clone()
            for n, p in fsdp.named_parameters()
        }


def _full_state(fsdp, opt):
    """FSDP1's own full gather (no offload: see the README's torch behaviours), by name."""
    with FSDP.state_dict_type(
        fsdp,
        StateDictType.FULL_STATE_DICT,
        FullStateDictConfig(offload_to_cpu=False, rank0_only=False),
        FullOptimStateDictConfig(offload_to_cpu=False, rank0_only=False),
    ):
        model = {k: v.clone() for k, v in fsdp.state_dict().items()}
        optim = FSDP.optim_state_dict(fsdp, opt)
    optim["state"] = {
        n: {k: v.clone() if torch.is_tensor(v) else v for k, v in s.items()}
        for n, s in optim["state"].items()
    }
    return model, optim


def _specforge_run(rank, d, name, use_orig_params):
    fsdp = _fsdp1(use_orig_params)
    opt = compat.BF16Optimizer(fsdp, LR, **KW)
    for step in range(SAVE_AT):
        _step(fsdp, opt.step, step)
    torch.save({**opt.state_dict(), "epoch": 1}, f"{d}/{name}_{rank}.pt")
    truth = fsdp2_state_dict(opt, root=fsdp)
    after = [_step(fsdp, lambda: opt.step().item(), s) for s in range(SAVE_AT, TOTAL)]
    final = _full_params(fsdp)  # a collective
    if rank == 0:
        torch.save({"truth": truth, "after": after, "final": final}, f"{d}/ref_{name}.pt")


def _adamw_run(rank, d, name, use_orig_params):
    fsdp = _fsdp1(use_orig_params)
    opt = torch.optim.AdamW(fsdp.parameters(), lr=LR)
    sched = build_scheduler(opt, "cosine", 100, 0.1)

    def step_fn():
        opt.step()
        sched.step()
        opt.zero_grad()
        return 0.0

    for step in range(SAVE_AT):
        _step(fsdp, step_fn, step)
    extra = {"scheduler": sched.state_dict(), "step": SAVE_AT}
    truth_model, truth_optim = _full_state(fsdp, opt)
    if not use_orig_params:
        if rank == 0:
            torch.save({"model": truth_model, "optim": truth_optim, **extra}, f"{d}/full.pt")
        with FSDP.state_dict_type(fsdp, StateDictType.SHARDED_STATE_DICT):
            sharded = {"model": fsdp.state_dict(), "optim": FSDP.optim_state_dict(fsdp, opt)}
        dcp.save({**sharded, **extra}, checkpoint_id=f"{d}/dcp")
        torch.save({**sharded, **extra}, f"{d}/sharded_{rank}.pt")
    with FSDP.state_dict_type(fsdp, StateDictType.LOCAL_STATE_DICT):
        local = fsdp.state_dict()
    torch.save({"model": local, "optim": opt.state_dict(), **extra}, f"{d}/local_{name}_{rank}.pt")
    after = [_step(fsdp, step_fn, s) for s in range(SAVE_AT, TOTAL)]
    final = _full_params(fsdp)  # a collective
    if rank == 0:
        ref = {"model": truth_model, "optim": truth_optim, "after": after, "final": final}
        torch.save(ref, f"{d}/ref_{name}.pt")


def _fsdp1_job(rank, world, d):
    for name, use_orig_params in SPECFORGE_RUNS.items():
        _specforge_run(rank, d, name, use_orig_params)
    for name, use_orig_params in ADAMW_RUNS.items():
        _adamw_run(rank, d, name, use_orig_params)


def _fsdp2_model():
    model = make_model(seed=1)  # other weights: only the checkpoint can make them right
    mesh = cpu_mesh()
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def _assert_continues(model, after, ref, what):
    for (norm, loss), (want_norm, want_loss) in zip(after, ref["after"]):
        assert math.isclose(loss, want_loss, rel_tol=1e-5), (what, after, ref["after"])
        if want_norm:
            assert math.isclose(norm, want_norm, rel_tol=1e-5), (what, after, ref["after"])
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.full_tensor(), ref["final"][n], rtol=0, atol=1e-5, msg=n)


def _resume_specforge(d, name):
    ref = torch.load(f"{d}/ref_{name}.pt", weights_only=False)
    converted = torch.load(f"{d}/{name}.pt", weights_only=False)
    truth = ref["truth"]
    # The positional form loads directly too, once its masters are whole tensors.
    model = _fsdp2_model()
    opt = fsdp2_port.BF16Optimizer(model, LR, **KW)
    positional = {
        **converted,
        "fp32_params": [converted["fp32_params"][n] for n in opt.param_names],
        "optimizer_state_dict": {
            "state": {
                i: converted["optimizer_state_dict"]["state"][n]
                for i, n in enumerate(opt.param_names)
            },
            "param_groups": [
                {
                    **converted["optimizer_state_dict"]["param_groups"][0],
                    "params": list(range(len(opt.param_names))),
                }
            ],
        },
    }
    for state in (positional, converted):
        model = _fsdp2_model()
        opt = fsdp2_port.BF16Optimizer(model, LR, **KW)
        opt.load_state_dict(state)
        for n, m in zip(opt.param_names, opt.fp32_params):
            assert torch.equal(m.full_tensor(), truth["fp32_params"][n]), n
            held = opt.optimizer.state[m]
            for key in ("exp_avg", "exp_avg_sq"):
                want = truth["optimizer_state_dict"]["state"][n][key]
                assert torch.equal(held[key].full_tensor(), want), (n, key)
            assert held["step"].item() == SAVE_AT
        assert opt.scheduler.state_dict() == truth["scheduler_state_dict"]
    after = [_step(model, lambda: opt.step().item(), s) for s in range(SAVE_AT, TOTAL)]
    _assert_continues(model, after, ref, "specforge")


def _load_converted(d, kind, model, opt, sched):
    converted = torch.load(f"{d}/{kind}.pt", weights_only=False)
    full = StateDictOptions(full_state_dict=True)
    set_model_state_dict(model, converted["model"], options=full)
    set_optimizer_state_dict(model, opt, converted["optim"], options=full)
    sched.load_state_dict(converted["scheduler"])


def _load_dcp_directly(d, kind, model, opt, sched):
    """FSDP1's SHARDED_STATE_DICT under DCP needs no conversion: the names are the same."""
    state = {
        "model": get_model_state_dict(model),
        "optim": get_optimizer_state_dict(model, opt),
        "scheduler": sched.state_dict(),
        "step": 0,
    }
    dcp.load(state, checkpoint_id=f"{d}/dcp")
    set_model_state_dict(model, state["model"])
    set_optimizer_state_dict(model, opt, state["optim"])
    sched.load_state_dict(state["scheduler"])
    assert state["step"] == SAVE_AT


def _resume_adamw(d, kind, run, load=_load_converted):
    ref = torch.load(f"{d}/ref_{run}.pt", weights_only=False)
    model = _fsdp2_model()
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    sched = build_scheduler(opt, "cosine", 100, 0.1)
    load(d, kind, model, opt, sched)
    for n, p in model.named_parameters():
        assert torch.equal(p.full_tensor(), ref["model"][n]), (kind, n)
        for key in ("exp_avg", "exp_avg_sq"):
            want = ref["optim"]["state"][n][key]
            assert torch.equal(opt.state[p][key].full_tensor(), want), (kind, n, key)
        assert opt.state[p]["step"].item() == SAVE_AT, (kind, n)

    def step_fn():
        opt.step()
        sched.step()
        opt.zero_grad()
        return 0.0

    after = [_step(model, step_fn, s) for s in range(SAVE_AT, TOTAL)]
    _assert_continues(model, after, ref, kind)


def _fsdp2_job(rank, world, d):
    for name in SPECFORGE_RUNS:
        _resume_specforge(d, name)
    for kind, run in (
        ("full", "flat"),
        ("dcp", "flat"),
        ("sharded", "flat"),
        ("local_flat", "flat"),
        ("local_orig", "orig"),
    ):
        _resume_adamw(d, kind, run)
    _resume_adamw(d, "dcp", "flat", load=_load_dcp_directly)


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """The FSDP1 job's checkpoints, converted offline (this process has no process group)."""
    d = tmp_path_factory.mktemp("old")
    run_ranks(_fsdp1_job, 2, str(d))
    assert not dist.is_initialized()
    sf = f"{d}/specforge_{{rank}}.pt"
    assert cli.main(["convert-checkpoint", sf, f"{d}/specforge.pt", "--model", MODEL]) == 0
    flat = [f"{d}/specforge_flat_{{rank}}.pt", f"{d}/specforge_flat.pt", "--model", MODEL]
    assert cli.main(["convert-checkpoint", *flat, "--units", UNITS]) == 0
    assert convert_checkpoint(f"{d}/full.pt", f"{d}/full.pt.new", model=MODEL) == "full"
    assert convert_checkpoint(f"{d}/dcp", f"{d}/dcp.pt", model=MODEL) == "dcp"
    assert convert_checkpoint(f"{d}/sharded_{{rank}}.pt", f"{d}/sharded.pt") == "sharded"
    for run in ADAMW_RUNS:
        kind = convert_checkpoint(
            f"{d}/local_{run}_{{rank}}.pt", f"{d}/local_{run}.pt", "local", MODEL
        )
        assert kind == "local"
    (d / "full.pt.new").replace(d / "full.pt")
    return d


@pytest.mark.parametrize("name", sorted(SPECFORGE_RUNS))
@pytest.mark.slow
def test_converted_specforge_is_fsdp1s_own_full_state(converted, name):
    truth = torch.load(converted / f"ref_{name}.pt", weights_only=False)["truth"]
    got = torch.load(converted / f"{name}.pt", weights_only=False)
    assert got["epoch"] == 1 and got["lr_scheduler_type"] == truth["lr_scheduler_type"]
    assert sorted(got["fp32_params"]) == sorted(truth["fp32_params"])
    for n, t in truth["fp32_params"].items():
        assert torch.equal(got["fp32_params"][n], t), n
        for key, v in truth["optimizer_state_dict"]["state"][n].items():
            assert torch.equal(got["optimizer_state_dict"]["state"][n][key], v), (n, key)


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.slow
def test_old_checkpoints_resume_on_fsdp2(converted, world):
    run_ranks(_fsdp2_job, world, str(converted))


@pytest.mark.slow
def test_refusals(converted, tmp_path):
    d = converted
    sf = f"{d}/specforge_{{rank}}.pt"
    with pytest.raises(ConversionError, match="give the model"):
        convert_checkpoint(sf, tmp_path / "x.pt")
    with pytest.raises(ConversionError, match="trainable parameters"):
        convert_checkpoint(sf, tmp_path / "x.pt", model=lambda: make_model().blocks[0])
    with pytest.raises(ConversionError, match="do not hold the parameters"):
        convert_checkpoint(
            f"{d}/local_flat_{{rank}}.pt", tmp_path / "x.pt", model=lambda: make_model(hidden=9)
        )
    with pytest.raises(ConversionError, match="shape"):
        convert_checkpoint(f"{d}/full.pt", tmp_path / "x.pt", model=lambda: make_model(hidden=9))
    # One rank's file alone: its shards do not make whole tensors, and it says which.
    (tmp_path / "one_0.pt").write_bytes((d / "specforge_0.pt").read_bytes())
    with pytest.raises(ConversionError, match="holds one rank's pieces of the optimizer") as e:
        convert_checkpoint(f"{tmp_path}/one_{{rank}}.pt", tmp_path / "x.pt", model=MODEL)
    assert "--rebuild-missing WEIGHTS" in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "x.pt").exists()
    assert cli.main(["convert-checkpoint", sf, str(tmp_path / "x.pt")]) == 2


def test_one_file_of_whole_masters_converts_without_a_process_group(tmp_path):
    """compat on a model FSDP1 does not shard (one process, NO_SHARD) keeps whole masters."""
    old = compat.BF16Optimizer(make_model(), LR, **KW)
    for step in range(2):
        x, y = global_batch(step)
        loss_fn(old.model, x, y).backward()
        old.step()
    # SpecForge's own scheduler state (its CosineAnnealingWarmupLR's state_dict) for this step
    own = old.scheduler.state_dict()
    specforge = {
        **{k: v for k, v in own.items() if k not in ("after_scheduler", "warmup_steps")},
        "warmup_epochs": own["warmup_steps"],
        "finished": False,
        "after_scheduler_type": "CosineAnnealingLR",
        "after_scheduler_dict": own["after_scheduler"],
    }
    state = {**old.state_dict(), "scheduler_state_dict": specforge, "epoch": 1}
    torch.save(state, tmp_path / "optim.pt")
    assert convert_checkpoint(tmp_path / "optim.pt", tmp_path / "new.pt", model=MODEL) == (
        "specforge"
    )
    assert torch.load(tmp_path / "new.pt", weights_only=False)["scheduler_state_dict"] == own
    new = fsdp2_port.BF16Optimizer(make_model(seed=1), LR, **KW)
    new.load_state_dict(torch.load(tmp_path / "new.pt", weights_only=False))
    for n, a, b in zip(new.param_names, new.fp32_params, old.fp32_params):
        assert torch.equal(a, b), n
        for key in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(new.optimizer.state[a][key], old.optimizer.state[b][key]), n
    assert new.scheduler.state_dict() == old.scheduler.state_dict()


@pytest.mark.slow
def test_rank0_only_state_is_rebuilt_from_the_weights_when_asked(converted, tmp_path, capsys):
    """SpecForge's training_state.pt: rank 0's pieces only. Without the option: one line naming
    the incomplete parameters. With --rebuild-missing: saved elements bit for bit, missing
    masters from the weights (fp32 here: exactly the lost masters), missing moments zero, a
    parameter with nothing saved restarts Adam (step 0); announced, recorded, warned on load."""
    d = converted
    truth = torch.load(d / "ref_specforge.pt", weights_only=False)["truth"]
    rank0 = torch.load(d / "specforge_0.pt", weights_only=False)
    torch.save(rank0, tmp_path / "training_state.pt")
    torch.save(truth["fp32_params"], tmp_path / "weights.pt")  # the fp32 model's own weights
    src, out = str(tmp_path / "training_state.pt"), str(tmp_path / "new.pt")
    layout = dict(make_model().named_parameters())
    saved = {n: rank0["fp32_params"][i].numel() for i, n in enumerate(layout)}
    short = [n for n, k in saved.items() if k < layout[n].numel()]
    with pytest.raises(ConversionError, match=f"of {len(short)} parameters are incomplete") as e:
        convert_checkpoint(src, out, model=MODEL)
    first = short[0]
    assert f"{first!r} ({saved[first]} of {layout[first].numel()} elements saved)" in str(e.value)
    args = ["convert-checkpoint", src, out, "--model", MODEL]
    assert cli.main([*args, "--rebuild-missing", str(tmp_path / "weights.pt")]) == 0
    printed = capsys.readouterr().out
    assert "fp32 masters rebuilt from" in printed and "fsdp2_port_rebuilt" in printed
    got = torch.load(out, weights_only=False)
    record = got["fsdp2_port_rebuilt"]["parameters"]
    assert record == {
        n: {"saved": k, "total": layout[n].numel()}
        for n, k in saved.items()
        if k < layout[n].numel()
    }
    assert any(k == 0 for k in saved.values()) and any(v["saved"] > 0 for v in record.values())
    for n, master in truth["fp32_params"].items():
        assert torch.equal(got["fp32_params"][n], master), n
        k, state = saved[n], got["optimizer_state_dict"]["state"][n]
        for key in ("exp_avg", "exp_avg_sq"):
            want = truth["optimizer_state_dict"]["state"][n][key].reshape(-1).clone()
            want[k:] = 0
            assert torch.equal(state[key].reshape(-1), want), (n, key)
        assert state["step"].item() == (0 if k == 0 else SAVE_AT), n
    new = fsdp2_port.BF16Optimizer(make_model(seed=1), LR, **KW)
    with pytest.warns(UserWarning, match="converted with --rebuild-missing"):
        new.load_state_dict(got)
    # Weights of another step are refused: they are not the saved masters cast.
    moved = {n: t + 1.0 for n, t in truth["fp32_params"].items()}
    torch.save(moved, tmp_path / "moved.pt")
    with pytest.raises(ConversionError, match="saved at another step"):
        convert_checkpoint(src, out, model=MODEL, rebuild_missing=tmp_path / "moved.pt")
