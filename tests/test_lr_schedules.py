"""SpecForge's schedules (``CosineAnnealingWarmupLR``, ``ConstantWarmupLR``), step for step.

The reference is SpecForge's schedule written out in closed form here, from what its classes do
with torch's ``CosineAnnealingLR``: linear warmup, then at step ``W`` the cosine's chained form
asked at its epoch 0 (from ``group["lr"]``), then the cosine stepped. Nothing of SpecForge is
imported (CI cannot fetch it); ``benchmarks/specforge/schedules.py`` checks the same grid
bitwise against the real classes of a checkout, and so does the last test here when
``FSDP2_PORT_SPECFORGE`` names one.
"""

import math
import os
import warnings
from pathlib import Path

import pytest
import torch
from torch.optim.lr_scheduler import CosineAnnealingLR

import fsdp2_port
from fsdp2_port import compat
from fsdp2_port.train.lr_schedules import build_scheduler


def _cosine_chains_at_epoch_zero() -> bool:
    """Whether this torch's cosine, asked its lr at epoch 0 outside its first step, applies its
    chained form (releases that test "initial step") or returns ``group["lr"]`` (older ones)."""
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    cosine = CosineAnnealingLR(opt, T_max=4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cosine.get_lr()[0] != 1.0


CHAINS = _cosine_chains_at_epoch_zero()


def specforge_lr(kind: str, total: int, ratio: float, s: int, b: float) -> float:
    """SpecForge's lr after ``s`` scheduler steps (``s = 0``: at construction)."""
    w = int(ratio * total)
    if s < w:
        return (s + 1) / w * b
    if kind == "constant":
        return b
    t, e = abs(total - w), s - w  # cos is even: a negative T_max (warmup > total) is |T|
    if t == 0:
        raise ZeroDivisionError
    standard = b * (1 + math.cos(math.pi * e / t)) / 2
    if not CHAINS or e > t:
        return standard  # past T the cosine's restart branch lands back on the standard curve
    if t == 1:  # the restart branch at epoch 0: group["lr"] (b) + b (1 - cos(pi)) / 2
        return 2 * b if e == 0 else standard
    return b * (1 + math.cos(math.pi * e / t)) / (1 + math.cos(math.pi / t))


def _lrs(kind, total, ratio, steps, base=2e-4):
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.AdamW([p], lr=base)
    sched = build_scheduler(opt, kind, total, ratio)
    out = [opt.param_groups[0]["lr"]]
    for _ in range(steps):
        opt.step()
        sched.step()
        out.append(opt.param_groups[0]["lr"])
    return out, opt, sched


# The cosine phase multiplies one ratio per step (each exact to a few ulps) and 1 + cos(x) near
# x = pi loses digits to cancellation in both forms: 1e-9 relative, 1e-12 of b absolute.
REL, ABS = 1e-9, 1e-12

GRID = [
    (1, 0.0),  # T = 1 from the start
    (2, 0.5),  # T = 1 after one warmup step
    (20, 0.99),  # W = 19, T = 1
    (7, 0.5),
    (10, 0.0),
    (10, 0.2),
    (30, 0.1),
    (100, 0.015),  # W = 1
    (800, 0.015),  # SpecForge's default ratio
    (8, 1.5),  # warmup longer than the run (T_max < 0)
]


@pytest.mark.parametrize("kind", ["cosine", "constant"])
@pytest.mark.parametrize("total,ratio", GRID)
def test_every_step_is_specforges(kind, total, ratio):
    """Warmup bit for bit, the cosine phase to its closed form, past total_steps too."""
    base = 2e-4
    w = int(ratio * total)
    if kind == "constant" and not w < total:
        with pytest.raises(ValueError, match=r"warmup_steps must be in \[0, total_steps\)"):
            build_scheduler(
                torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0), kind, total, ratio
            )
        return
    steps = 2 * total + 5
    lrs, _, _ = _lrs(kind, total, ratio, steps, base)
    for s, lr in enumerate(lrs):
        want = specforge_lr(kind, total, ratio, s, base)
        if s < w or kind == "constant":
            assert lr == want, (s, lr, want)
        else:
            assert lr == pytest.approx(want, rel=REL, abs=ABS * base), (s, lr, want)


def test_the_handover_is_not_the_plain_cosine():
    """What made a swap of SpecForge's optimizer drift: at step W the lr is above b (current
    torch), and with no warmup the very first lr is."""
    if not CHAINS:
        pytest.skip("this torch's cosine returns group['lr'] at epoch 0")
    lrs, _, _ = _lrs("cosine", 10, 0.2, 3, 1e-4)
    assert lrs[2] == pytest.approx(1e-4 * 2 / (1 + math.cos(math.pi / 8)), rel=1e-15)
    assert lrs[2] > 1.039e-4
    first, _, _ = _lrs("cosine", 10, 0.0, 0, 1e-4)
    assert first[0] > 1.025e-4


def test_a_cosine_without_steps_divides_by_zero_at_its_end_as_specforge():
    lrs = []
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.AdamW([p], lr=1.0)
    sched = build_scheduler(opt, "cosine", 4, 1.0)
    with pytest.raises(ZeroDivisionError, match="0 steps long"):
        for _ in range(5):
            lrs.append(opt.param_groups[0]["lr"])
            opt.step()
            sched.step()
    assert lrs == [0.25, 0.5, 0.75, 1.0]


@pytest.mark.parametrize("stop", [1, 3, 4, 9])
def test_own_state_dict_resumes_every_later_step(stop):
    """Saved after ``stop`` steps (in warmup, at the handover, after it), loaded into a fresh
    optimizer and scheduler: the same lrs bit for bit."""
    full, _, _ = _lrs("cosine", 30, 0.1, 20)
    _, opt, sched = _lrs("cosine", 30, 0.1, stop)
    saved_opt, saved_sched = opt.state_dict(), sched.state_dict()
    assert "optimizer" not in saved_sched
    p = torch.nn.Parameter(torch.zeros(1))
    opt2 = torch.optim.AdamW([p], lr=2e-4)
    sched2 = build_scheduler(opt2, "cosine", 30, 0.1)
    opt2.load_state_dict(saved_opt)
    sched2.load_state_dict(saved_sched)
    resumed = [opt2.param_groups[0]["lr"]]
    for _ in range(20 - stop):
        opt2.step()
        sched2.step()
        resumed.append(opt2.param_groups[0]["lr"])
    assert resumed == full[stop:]


def _specforge_state(kind, total, ratio, s, base):
    """SpecForge's scheduler state after ``s`` steps, as its ``state_dict`` lays it out: the
    warmup scheduler's own fields (its ``last_epoch`` stops at W once finished) and the
    after-scheduler's under ``after_scheduler_dict``."""
    w = int(ratio * total)
    finished = s >= w
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=base)
    if kind == "cosine":
        after = CosineAnnealingLR(opt, T_max=total - w)
        after_dict = {**after.state_dict(), "last_epoch": s - w if finished else 0}
        after_dict["_last_lr"] = [specforge_lr(kind, total, ratio, max(s, w), base)]
    else:
        after_dict = {"base_lrs": [base], "last_epoch": s - w if finished else 0}
    last = specforge_lr(kind, total, ratio, s, base)
    return {
        "warmup_epochs": w,
        "finished": finished,
        "base_lrs": [base],
        "last_epoch": w if finished else s,
        "_step_count": (w if finished else s) + 1,
        "_last_lr": [last],
        "after_scheduler_type": "CosineAnnealingLR" if kind == "cosine" else "_FlatLR",
        "after_scheduler_dict": after_dict,
    }


@pytest.mark.parametrize("kind", ["cosine", "constant"])
@pytest.mark.parametrize("stop", [0, 2, 3, 7])
def test_specforge_scheduler_state_resumes(kind, stop):
    """A SpecForge-format state (``after_scheduler_dict``, ``warmup_epochs``) loads, into a
    scheduler built for another run length too (the checkpoint's schedule wins, as in
    SpecForge), and the run continues on SpecForge's curve."""
    total, ratio, base = 20, 0.15, 3e-4
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.AdamW([p], lr=base)
    sched = build_scheduler(opt, kind, 50, 0.5)
    sched.load_state_dict(_specforge_state(kind, total, ratio, stop, base))
    assert sched.last_epoch == stop and sched.warmup_steps == 3
    lrs = [opt.param_groups[0]["lr"]]
    for _ in range(15):
        opt.step()
        sched.step()
        lrs.append(opt.param_groups[0]["lr"])
    for k, lr in enumerate(lrs):
        want = specforge_lr(kind, total, ratio, stop + k, base)
        assert lr == pytest.approx(want, rel=REL, abs=ABS * base), (stop + k, lr, want)


def test_specforge_state_of_another_kind_is_refused_in_one_line():
    p = torch.nn.Parameter(torch.zeros(1))
    sched = build_scheduler(torch.optim.AdamW([p], lr=1.0), "constant", 10, 0.2)
    with pytest.raises(ValueError, match="after_scheduler_type='CosineAnnealingLR'") as err:
        sched.load_state_dict(_specforge_state("cosine", 10, 0.2, 3, 1.0))
    assert "\n" not in str(err.value)
    cosine = build_scheduler(torch.optim.AdamW([p], lr=1.0), "cosine", 10, 0.2)
    bare = {**_specforge_state("cosine", 10, 0.2, 3, 1.0)}
    del bare["after_scheduler_dict"]
    with pytest.raises(ValueError, match="no after_scheduler_dict"):
        cosine.load_state_dict(bare)


# -- SpecForge's own tests' expectations (tests/test_optimizer/test_lr_scheduler.py) -----------

OPTIMIZERS = [fsdp2_port.BF16Optimizer, compat.BF16Optimizer]


def _optimizer(cls, *, scheduler="cosine", total_steps=4, warmup_ratio=0.0):
    model = torch.nn.Linear(2, 2, bias=False)
    return model, cls(
        model,
        lr=1e-3,
        max_grad_norm=1.0,
        total_steps=total_steps,
        warmup_ratio=warmup_ratio,
        lr_scheduler=scheduler,
    )


@pytest.mark.parametrize("cls", OPTIMIZERS, ids=lambda c: c.__module__)
def test_specforges_scheduler_errors(cls):
    with pytest.raises(ValueError, match=r"unsupported lr_scheduler='linear'; expected one of"):
        _optimizer(cls, scheduler="linear")
    _, cosine = _optimizer(cls, scheduler="cosine")
    _, constant = _optimizer(cls, scheduler="constant")
    with pytest.raises(ValueError, match=r"checkpoint optimizer used lr_scheduler='cosine'"):
        constant.load_state_dict(cosine.state_dict())
    legacy = constant.state_dict()
    del legacy["lr_scheduler_type"]  # SpecForge's FSDP1-era checkpoints: always cosine
    with pytest.raises(ValueError, match=r"checkpoint optimizer used lr_scheduler='cosine'"):
        constant.load_state_dict(legacy)
    _, clipped = _optimizer(cls)
    clipped.max_grad_norm = 2.0
    with pytest.raises(ValueError, match=r"checkpoint optimizer used max_grad_norm=2.0"):
        cosine.load_state_dict(clipped.state_dict())
    with pytest.raises(ValueError, match=r"warmup_steps must be in \[0, total_steps\)"):
        _optimizer(cls, scheduler="constant", total_steps=4, warmup_ratio=1.0)


@pytest.mark.parametrize("cls", OPTIMIZERS, ids=lambda c: c.__module__)
def test_optimizer_lr_follows_specforge_through_steps(cls):
    model, opt = _optimizer(cls, total_steps=6, warmup_ratio=0.34)
    seen = [opt.get_learning_rate()]
    for _ in range(8):
        model.weight.grad = torch.ones_like(model.weight)
        opt.step()
        seen.append(opt.get_learning_rate())
    for s, lr in enumerate(seen):
        want = specforge_lr("cosine", 6, 0.34, s, 1e-3)
        assert lr == pytest.approx(want, rel=REL, abs=ABS * 1e-3), (s, lr, want)


# -- against a SpecForge checkout, when one is named --------------------------------------------

SPECFORGE = os.environ.get("FSDP2_PORT_SPECFORGE")


@pytest.mark.skipif(not SPECFORGE, reason="FSDP2_PORT_SPECFORGE names no SpecForge checkout")
def test_bitwise_against_a_specforge_checkout():
    """Every lr of the grid equals the checkout's classes' bit for bit (run by hand: CI has no
    checkout; benchmarks/specforge/schedules.py prints the same comparison)."""
    from benchmarks.specforge.schedules import compare_with_checkout

    assert SPECFORGE is not None
    problems = compare_with_checkout(Path(SPECFORGE), GRID)
    assert not problems, problems[:5]
