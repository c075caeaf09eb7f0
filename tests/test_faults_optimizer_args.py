"""Both BF16 optimizers check their numbers at construction; None/inf = no clip."""

import math

import pytest
import torch

import fsdp2_port
from fsdp2_port import compat
from tests.models import global_batch, loss_fn, make_model

OPTIMIZERS = [compat.BF16Optimizer, fsdp2_port.BF16Optimizer]
LR = 1e-2

BAD = [
    ("max_grad_norm", -1.0),
    ("max_grad_norm", 0),
    ("max_grad_norm", 0.0),
    ("max_grad_norm", float("nan")),
    ("max_grad_norm", -math.inf),
    ("max_grad_norm", "0.5"),
    ("max_grad_norm", True),
    ("lr", -1e-3),
    ("lr", math.inf),
    ("lr", float("nan")),
    ("lr", "1e-3"),
    ("weight_decay", -0.1),
    ("weight_decay", float("nan")),
    ("total_steps", 0),
    ("total_steps", -5),
    ("total_steps", 10.5),
    ("warmup_ratio", -0.1),
    ("warmup_ratio", math.inf),
    ("warmup_ratio", float("nan")),
]


@pytest.mark.parametrize("cls", OPTIMIZERS, ids=lambda c: c.__module__)
@pytest.mark.parametrize("name,value", BAD, ids=[f"{n}={v!r}" for n, v in BAD])
def test_bad_numbers_are_refused_at_construction(cls, name, value):
    kwargs = {"lr": LR, name: value}
    with pytest.raises(ValueError, match=rf"{name} must be .*got {value!r}"):
        cls(make_model(), **kwargs)


@pytest.mark.parametrize("cls", OPTIMIZERS, ids=lambda c: c.__module__)
def test_a_bad_max_grad_norm_says_how_to_disable_clipping(cls):
    with pytest.raises(ValueError, match=r"max_grad_norm=None or inf disables clipping"):
        cls(make_model(), LR, max_grad_norm=0)


def _reference_kernel(cls):
    """The AdamW kernel each optimizer runs on CPU fp32 masters (see FUSED_BY_DEFAULT)."""
    return {"fused": True} if cls.FUSED_BY_DEFAULT else {"foreach": False}


@pytest.mark.parametrize("cls", OPTIMIZERS, ids=lambda c: c.__module__)
@pytest.mark.parametrize("no_clip", [None, math.inf], ids=["None", "inf"])
def test_no_clip_trains_as_unclipped_adamw(cls, no_clip):
    """Bitwise against torch's AdamW on an fp32 replica: the same grads (same model, seed and
    batch), the same kernel, the same lr (constant, no warmup), and a coefficient of exactly
    1 — nothing in the update may differ, so the tolerance is 0."""
    model, replica = make_model(), make_model()
    opt = cls(model, LR, 0.1, no_clip, 10, 0.0, "constant")
    ref = torch.optim.AdamW(replica.parameters(), LR, weight_decay=0.1, **_reference_kernel(cls))
    for step in range(3):
        x, y = global_batch(step)
        loss_fn(model, x, y).backward()
        loss_fn(replica, x, y).backward()
        want = torch.nn.utils.get_total_norm([p.grad for p in replica.parameters()])
        ref.step()
        ref.zero_grad()
        norm = opt.step()
        assert want > 1.0  # any max_grad_norm <= 1 would have clipped this step
        assert torch.equal(norm, want) and torch.equal(opt.last_grad_norm, want)
        for ours, theirs in zip(model.parameters(), replica.parameters()):
            assert torch.equal(ours, theirs)


@pytest.mark.parametrize("cls", OPTIMIZERS, ids=lambda c: c.__module__)
def test_none_and_inf_checkpoints_are_interchangeable(cls):
    """Both mean "no clipping": a checkpoint saved with one loads into the other."""
    saved = cls(make_model(), LR, max_grad_norm=None).state_dict()
    cls(make_model(), LR, max_grad_norm=math.inf).load_state_dict(saved)
    with pytest.raises(ValueError, match="max_grad_norm"):
        cls(make_model(), LR, max_grad_norm=1.0).load_state_dict(saved)
