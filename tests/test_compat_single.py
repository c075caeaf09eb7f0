"""fsdp2_port.compat.BF16Optimizer in one process: the step, the masters, the state dict."""

import io

import pytest
import torch

from fsdp2_port.compat import BF16Optimizer
from tests.models import global_batch, loss_fn, make_model


def _adamw_step_by_hand(master, grad, state, lr, wd, betas=(0.9, 0.999), eps=1e-8):
    """AdamW in torch's single-tensor order, so the comparison can be bitwise."""
    b1, b2 = betas
    state["step"] = state.get("step", 0.0) + 1.0
    exp_avg = state.setdefault("exp_avg", torch.zeros_like(master))
    exp_avg_sq = state.setdefault("exp_avg_sq", torch.zeros_like(master))
    master.mul_(1 - lr * wd)
    exp_avg.lerp_(grad, 1 - b1)
    exp_avg_sq.mul_(b2).addcmul_(grad, grad, value=1 - b2)
    step_size = lr / (1 - b1 ** state["step"])
    denom = (exp_avg_sq.sqrt() / (1 - b2 ** state["step"]) ** 0.5).add_(eps)
    master.addcdiv_(exp_avg, denom, value=-step_size)


def _train(opt, model, steps, dtype):
    norms = []
    for step in range(steps):
        x, y = global_batch(step, dtype=dtype)
        loss_fn(model, x, y).backward()
        norms.append(opt.step())
    return norms


def test_step_is_hand_written_fp32_adamw_with_the_same_clip():
    """Bitwise: same grads, torch's clip, AdamW by hand; bf16 params == master.to(bf16)."""
    model, ref_model = make_model(torch.bfloat16), make_model(torch.bfloat16)
    lr, wd, max_norm, warmup, total = 1e-2, 0.1, 1.0, 2, 10
    opt = BF16Optimizer(model, lr, wd, max_norm, total, warmup / total, "constant")
    masters = [p.detach().float().clone() for p in ref_model.parameters()]
    states = [{} for _ in masters]
    for step in range(4):
        x, y = global_batch(step, dtype=torch.bfloat16)
        loss_fn(model, x, y).backward()
        loss_fn(ref_model, x, y).backward()
        grads = [p.grad.float() for p in ref_model.parameters()]
        want_norm = torch.nn.utils.get_total_norm(grads)
        coef = torch.clamp(max_norm / (want_norm + 1e-6), max=1.0)
        lr_t = min((step + 1) / warmup, 1.0) * lr
        for m, g, s in zip(masters, grads, states):
            _adamw_step_by_hand(m, g * coef, s, lr_t, wd)
        with torch.no_grad():
            for p, m in zip(ref_model.parameters(), masters):
                p.copy_(m)
                p.grad = None
        norm = opt.step()
        assert want_norm > max_norm  # clipping fired
        assert torch.equal(norm, want_norm)
        for m_ours, m_ref in zip(opt.fp32_params, masters):
            assert torch.equal(m_ours, m_ref)
        for p, m in zip(opt.model_params, opt.fp32_params):
            assert p.dtype == torch.bfloat16 and torch.equal(p, m.to(torch.bfloat16))
            assert p.grad is None and m.grad is None


def test_fp32_parameters_are_their_own_masters():
    model = make_model(torch.float32)
    opt = BF16Optimizer(model, 1e-2)
    assert all(m is p for m, p in zip(opt.fp32_params, model.parameters()))
    before = [p.detach().clone() for p in model.parameters()]
    _train(opt, model, 1, torch.float32)
    assert all(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_frozen_parameters_get_no_master():
    model = make_model(torch.bfloat16)
    model.embed.requires_grad_(False)
    opt = BF16Optimizer(model, 1e-2)
    assert len(opt.fp32_params) == len(list(model.parameters())) - 2
    frozen = model.embed.weight.detach().clone()
    _train(opt, model, 2, torch.bfloat16)
    assert torch.equal(frozen, model.embed.weight)


def test_offloaded_masters_train_like_resident_ones():
    a, b = make_model(torch.bfloat16), make_model(torch.bfloat16)
    opt_a, opt_b = BF16Optimizer(a, 1e-2), BF16Optimizer(b, 1e-2, offload_master=True)
    assert all(m.device.type == "cpu" for m in opt_b.fp32_params)
    assert [n.item() for n in _train(opt_a, a, 3, torch.bfloat16)] == [
        n.item() for n in _train(opt_b, b, 3, torch.bfloat16)
    ]


def test_nonfinite_skip_updates_nothing():
    model = make_model(torch.bfloat16)
    opt = BF16Optimizer(model, 1e-2)
    _train(opt, model, 1, torch.bfloat16)
    masters = [m.detach().clone() for m in opt.fp32_params]
    params = [p.detach().clone() for p in model.parameters()]
    moments = [opt.optimizer.state[m]["exp_avg"].clone() for m in opt.fp32_params]
    lr = opt.get_learning_rate()
    x, y = global_batch(5, dtype=torch.bfloat16)
    loss_fn(model, x, y).backward()
    model.head.weight.grad[0, 0] = float("nan")
    with pytest.warns(UserWarning, match="skipping"):
        norm = opt.step()
    assert norm.isnan() and opt.skipped_steps == 1
    assert all(torch.equal(a, b) for a, b in zip(masters, opt.fp32_params))
    assert all(torch.equal(a, b) for a, b in zip(params, model.parameters()))
    assert all(
        torch.equal(a, opt.optimizer.state[m]["exp_avg"]) for a, m in zip(moments, opt.fp32_params)
    )
    assert opt.optimizer.state[opt.fp32_params[0]]["step"].item() == 1
    assert opt.get_learning_rate() == lr
    assert all(p.grad is None for p in model.parameters())


def test_nonfinite_raise():
    model = make_model(torch.float32)
    opt = BF16Optimizer(model, 1e-2, nonfinite="raise")
    x, y = global_batch(0)
    loss_fn(model, x, y).backward()
    model.embed.bias.grad[0] = float("inf")
    with pytest.raises(RuntimeError, match="nonfinite='raise'"):
        opt.step()


def test_state_dict_resume_is_bitwise_an_uninterrupted_run():
    full_model = make_model(torch.bfloat16)
    full = BF16Optimizer(full_model, 1e-2, total_steps=20, warmup_ratio=0.1)
    want = [n.item() for n in _train(full, full_model, 6, torch.bfloat16)]

    model = make_model(torch.bfloat16)
    opt = BF16Optimizer(model, 1e-2, total_steps=20, warmup_ratio=0.1)
    _train(opt, model, 3, torch.bfloat16)
    saved = opt.state_dict()
    assert set(saved) == {
        "optimizer_state_dict",
        "scheduler_state_dict",
        "fp32_params",
        "max_grad_norm",
        "lr_scheduler_type",
    }
    saved = {**saved, "epoch": 3, "global_step": 300, "args": {"lr": 1e-2}}  # SpecForge extras
    buffer = io.BytesIO()
    torch.save(saved, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)

    resumed_model = make_model(torch.bfloat16, seed=1)  # other weights: the load must fix them
    resumed = BF16Optimizer(resumed_model, 1e-2, total_steps=20, warmup_ratio=0.1)
    resumed.load_state_dict(loaded)
    for p, m in zip(resumed_model.parameters(), resumed.fp32_params):
        assert torch.equal(p, m.to(torch.bfloat16))
    norms = [n.item() for n in _train_from(resumed, resumed_model, 3, 6)]
    assert norms == want[3:]
    for a, b in zip(full.fp32_params, resumed.fp32_params):
        assert torch.equal(a, b)


def _train_from(opt, model, start, stop):
    out = []
    for step in range(start, stop):
        x, y = global_batch(step, dtype=torch.bfloat16)
        loss_fn(model, x, y).backward()
        out.append(opt.step())
    return out


def test_load_rejects_mismatches_clearly():
    model = make_model(torch.bfloat16)
    saved = BF16Optimizer(model, 1e-2, max_grad_norm=0.5).state_dict()
    with pytest.raises(ValueError, match=r"max_grad_norm=0\.5"):
        BF16Optimizer(make_model(torch.bfloat16), 1e-2, max_grad_norm=1.0).load_state_dict(saved)
    with pytest.raises(ValueError, match="lr_scheduler='cosine'"):
        BF16Optimizer(make_model(torch.bfloat16), 1e-2, lr_scheduler="constant").load_state_dict(
            saved
        )
    small = make_model(torch.bfloat16)
    small.head.requires_grad_(False)
    with pytest.raises(ValueError, match="another model"):
        BF16Optimizer(small, 1e-2).load_state_dict(saved)
    with pytest.raises(KeyError, match="fp32_params"):
        BF16Optimizer(make_model(torch.bfloat16), 1e-2).load_state_dict({"epoch": 1})


def test_constructor_errors():
    model = make_model()
    model.requires_grad_(False)
    with pytest.raises(ValueError, match="no trainable parameters"):
        BF16Optimizer(model, 1e-2)
    with pytest.raises(ValueError, match="nonfinite"):
        BF16Optimizer(make_model(), 1e-2, nonfinite="zero")
