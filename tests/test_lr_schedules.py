"""SpecForge's schedules: linear warmup, then torch's cosine (or a constant lr)."""

import math

import pytest
import torch

from fsdp2_port.train.lr_schedules import build_scheduler


def _lrs(kind, total, ratio, steps, base=2.0):
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.AdamW([p], lr=base)
    sched = build_scheduler(opt, kind, total, ratio)
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out, sched


def test_cosine_warmup_matches_the_closed_form():
    """Warmup is exact; torch's cosine is recursive, so it matches its closed form to 1e-12."""
    total, warmup, base = 20, 4, 2.0
    lrs, sched = _lrs("cosine", total, warmup / total, total, base)
    for t in range(warmup):
        assert lrs[t] == (t + 1) / warmup * base
    for t in range(warmup, total):
        e = t - warmup
        want = 0.5 * base * (1 + math.cos(math.pi * e / (total - warmup)))
        assert lrs[t] == pytest.approx(want, rel=1e-12, abs=1e-12)
    assert sched.after_scheduler.T_max == total - warmup


def test_constant_after_warmup():
    lrs, sched = _lrs("constant", 100, 0.03, 8)
    assert lrs == [2.0 / 3, 4.0 / 3, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0]
    assert sched.after_scheduler is None


def test_no_warmup_starts_at_base_lr():
    lrs, _ = _lrs("cosine", 10, 0.0, 3)
    assert lrs[0] == 2.0 and lrs[1] < 2.0


def test_state_dict_resumes_the_schedule():
    full, _ = _lrs("cosine", 30, 0.1, 12)
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.AdamW([p], lr=2.0)
    sched = build_scheduler(opt, "cosine", 30, 0.1)
    for _ in range(5):
        opt.step()
        sched.step()
    saved_opt, saved_sched = opt.state_dict(), sched.state_dict()
    assert "optimizer" not in str(saved_sched.keys())
    opt2 = torch.optim.AdamW([p], lr=2.0)
    sched2 = build_scheduler(opt2, "cosine", 30, 0.1)
    opt2.load_state_dict(saved_opt)
    sched2.load_state_dict(saved_sched)
    resumed = []
    for _ in range(7):
        resumed.append(opt2.param_groups[0]["lr"])
        opt2.step()
        sched2.step()
    assert resumed == full[5:]


def test_bad_arguments():
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.AdamW([p], lr=1.0)
    with pytest.raises(ValueError, match="lr_scheduler"):
        build_scheduler(opt, "linear", 10, 0.1)
    with pytest.raises(ValueError, match="total_steps"):
        build_scheduler(opt, "cosine", 10, 1.0)
