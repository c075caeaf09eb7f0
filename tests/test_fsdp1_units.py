"""fsdp2_port's unit selection (``fsdp2_port.fsdp1.units``) against FSDP1's own, in one process.

FSDP1's reference is its auto-wrap (``torch.distributed.fsdp._wrap_utils._auto_wrap``) with a
recording function in place of the wrapper class, on a copy of the same nested model with the
same arguments; its ignored states ``_init_ignored_module_states``; its meta-device init
``_need_to_materialize_module`` / ``_materialize_meta_module`` / ``_get_modules_to_materialize``;
its fp32 hooks ``_override_module_mixed_precision``. Compared exactly: which modules become
units, in which order, with which arguments; every call of a user's policy function or
``lambda_fn`` (module, ``recurse``, ``nonwrapped_numel``) in order; which modules get the fp32
hooks; errors. fsdp2_port's side runs under ``forbid_fsdp1_calls``. These tests use FSDP1's
private functions as the reference for as long as torch ships FSDP1.
"""

from __future__ import annotations

import copy
import functools
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch import nn
from torch.distributed.fsdp import BackwardPrefetch, MixedPrecision, ShardingStrategy
from torch.distributed.fsdp._common_utils import _override_module_mixed_precision
from torch.distributed.fsdp._init_utils import (
    _get_modules_to_materialize,
    _init_ignored_module_states,
    _materialize_meta_module,
    _need_to_materialize_module,
)
from torch.distributed.fsdp._wrap_utils import _auto_wrap
from torch.distributed.fsdp.wrap import (
    CustomPolicy,
    ModuleWrapPolicy,
    _module_wrap_policy,
    _or_policy,
    _Policy,
    _wrap_module_cls_individually,
    always_wrap_policy,
    lambda_auto_wrap_policy,
    size_based_auto_wrap_policy,
    transformer_auto_wrap_policy,
)

from fsdp2_port.fsdp1 import units
from fsdp2_port.prove.no_fsdp1 import forbid_fsdp1_calls

S = ShardingStrategy
BF16 = MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)

# -- the model: nested, uneven sizes, every kind of module the policies single out -----------------


class Attn(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d, bias=False)


class Layer(nn.Module):
    def __init__(self, d: int, h: int) -> None:
        super().__init__()
        self.attn = Attn(d)
        self.norm = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, h), nn.GELU(), nn.Linear(h, d))
        self.bn = nn.BatchNorm1d(d)


class Model(nn.Module):
    """embed 40, layers 164 / 612 / 1332 (ModuleList), extra (ModuleDict), a
    MultiheadAttention (size-based's default leaf), a frozen-able head, a shared module."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(10, 4)
        self.layers = nn.ModuleList([Layer(4, 8), Layer(8, 16), Layer(12, 24)])
        self.extra = nn.ModuleDict({"a": nn.Linear(4, 4), "b": nn.Sequential(nn.Linear(4, 30))})
        self.mha = nn.MultiheadAttention(8, 2)
        self.head = nn.Linear(12, 3)
        self.head_bn = nn.BatchNorm1d(3)
        self.tied = self.extra["a"]  # the same module twice


def _names(model: nn.Module) -> dict[nn.Module, str]:
    return {m: n for n, m in model.named_modules()}


# -- the cases ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    #: the policy, built on the model (so that it can name its modules); ``log`` records what
    #: a user function is asked
    policy: Callable[[Model, Callable[..., None]], Any]
    mixed_precision: MixedPrecision | None = None
    ignored_modules: Callable[[Model], list[nn.Module]] | None = None
    ignored_states: Callable[[Model], list[Any]] | None = None
    use_orig_params: bool = True
    prepare: Callable[[Model], None] | None = None


def _size(n: int, **kw: Any) -> Callable[[Model, Any], Any]:
    return lambda m, log: functools.partial(size_based_auto_wrap_policy, min_num_params=n, **kw)


def _custom(m: Model, log: Callable[..., None]) -> CustomPolicy:
    names = _names(m)

    def choose(module: nn.Module) -> bool | dict[str, Any]:
        log(names[module])
        if module is m.head:
            return {"sharding_strategy": S.SHARD_GRAD_OP, "mixed_precision": None}
        if module is m.extra:
            return {}  # falsy: not a unit
        if module is m:
            return True  # the root: FSDP1's auto-wrap leaves it to the constructor
        return isinstance(module, (Layer, nn.BatchNorm1d)) or module is m.layers[2].mlp[0]

    return CustomPolicy(choose)


def _user_function(m: Model, log: Callable[..., None]) -> Callable[..., bool]:
    names = _names(m)

    def policy(module: nn.Module, recurse: bool, nonwrapped_numel: int) -> bool:
        log(names[module], recurse, nonwrapped_numel)
        if recurse:
            return not isinstance(module, Attn)  # never enter an Attn
        return nonwrapped_numel > 150 or isinstance(module, Attn)

    return policy


def _lambda(m: Model, log: Callable[..., None]) -> Any:
    names = _names(m)

    def fn(module: nn.Module) -> Any:
        log(names[module])
        return 1 if isinstance(module, Attn) else None  # truthy and falsy non-bools

    return functools.partial(lambda_auto_wrap_policy, lambda_fn=fn)


class _Mine(_Policy):
    """A user's own _Policy: its _run_policy is user code."""

    def __init__(self, log: Callable[..., None]) -> None:
        self.log = log

    def _run_policy(self, root_module, ignored_modules, root_kwargs):
        self.log(len(ignored_modules), sorted(set(root_kwargs) - {"policy", "auto_wrap_policy"}))
        return {
            m: {**root_kwargs, "forward_prefetch": True}
            for m in root_module.modules()
            if isinstance(m, Attn) and m not in ignored_modules
        }


def _freeze_head(m: Model) -> None:
    m.head.weight.requires_grad_(False)


CASES: dict[str, Case] = {
    "ModuleWrapPolicy": Case(lambda m, log: ModuleWrapPolicy({Layer})),
    "ModuleWrapPolicy, ignored_modules inside a unit": Case(
        lambda m, log: ModuleWrapPolicy({Layer, nn.Linear}),
        ignored_modules=lambda m: [m.layers[1].mlp, m.head],
    ),
    "ModuleWrapPolicy, mixed precision: BatchNorm apart": Case(
        lambda m, log: ModuleWrapPolicy({Layer}), mixed_precision=BF16
    ),
    "ModuleWrapPolicy, mixed precision with LayerNorm as the exception": Case(
        lambda m, log: ModuleWrapPolicy({Attn}),
        mixed_precision=MixedPrecision(
            param_dtype=torch.bfloat16, _module_classes_to_ignore=[nn.LayerNorm]
        ),
        ignored_modules=lambda m: [m.layers[0]],
    ),
    "ModuleWrapPolicy, a partly frozen unit with use_orig_params (warns)": Case(
        lambda m, log: ModuleWrapPolicy({nn.Linear}), prepare=_freeze_head
    ),
    "CustomPolicy with kwargs overrides": Case(_custom),
    "CustomPolicy, mixed precision (a chosen BatchNorm keeps its override)": Case(
        _custom, mixed_precision=BF16, ignored_states=lambda m: list(m.layers[0].parameters())
    ),
    "CustomPolicy, ignored_states as modules": Case(
        _custom, ignored_states=lambda m: [m.layers[1], m.extra]
    ),
    "a user's _Policy": Case(
        lambda m, log: _Mine(log), mixed_precision=BF16, ignored_modules=lambda m: [m.mha]
    ),
    "transformer_auto_wrap_policy": Case(
        lambda m, log: functools.partial(
            transformer_auto_wrap_policy, transformer_layer_cls={Layer}
        )
    ),
    "partials that bind the arguments every call replaces (oumi)": Case(
        lambda m, log: functools.partial(
            transformer_auto_wrap_policy,
            transformer_layer_cls={Layer},
            recurse=False,
            nonwrapped_numel=0,
        )
    ),
    "fsdp2_port.auto_wrap_policy of a predicate (what a public function returns, F2P013)": Case(
        lambda m, log: units.auto_wrap_policy(lambda module: module in list(m.layers))
    ),
    "size-based 50": Case(_size(50)),
    "size-based 300": Case(_size(300)),
    "size-based 700": Case(_size(700)),
    "size-based 1500": Case(_size(1500)),
    "size-based, its default threshold (the bare function)": Case(
        lambda m, log: size_based_auto_wrap_policy
    ),
    "size-based 100, ignored params not counted": Case(
        _size(100), ignored_modules=lambda m: [m.layers[2].mlp, m.embed]
    ),
    "size-based 100, ignored_states parameters": Case(
        _size(100), ignored_states=lambda m: [m.layers[1].mlp[0].weight, m.mha.in_proj_weight]
    ),
    "size-based 40, its own leaves and exclusions": Case(
        _size(40, force_leaf_modules={Layer}, exclude_wrap_modules={nn.Sequential, nn.Linear})
    ),
    "size-based 300, mixed precision (recursion everywhere, BatchNorm apart)": Case(
        _size(300), mixed_precision=BF16
    ),
    "size-based, defaults changed on the function": Case(
        _size(20),
        prepare=lambda m: None,  # the change is made by the test below
    ),
    "lambda_auto_wrap_policy": Case(_lambda),
    "_or_policy of lambda and transformer policies": Case(
        lambda m, log: functools.partial(
            _or_policy,
            policies=[
                _lambda(m, log),
                functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={Layer}),
            ],
        )
    ),
    "_or_policy of size-based, a ModuleWrapPolicy called and a user function": Case(
        lambda m, log: functools.partial(
            _or_policy,
            policies=[_size(1000)(m, log), ModuleWrapPolicy({Attn}), _user_function(m, log)],
        ),
        mixed_precision=BF16,
    ),
    "always_wrap_policy": Case(lambda m, log: always_wrap_policy),
    "always_wrap_policy, ignored modules": Case(
        lambda m, log: always_wrap_policy, ignored_modules=lambda m: [m.layers]
    ),
    "_module_wrap_policy": Case(
        lambda m, log: functools.partial(_module_wrap_policy, module_classes={Attn, nn.Embedding})
    ),
    "_wrap_module_cls_individually": Case(
        lambda m, log: functools.partial(_wrap_module_cls_individually, module_classes=[nn.GELU])
    ),
    "a user function": Case(_user_function),
    "a user function, mixed precision": Case(
        _user_function, mixed_precision=BF16, ignored_modules=lambda m: [m.layers[0].bn]
    ),
}


def _root_kwargs(case: Case, ignored_params: set[nn.Parameter]) -> dict[str, Any]:
    """What FSDP1's constructor hands its auto-wrap (the children's arguments)."""
    return {
        "process_group": None,
        "sharding_strategy": S.FULL_SHARD,
        "cpu_offload": None,
        "backward_prefetch": BackwardPrefetch.BACKWARD_PRE,
        "mixed_precision": case.mixed_precision,
        "param_init_fn": None,
        "device_id": None,
        "sync_module_states": False,
        "forward_prefetch": False,
        "limit_all_gathers": True,
        "use_orig_params": case.use_orig_params,
        "ignored_states": ignored_params,
        "device_mesh": None,
    }


def _arguments(case: Case, model: Model) -> tuple[Any, Any]:
    ignored_modules = case.ignored_modules(model) if case.ignored_modules else None
    ignored_states = case.ignored_states(model) if case.ignored_states else None
    return ignored_modules, ignored_states


def _fsdp1_choice(case: Case) -> tuple[list[Any], list[Any], dict[str, int]]:
    """FSDP1's units (name, kwargs) in order, the user-code calls, the fp32 hooks per module."""
    model = Model()
    if case.prepare:
        case.prepare(model)
    names = _names(model)
    log: list[Any] = []
    state = SimpleNamespace()
    _init_ignored_module_states(state, model, *_arguments(case, model))
    chosen: list[Any] = []

    def record(module: nn.Module, **kwargs: Any) -> nn.Module:
        chosen.append((names[module], _plain(kwargs, names)))
        return module

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _auto_wrap(
            model,
            case.policy(model, lambda *a: log.append(a)),
            state._ignored_modules,
            state._ignored_params,
            _root_kwargs(case, state._ignored_params),
            record,
        )
    return chosen, log, _hooks(model)


def _our_choice(case: Case) -> tuple[list[Any], list[Any], dict[str, int]]:
    model = Model()
    if case.prepare:
        case.prepare(model)
    names = _names(model)
    log: list[Any] = []
    chosen: list[Any] = []

    def record(module: nn.Module, **kwargs: Any) -> nn.Module:
        chosen.append((names[module], _plain(kwargs, names)))
        return module

    # the policy object is the caller's (building a ModuleWrapPolicy runs FSDP1's __init__)
    policy = case.policy(model, lambda *a: log.append(a))
    with forbid_fsdp1_calls(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        root = units.resolve_ignored(model, *_arguments(case, model))
        units.wrap_units(model, policy, root, _root_kwargs(case, root.params), record)
    return chosen, log, _hooks(model)


def _plain(kwargs: dict[str, Any], names: dict[nn.Module, str]) -> dict[str, Any]:
    """kwargs comparable across two copies of the model: parameters by name; FSDP1's
    placeholder for the policy left out."""
    param_names = {p: n for m, mn in names.items() for n, p in _named(mn, m)}
    out = {k: v for k, v in kwargs.items() if k not in ("policy", "auto_wrap_policy")}
    out["ignored_states"] = sorted(param_names[p] for p in out["ignored_states"])
    return out


def _named(prefix: str, module: nn.Module) -> list[tuple[str, nn.Parameter]]:
    return [
        (f"{prefix}.{n}" if prefix else n, p) for n, p in module.named_parameters(recurse=False)
    ]


def _hooks(model: nn.Module) -> dict[str, int]:
    return {
        n: len(m._forward_pre_hooks) + len(m._forward_hooks)
        for n, m in model.named_modules()
        if m._forward_pre_hooks or m._forward_hooks
    }


@pytest.mark.parametrize("name", sorted(CASES))
def test_units_are_fsdp1s(name):
    case = CASES[name]
    theirs, their_log, their_hooks = _fsdp1_choice(case)
    ours, our_log, our_hooks = _our_choice(case)
    assert [n for n, _ in ours] == [n for n, _ in theirs]
    assert ours == theirs
    assert our_log == their_log
    assert our_hooks == their_hooks


def test_the_cases_select_different_units():
    """The size thresholds and policies split the model differently (else they test little)."""
    chosen = {name: tuple(n for n, _ in _fsdp1_choice(CASES[name])[0]) for name in CASES}
    sizes = [chosen[f"size-based {n}"] for n in (50, 300, 700, 1500)]
    assert len(set(sizes)) == 4, sizes
    assert chosen["size-based, its default threshold (the bare function)"] == ()
    assert len(set(chosen.values())) >= len(CASES) - 6


def test_size_based_reads_its_defaults_when_asked(monkeypatch):
    """``FORCE_LEAF_MODULES`` / ``EXCLUDE_WRAP_MODULES`` changed on the function count."""
    monkeypatch.setattr(size_based_auto_wrap_policy, "FORCE_LEAF_MODULES", {Layer}, raising=False)
    monkeypatch.setattr(
        size_based_auto_wrap_policy, "EXCLUDE_WRAP_MODULES", {nn.ModuleList, Attn}, raising=False
    )
    case = CASES["size-based, defaults changed on the function"]
    assert _our_choice(case)[0] == _fsdp1_choice(case)[0]


@pytest.mark.parametrize(
    "case, error",
    [
        (
            Case(
                lambda m, log: ModuleWrapPolicy({nn.Linear}),
                prepare=_freeze_head,
                use_orig_params=False,
            ),
            ValueError,
        ),
        (Case(lambda m, log: CustomPolicy(lambda module: None)), ValueError),
        (Case(lambda m, log: functools.partial(transformer_auto_wrap_policy, bad=1)), TypeError),
        (
            Case(
                lambda m, log: always_wrap_policy,
                ignored_modules=lambda m: [m.head],
                ignored_states=lambda m: [m.embed.weight],
            ),
            ValueError,
        ),
        (
            Case(
                lambda m, log: always_wrap_policy, ignored_states=lambda m: [m.head, m.embed.weight]
            ),
            ValueError,
        ),
        (
            Case(lambda m, log: always_wrap_policy, ignored_modules=lambda m: [m.head.weight]),
            ValueError,
        ),
    ],
)
def test_refuses_what_fsdp1_refuses(case, error):
    with pytest.raises(error):
        _fsdp1_choice(case)
    with pytest.raises(error):
        _our_choice(case)


def test_an_fsdp1_policy_it_does_not_know_is_refused_not_run():
    """A callable from FSDP1's modules that is not one of its policies: never called."""
    from torch.distributed.fsdp import _common_utils

    with forbid_fsdp1_calls(), pytest.raises(ValueError, match=r"FSDP1 code .* does not know"):
        units.wrap_units(
            Model(),
            _common_utils.clean_tensor_name,
            units.resolve_ignored(Model(), None, None),
            {"mixed_precision": None},
            lambda module, **kw: module,
        )


# -- ignored states ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "arguments",
    [
        lambda m: (None, None),
        lambda m: ([m.layers[1], m.head], None),
        lambda m: (None, [m.layers[0].attn, m.extra["b"]]),
        lambda m: (None, [m.head.weight, m.layers[2].norm.bias]),
        lambda m: (None, []),
        lambda m: ([m], None),  # the root itself: FSDP1 warns, ignores everything
    ],
)
def test_ignored_states_are_fsdp1s(arguments):
    model = Model()
    model.layers[1].register_buffer("extra_buffer", torch.zeros(2))
    state = SimpleNamespace()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _init_ignored_module_states(state, model, *arguments(model))
        with forbid_fsdp1_calls():
            ours = units.resolve_ignored(model, *arguments(model))
    assert ours.modules == state._ignored_modules
    assert ours.params == state._ignored_params
    buffer_names = {n for n, b in model.named_buffers() if b in ours.buffers}
    assert buffer_names == state._ignored_buffer_names


def test_modules_with_composable_replicate_are_ignored_as_fsdp1_does():
    from torch.distributed._composable.replicate import replicate

    model = Model()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        replicate(model.layers[2])
    state = SimpleNamespace()
    _init_ignored_module_states(state, model, None, None)
    ours = units.resolve_ignored(model, None, None)
    assert model.layers[2].attn.q in ours.modules
    assert (ours.modules, ours.params) == (state._ignored_modules, state._ignored_params)


# -- meta-device init ------------------------------------------------------------------------------


def _meta_model() -> Model:
    with torch.device("meta"):
        return Model()


def test_meta_init_is_fsdp1s():
    """Which modules, in which order, and the values reset_parameters draws from one seed."""
    theirs, ours = _meta_model(), _meta_model()
    # MultiheadAttention has no reset_parameters: both would raise; it is stopped at here
    stop_t = {*theirs.layers[1].modules(), theirs.head, theirs.mha}
    stop_o = {*ours.layers[1].modules(), ours.head, ours.mha}
    ignored_o = units.Ignored(stop_o, {p for m in stop_o for p in m.parameters()}, set())
    ignored_params_t = {p for m in stop_t for p in m.parameters()}
    assert _need_to_materialize_module(theirs, ignored_params_t, stop_t) == (True, False)
    with forbid_fsdp1_calls():
        assert units.needs_materialization(ours, ignored_o) == (True, False)
        order_o = units.modules_to_materialize(ours, stop_o)
    order_t = _get_modules_to_materialize(theirs, stop_t)
    assert [_names(ours)[m] for m in order_o] == [_names(theirs)[m] for m in order_t]
    torch.manual_seed(3)
    _materialize_meta_module(theirs, torch.device("cpu"), stop_t, None)
    torch.manual_seed(3)
    with forbid_fsdp1_calls():
        units.materialize(ours, stop_o, None, torch.device("cpu"))
    theirs_states = dict(theirs.state_dict(keep_vars=True))
    for n, t in ours.state_dict(keep_vars=True).items():
        assert t.is_meta == theirs_states[n].is_meta, n
        if not t.is_meta:
            assert torch.equal(t, theirs_states[n]), n
    # nothing left but the stopped modules' states
    assert not units.needs_materialization(ours, ignored_o)[0]


# -- mixed precision's fp32 hooks ------------------------------------------------------------------


def test_fp32_hooks_compute_what_fsdp1s_compute():
    """BatchNorm between the hooks: bf16 in, fp32 inside, bf16 out; then fp32, fp16 and fp32
    again, where FSDP1's record of the last dtype decides what comes out."""
    theirs = nn.BatchNorm1d(4)
    ours = copy.deepcopy(theirs)
    _override_module_mixed_precision(theirs, (nn.BatchNorm1d,))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        units._run_in_fp32((nn.BatchNorm1d,), ours)
    assert len(ours._forward_pre_hooks) == len(theirs._forward_pre_hooks) == 1
    x = torch.randn(6, 4)
    for inputs in (x.bfloat16(), x, x.half(), x):
        with forbid_fsdp1_calls():
            got = ours(inputs)
        want = theirs(inputs)
        assert got.dtype == want.dtype and torch.equal(got, want)
