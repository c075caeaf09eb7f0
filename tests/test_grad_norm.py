"""The norm rule without a process group: torch's clip_grad_norm_, bit for bit on fp32."""

import math
import warnings

import pytest
import torch

from fsdp2_port.train import grad_norm


def _params(dtype=torch.float32, seed=0):
    """Tensors of mixed shapes and scales, one empty, one without a gradient."""
    g = torch.Generator().manual_seed(seed)
    shapes = [(7, 3), (11,), (0,), (4, 5, 6), (1,), (2, 2)]
    params = []
    for i, shape in enumerate(shapes):
        p = torch.nn.Parameter(torch.zeros(shape, dtype=dtype))
        p.grad = (torch.randn(shape, generator=g) * 10 ** (i - 2)).to(dtype)
        params.append(p)
    params.append(torch.nn.Parameter(torch.zeros(3, dtype=dtype)))  # grad None
    return params


def _clone(params):
    out = []
    for p in params:
        q = torch.nn.Parameter(p.detach().clone())
        q.grad = None if p.grad is None else p.grad.clone()
        out.append(q)
    return out


@pytest.mark.parametrize("foreach", [None, False])
@pytest.mark.parametrize("p", [1.0, 2.0, 3.5, math.inf])
def test_clip_equals_torch_bit_for_bit(p, foreach):
    # torch's inf-norm fails on an empty tensor (no identity for max); ours leaves it out.
    ours = _params()
    ref = [q for q in _params() if p != math.inf or q.numel() > 0]
    want = torch.nn.utils.clip_grad_norm_(ref, 0.5, p, foreach=foreach)
    grads = [q.grad for q in ours if q.grad is not None]
    norm, applied = grad_norm.clip_(grads, None, 0.5, p, foreach=foreach)
    assert applied
    assert norm.dtype == torch.float32 and norm.shape == ()
    assert torch.equal(norm, want), (norm.item(), want.item())
    assert want.item() > 0.5  # the clip fired: the grads below were really scaled
    for a, b in zip([q for q in ours if p != math.inf or q.numel() > 0], ref):
        assert (a.grad is None) == (b.grad is None)
        if a.grad is not None:
            assert torch.equal(a.grad, b.grad)


def test_no_clip_below_max_norm_leaves_grads_bitwise():
    params = _params()
    before = [None if q.grad is None else q.grad.clone() for q in params]
    norm = grad_norm.total_norm([q.grad for q in params if q.grad is not None])
    grad_norm.clip_([q.grad for q in params if q.grad is not None], None, norm.item() * 10)
    for q, b in zip(params, before):
        assert q.grad is None or torch.equal(q.grad, b)


def test_bf16_grads_accumulate_in_fp32():
    """bf16 grads: an fp32 norm, as close to the fp64 truth as fp32 allows.

    Each element is exact in bf16, so the only error is fp32 accumulation (~1e-6 relative);
    torch's own bf16 path rounds per-tensor norms and their sum to 8 bits (~4e-3).
    """
    params = _params(torch.bfloat16)
    grads = [q.grad for q in params if q.grad is not None]
    truth = torch.cat([g.double().flatten() for g in grads]).norm()
    ours = grad_norm.total_norm(grads)
    assert ours.dtype == torch.float32
    assert abs(ours.double() - truth) / truth < 1e-6
    torch_bf16 = torch.nn.utils.get_total_norm(grads)
    assert torch_bf16.dtype == torch.bfloat16
    assert abs(torch_bf16.double() - truth) / truth > abs(ours.double() - truth) / truth


def test_empty_gradient_list_is_zero_norm():
    assert torch.equal(grad_norm.total_norm([]), torch.tensor(0.0))


@pytest.mark.parametrize("p", [0, -1.0, float("nan"), -math.inf])
def test_rejects_norm_types_that_are_not_norms(p):
    with pytest.raises(ValueError, match="norm_type"):
        grad_norm.total_norm([torch.ones(2)], None, p)


def test_copies_without_a_group_are_refused():
    with pytest.raises(ValueError, match="process group"):
        grad_norm.total_norm([torch.ones(2)], [2])


def test_nonfinite_policies():
    bad = torch.tensor(float("inf"))
    assert grad_norm.apply_nonfinite_policy(bad, "ignore")
    with pytest.raises(RuntimeError, match="nonfinite='raise'"):
        grad_norm.apply_nonfinite_policy(bad, "raise")
    with pytest.warns(UserWarning, match="skipping"):
        assert not grad_norm.apply_nonfinite_policy(bad, "skip")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert grad_norm.apply_nonfinite_policy(torch.tensor(3.0), "skip")
    with pytest.raises(ValueError, match="nonfinite"):
        grad_norm.check_nonfinite_policy("drop")


def test_skip_policy_leaves_grads_untouched():
    g = torch.tensor([1.0, float("nan")])
    with pytest.warns(UserWarning):
        norm, applied = grad_norm.clip_([g], None, 0.1, nonfinite="skip")
    assert not applied and norm.isnan()
    assert g[0] == 1.0


@pytest.mark.parametrize("p", [1.0, 2.0, math.inf])
def test_public_clip_on_plain_tensors_is_torch_bit_for_bit(p):
    import fsdp2_port

    ours = [q for q in _params() if q.numel() > 0]
    ref = [q for q in _params() if q.numel() > 0]
    norm = fsdp2_port.clip_grad_norm_(ours, 0.5, p)
    assert torch.equal(norm, torch.nn.utils.clip_grad_norm_(ref, 0.5, p))
    assert all(a.grad is None or torch.equal(a.grad, b.grad) for a, b in zip(ours, ref))
    grads = [q.grad for q in _params() if q.grad is not None and q.numel() > 0]
    assert torch.equal(
        fsdp2_port.global_grad_norm(grads, p), torch.nn.utils.get_total_norm(grads, p)
    )


def test_public_clip_nonfinite_options():
    import fsdp2_port

    q = torch.nn.Parameter(torch.zeros(2))
    q.grad = torch.tensor([1.0, math.inf])
    with pytest.raises(RuntimeError, match="nonfinite='raise'"):
        fsdp2_port.clip_grad_norm_([q], 1.0, error_if_nonfinite=True)
    with pytest.warns(UserWarning, match="skipping"):
        fsdp2_port.clip_grad_norm_([q], 1.0, nonfinite="skip")
    assert q.grad[0] == 1.0
    fsdp2_port.clip_grad_norm_([q], 1.0)  # torch's behaviour: scaled by a zero coefficient
    assert q.grad[0] == 0.0


@pytest.mark.parametrize("p", [1.0, 2.0, 3.5, math.inf])
def test_cpu_chunks_count_every_element_once_in_fp32(p, monkeypatch):
    """The group path's chunked read: small pieces flattened together, large fp32 ones as
    they are, large low-precision ones cast slice by slice, empty ones skipped; fp32 sums
    within 1e-6 of the fp64 truth."""
    monkeypatch.setattr(grad_norm, "CPU_CHUNK", 64)
    g = torch.Generator().manual_seed(0)
    shapes = [(5, 3), (0,), (200,), (7, 30), (64,), (3,), (2, 2), (0, 4)]
    pieces = []
    for i, shape in enumerate(shapes):
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            pieces.append((torch.randn(shape, generator=g) * 10 ** (i % 3 - 1)).to(dtype))
    pieces.append(torch.randn(50, 3, generator=g).t())  # not contiguous
    pieces.append(torch.randn(9, generator=g, dtype=torch.float64))  # per-tensor norm
    chunks = [
        c
        for _, dtype, same in grad_norm._by_device_and_dtype(pieces)
        if dtype != torch.float64
        for c in grad_norm._cpu_chunks(same)
    ]
    assert all(c.dtype == torch.float32 and c.dim() == 1 and c.numel() > 0 for c in chunks)
    assert sum(c.numel() for c in chunks) == sum(t.numel() for t in pieces[:-1])
    got = grad_norm._power_sum(pieces, p, None, torch.device("cpu"))
    flat = torch.cat([t.double().flatten() for t in pieces])
    want = flat.abs().max() if p == math.inf else flat.abs().pow(p).sum()
    assert got.dtype in (torch.float32, torch.float64)
    assert abs(got.double() - want) / want < 1e-6, (got, want)
    assert grad_norm._power_sum([torch.zeros(0)], p, None, torch.device("cpu")) is None
