"""The readers (``fsdp2_port.fsdp1.readers``): one FSDP1 argument known only at run time, turned
into its FSDP2 value by the code ``fully_shard_like_fsdp1`` runs for it.

- In one process: the strategy map (all five strategies), ``MixedPrecision`` ->
  ``MixedPrecisionPolicy``, ``CPUOffload`` -> ``OffloadPolicy``, meshes on a one-rank group, and
  every ``ValueError`` ``fully_shard_like_fsdp1`` raises for the same values.
- ``units_like_fsdp1`` against FSDP1's own ``_auto_wrap`` on the policy cases of
  ``tests/test_fsdp1_units.py``: the same modules in the same order, the user's policy asked the
  same questions, or the refusal FSDP1's choice calls for; the model left untouched.
- On 2 gloo ranks: a program written by hand with the readers (a mesh, ``fully_shard`` per
  unit, then the root) trains as ``FullyShardedDataParallel`` with the same arguments, and runs
  no FSDP1 code (``fsdp2_port.prove.no_fsdp1``).
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import functools
import math
import os
import warnings
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import (
    BackwardPrefetch,
    CPUOffload,
    CPUOffloadPolicy,
    MixedPrecision,
    MixedPrecisionPolicy,
    OffloadPolicy,
    ShardingStrategy,
    StateDictType,
    fully_shard,
)
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import (
    ModuleWrapPolicy,
    _or_policy,
    always_wrap_policy,
    lambda_auto_wrap_policy,
    size_based_auto_wrap_policy,
    transformer_auto_wrap_policy,
)

import fsdp2_port
from fsdp2_port.codemods.assumptions import FSDP1_REQUIRED_POLICY_ARGUMENT
from fsdp2_port.codemods.rules.reader_values import policies
from fsdp2_port.fsdp1 import readers
from fsdp2_port.fsdp1.like_fsdp1 import HYBRID_SHARD_ZERO2
from fsdp2_port.fsdp1.readers import (
    buffer_dtype_like_fsdp1,
    full_precision_like_fsdp1,
    member_name,
    mesh_like_fsdp1,
    mp_policy_like_fsdp1,
    offload_policy_like_fsdp1,
    reshard_after_forward_like_fsdp1,
    units_like_fsdp1,
)
from fsdp2_port.fsdp1.units import size_based_policy
from fsdp2_port.prove.launch import run_ranks
from fsdp2_port.prove.no_fsdp1 import forbid_fsdp1_calls, record_fsdp1_calls
from tests import test_fsdp1_units as fsdp1_units
from tests import test_like_fsdp1 as like
from tests.models import GainBlock

S = ShardingStrategy
CPU = torch.device("cpu")
BF16 = torch.bfloat16
READERS = (
    "full_precision_like_fsdp1",
    "member_name",
    "mesh_like_fsdp1",
    "mp_policy_like_fsdp1",
    "offload_policy_like_fsdp1",
    "reshard_after_forward_like_fsdp1",
    "units_like_fsdp1",
)


def test_readers_are_exported():
    for name in READERS:
        assert name in fsdp2_port.__all__
        assert getattr(fsdp2_port, name) is getattr(readers, name)


# -- reshard_after_forward ----------------------------------------------------------------------


def test_reshard_after_forward_for_every_strategy():
    """FSDP1 reshards after forward for FULL_SHARD and HYBRID_SHARD, except at its root (FSDP2's
    ``None``); never for the ZeRO-2 strategies and NO_SHARD."""
    want = {
        None: None,
        S.FULL_SHARD: None,
        S.HYBRID_SHARD: None,
        S.SHARD_GRAD_OP: False,
        HYBRID_SHARD_ZERO2: False,
        S.NO_SHARD: False,
    }
    assert HYBRID_SHARD_ZERO2 is S._HYBRID_SHARD_ZERO2
    assert {s: reshard_after_forward_like_fsdp1(s) for s in want} == want
    assert len(want) == len(S) + 1  # every strategy, and the default


@pytest.mark.parametrize("value", [1, True, b"FULL_SHARD"])
def test_reshard_refuses_what_is_not_a_strategy(value):
    with pytest.raises(ValueError, match=r"must be a ShardingStrategy, its name or None"):
        reshard_after_forward_like_fsdp1(value)


def test_strategies_by_name_read_as_their_members(one_rank):
    """The codemod writes a strategy only the readers read as its member's name (F2P013): each
    name reads as its member, in both readers; any other string is refused with the names."""
    for strategy in S:
        assert reshard_after_forward_like_fsdp1(strategy.name) == (
            reshard_after_forward_like_fsdp1(strategy)
        )
    by_name = mesh_like_fsdp1("HYBRID_SHARD", device_id=CPU)
    by_member = mesh_like_fsdp1(S.HYBRID_SHARD, device_id=CPU)
    assert by_name.mesh_dim_names == by_member.mesh_dim_names == ("replicate", "shard")
    assert by_name.mesh.tolist() == by_member.mesh.tolist()
    for bad in ("full_shard", "FULL", ""):
        with pytest.raises(ValueError, match=r"names no ShardingStrategy.*_HYBRID_SHARD_ZERO2"):
            reshard_after_forward_like_fsdp1(bad)
        with pytest.raises(ValueError, match="names no ShardingStrategy"):
            mesh_like_fsdp1(bad, device_id=CPU)


# -- mixed precision ----------------------------------------------------------------------------


def _fields(policy: MixedPrecisionPolicy) -> tuple[Any, ...]:
    return (
        policy.param_dtype,
        policy.reduce_dtype,
        policy.output_dtype,
        policy.cast_forward_inputs,
    )


@pytest.mark.parametrize(
    "mp, root, want",
    [
        (None, False, (None, None, None, True)),
        (None, True, (None, None, None, True)),
        # reduce_dtype defaults to param_dtype, as FSDP1 reduces
        (MixedPrecision(param_dtype=BF16), False, (BF16, BF16, None, False)),
        # the root casts its inputs by default (cast_root_forward_inputs), units do not
        (MixedPrecision(param_dtype=BF16), True, (BF16, BF16, None, True)),
        (
            MixedPrecision(param_dtype=BF16, reduce_dtype=torch.float32),
            False,
            (BF16, torch.float32, None, False),
        ),
        (
            MixedPrecision(param_dtype=BF16, cast_forward_inputs=True),
            False,
            (BF16, BF16, None, True),
        ),
        (
            MixedPrecision(param_dtype=BF16, cast_root_forward_inputs=False),
            True,
            (BF16, BF16, None, False),
        ),
        (
            MixedPrecision(reduce_dtype=BF16, buffer_dtype=BF16),
            True,
            (None, BF16, None, True),
        ),
    ],
)
def test_mp_policy(mp, root, want):
    assert _fields(mp_policy_like_fsdp1(mp, root=root)) == want


def test_mp_policy_refuses_what_fsdp2_cannot_honour():
    low = MixedPrecision(param_dtype=BF16, keep_low_precision_grads=True)
    with pytest.raises(ValueError, match=r"keep_low_precision_grads=True"):
        mp_policy_like_fsdp1(low)
    with pytest.raises(ValueError, match=r"must be an FSDP1 MixedPrecision"):
        mp_policy_like_fsdp1(MixedPrecisionPolicy(param_dtype=BF16))  # type: ignore[arg-type]
    with mock.patch.dict(os.environ, {"FSDP_USE_FULL_PREC_IN_EVAL": "1"}):
        with pytest.raises(ValueError, match=r"FSDP_USE_FULL_PREC_IN_EVAL=1"):
            mp_policy_like_fsdp1(MixedPrecision(param_dtype=BF16))
        assert _fields(mp_policy_like_fsdp1(MixedPrecision(reduce_dtype=BF16)))[1] == BF16


def test_buffer_dtype_is_the_configs_in_either_spelling():
    """What the plain form casts floating buffers to: FSDP1's ``buffer_dtype`` (its default
    None casts nothing), from the config or the dict F2P013 writes for it."""
    for fields in ({}, {"param_dtype": BF16}, {"buffer_dtype": BF16}, {"buffer_dtype": None}):
        want = MixedPrecision(**fields).buffer_dtype
        assert buffer_dtype_like_fsdp1(MixedPrecision(**fields)) == want
        assert buffer_dtype_like_fsdp1(dict(fields)) == want
    assert buffer_dtype_like_fsdp1(None) is None
    with pytest.raises(ValueError, match=r"keep_low_precision_grads=True"):
        buffer_dtype_like_fsdp1(dict(param_dtype=BF16, keep_low_precision_grads=True))


# -- offload ------------------------------------------------------------------------------------


def test_offload_policy():
    for off in (None, CPUOffload(), CPUOffload(offload_params=False)):
        assert type(offload_policy_like_fsdp1(off)) is OffloadPolicy
    on = CPUOffload(offload_params=True)
    policy = offload_policy_like_fsdp1(on)
    assert isinstance(policy, CPUOffloadPolicy)
    assert policy.pin_memory == torch.accelerator.is_available()
    # the mesh's device type decides (a duck-typed mesh: only device_type is read)
    for device_type, pinned in (("cpu", False), ("cuda", True)):
        mesh = SimpleNamespace(device_type=device_type)
        policy = offload_policy_like_fsdp1(on, mesh)  # type: ignore[arg-type]
        assert isinstance(policy, CPUOffloadPolicy) and policy.pin_memory is pinned
    with pytest.raises(ValueError, match=r"cpu_offload must be an FSDP1 CPUOffload"):
        offload_policy_like_fsdp1(True)  # type: ignore[arg-type]


# -- meshes, on one rank ------------------------------------------------------------------------


def test_meshes_on_one_rank(one_rank):
    for strategy in (None, S.FULL_SHARD, S.SHARD_GRAD_OP):
        mesh = mesh_like_fsdp1(strategy, device_id=CPU)
        assert (mesh.ndim, mesh.device_type, mesh.size()) == (1, "cpu", 1)
    group = dist.new_group([0])
    assert mesh_like_fsdp1(S.FULL_SHARD, group, device_id=CPU).get_group(0) is group
    flat = init_device_mesh("cpu", (1,))
    assert mesh_like_fsdp1(S.SHARD_GRAD_OP, device_mesh=flat) is flat
    replicated = mesh_like_fsdp1(S.NO_SHARD, device_id=CPU)
    assert replicated.mesh_dim_names == ("replicate", "shard")
    assert tuple(replicated.mesh.shape) == (1, 1)
    named = init_device_mesh("cpu", (1, 1), mesh_dim_names=("r", "s"))
    assert mesh_like_fsdp1(S.HYBRID_SHARD, device_mesh=named) is named
    unnamed = mesh_like_fsdp1(HYBRID_SHARD_ZERO2, device_mesh=init_device_mesh("cpu", (1, 1)))
    assert unnamed.mesh_dim_names == ("replicate", "shard")
    # a new mesh per call (the caller shares one between the units of a model)
    assert mesh_like_fsdp1(S.NO_SHARD, device_id=CPU) is not replicated


def test_mesh_refuses_what_fully_shard_like_fsdp1_refuses(one_rank):
    two_d = init_device_mesh("cpu", (1, 1))
    for kwargs, match in [
        ({"sharding_strategy": "no_shard"}, r"names no ShardingStrategy"),
        ({"sharding_strategy": 3}, r"must be a ShardingStrategy, its name or None, not 3"),
        ({"process_group": dist.group.WORLD, "device_mesh": two_d}, r"pass one of them"),
        ({"device_mesh": two_d}, r"2-D device_mesh with a non-hybrid"),
        (
            {"sharding_strategy": S.HYBRID_SHARD, "device_mesh": init_device_mesh("cpu", (1,))},
            r"needs a 2-D device_mesh",
        ),
        (
            {"sharding_strategy": S.HYBRID_SHARD, "process_group": dist.group.WORLD},
            r"takes process_group=\(intra_node, inter_node\)",
        ),
        (
            {"process_group": (dist.group.WORLD, dist.group.WORLD)},
            r"only the hybrid sharding strategies take",
        ),
    ]:
        with pytest.raises(ValueError, match=match):
            mesh_like_fsdp1(**kwargs)
    if not torch.accelerator.is_available():
        with pytest.raises(ValueError, match=r"device_id=1: an accelerator index"):
            mesh_like_fsdp1(device_id=1)


# -- units_like_fsdp1 against FSDP1's choice ---------------------------------------------------


def _expected(case: fsdp1_units.Case) -> tuple[list[str], str | None, list[Any]]:
    """From FSDP1's own auto-wrap: the units the reader must return (containers that manage
    nothing left out, each module once) or the refusal it must raise (a unit with arguments of
    its own, a container managing parameters), and the questions the user's code was asked."""
    chosen, log, _ = fsdp1_units._fsdp1_choice(case)
    model = fsdp1_units.Model()
    root = fsdp1_units._plain(fsdp1_units._root_kwargs(case, set()), fsdp1_units._names(model))
    mp = case.mixed_precision
    fp32 = tuple(mp._module_classes_to_ignore) if mp is not None else ()
    names: list[str] = []
    held: set[nn.Parameter] = set()
    for name, kwargs in chosen:
        module = model.get_submodule(name)
        want = {**root, "mixed_precision": None} if isinstance(module, fp32) else root
        if kwargs != want:
            return names, "fully_shard_like_fsdp1", log
        if readers.is_container(module):
            if any(p not in held for p in module.parameters()):
                return names, "container", log
        elif name not in names:
            names.append(name)
            held.update(module.parameters())
    return names, None, log


def _ours(case: fsdp1_units.Case, mixed_precision: Any) -> tuple[list[str], list[Any]]:
    model = fsdp1_units.Model()
    if case.prepare:
        case.prepare(model)
    names = fsdp1_units._names(model)
    log: list[Any] = []
    policy = case.policy(model, lambda *a: log.append(a))  # the caller's object (see there)
    before = {
        n: (id(m), len(m._forward_pre_hooks), len(m._forward_hooks)) for n, m in names_of(model)
    }
    state = {n: (id(t), t.dtype, t.clone()) for n, t in model.state_dict(keep_vars=True).items()}
    try:
        with forbid_fsdp1_calls(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = units_like_fsdp1(model, policy, mixed_precision=mixed_precision)
    finally:  # the model is left as it was, also when the reader refuses
        after = {
            n: (id(m), len(m._forward_pre_hooks), len(m._forward_hooks)) for n, m in names_of(model)
        }
        assert after == before
        for n, t in model.state_dict(keep_vars=True).items():
            assert (id(t), t.dtype) == state[n][:2] and torch.equal(t, state[n][2]), n
    return [names[m] for m in got], log


def names_of(model: nn.Module) -> list[tuple[str, nn.Module]]:
    return list(model.named_modules(remove_duplicate=False))


# The reader has no ignored modules: FSDP1's reference runs each case without them. It stands
# for use_orig_params=True (FSDP2 exposes the original parameters), so FSDP1's does too.
UNIT_CASES = {
    name: dataclasses.replace(case, ignored_modules=None, ignored_states=None, use_orig_params=True)
    for name, case in fsdp1_units.CASES.items()
}


@pytest.mark.parametrize("name", sorted(UNIT_CASES))
def test_units_are_fsdp1s(name):
    case = UNIT_CASES[name]
    want, refusal, their_log = _expected(case)
    if refusal is not None:
        with pytest.raises(ValueError, match=refusal):
            _ours(case, case.mixed_precision)
        return
    ours, our_log = _ours(case, case.mixed_precision)
    assert ours == want
    assert our_log == their_log
    if case.mixed_precision is not None:  # BatchNorm (or the case's classes) apart
        model = fsdp1_units.Model()
        classes = tuple(case.mixed_precision._module_classes_to_ignore)
        apart = [n for n, m in model.named_modules() if isinstance(m, classes)]
        assert set(apart) <= set(ours), (apart, ours)


@pytest.mark.parametrize("mixed_precision", [None, MixedPrecision(param_dtype=BF16)])
def test_a_predicate_means_a_lambda_policy(mixed_precision):
    """The codemod writes a lambda or transformer policy that only this reader reads as a
    predicate (F2P013): its units are FSDP1's for the policy it came from."""
    model = fsdp1_units.Model()

    def fsdp1s(policy: Any) -> list[nn.Module]:
        return units_like_fsdp1(model, policy, mixed_precision=mixed_precision)

    def in_layers(module: nn.Module) -> bool:
        return module in list(model.layers)

    transformer = functools.partial(
        transformer_auto_wrap_policy, transformer_layer_cls={fsdp1_units.Layer}
    )
    lambda_policy = functools.partial(lambda_auto_wrap_policy, lambda_fn=in_layers)
    nothing = ModuleWrapPolicy(set())  # built outside: its constructor is FSDP1 code
    with forbid_fsdp1_calls():
        assert fsdp1s(lambda m: isinstance(m, (fsdp1_units.Layer,))) == fsdp1s(transformer)
        assert fsdp1s(in_layers) == fsdp1s(lambda_policy)
        assert set(model.layers) <= set(fsdp1s(in_layers))
        assert fsdp1s(lambda module: False) == fsdp1s(nothing)
        assert fsdp1s(lambda module: True) == fsdp1s(always_wrap_policy)
        # a partial that binds what every call passes (F2P013 leaves those keywords out)
        bound = functools.partial(
            transformer_auto_wrap_policy,
            transformer_layer_cls={fsdp1_units.Layer},
            recurse=False,
            nonwrapped_numel=0,
        )
        assert fsdp1s(lambda m: isinstance(m, (fsdp1_units.Layer,))) == fsdp1s(bound)
        # what a public function returns (F2P013): FSDP1's call shape, a predicate called alone
        public = fsdp2_port.auto_wrap_policy(in_layers)
        assert fsdp1s(public) == fsdp1s(lambda_policy)
        assert [public(m) for m in model.modules()] == [in_layers(m) for m in model.modules()]
    # an or-policy of both, as F2P013 writes it for a list it can see whole
    either = functools.partial(_or_policy, policies=[transformer, lambda_policy])
    predicates = [lambda m: isinstance(m, (fsdp1_units.Layer,)), in_layers]
    heads = functools.partial(lambda_auto_wrap_policy, lambda_fn=lambda m: m is model.head)
    with forbid_fsdp1_calls():
        assert fsdp1s(lambda module: any(p(module) for p in predicates)) == fsdp1s(either)
        assert fsdp1s(lambda module: in_layers(module) or module is model.head) == fsdp1s(
            functools.partial(_or_policy, policies=[lambda_policy, heads])
        )
        assert model.head in fsdp1s(functools.partial(_or_policy, policies=[lambda_policy, heads]))


@pytest.mark.parametrize(
    "classes",
    [
        {fsdp1_units.Layer},
        {nn.Linear},  # the shared module too
        {nn.Sequential, fsdp1_units.Layer},
        {fsdp1_units.Model},  # the root's own class: never a unit
        {nn.BatchNorm1d},
        set(),
    ],
    ids=lambda c: "+".join(sorted(k.__name__ for k in c)) or "none",
)
@pytest.mark.parametrize("mixed_precision", [None, MixedPrecision(param_dtype=BF16)])
def test_module_wrap_policy_units_are_its_predicates(classes, mixed_precision):
    """F2P013 writes ``ModuleWrapPolicy([A, B])`` as ``lambda module: isinstance(module, (A,
    B))``: the same units, BatchNorm apart under mixed precision included."""
    model = fsdp1_units.Model()
    policy, kinds = ModuleWrapPolicy(classes), tuple(classes)
    with forbid_fsdp1_calls():
        want = units_like_fsdp1(model, policy, mixed_precision=mixed_precision)
        got = units_like_fsdp1(
            model, lambda m: isinstance(m, kinds), mixed_precision=mixed_precision
        )
    assert got == want


def _size_based_cases() -> list[str]:
    model = fsdp1_units.Model()
    return [
        name
        for name, case in sorted(UNIT_CASES.items())
        if getattr(case.policy(model, print), "func", None) is size_based_auto_wrap_policy
    ]


@pytest.mark.parametrize("name", _size_based_cases())
def test_size_based_policy_is_fsdp1s_size_based_policy(name):
    """F2P013 writes ``partial(size_based_auto_wrap_policy, ...)`` as
    ``fsdp2_port.size_based_policy(...)``: the same units (ignored modules, its own leaves and
    exclusions, defaults changed on FSDP1's function, mixed precision included), and the same
    under FSDP1 itself, which calls it as a policy of its own."""
    case = UNIT_CASES[name]

    def ours(model: nn.Module, log: Any) -> Any:
        return size_based_policy(**case.policy(model, log).keywords)

    def outcome(case: fsdp1_units.Case) -> Any:
        try:
            return _ours(case, case.mixed_precision)
        except ValueError as refusal:  # a container the policy would make a unit
            return str(refusal)

    written = dataclasses.replace(case, policy=ours)
    assert outcome(written) == outcome(case)
    assert fsdp1_units._fsdp1_choice(written)[0] == fsdp1_units._fsdp1_choice(case)[0]


def test_what_takes_fsdp1s_call_is_a_policy_not_a_predicate():
    """A callable FSDP1 could call (``module=, recurse=, nonwrapped_numel=``) is a policy, even
    one that would also take a single module."""
    model = fsdp1_units.Model()
    asked = []

    def policy(module, recurse=True, nonwrapped_numel=0):
        asked.append(recurse)
        return recurse or module is model.head

    assert units_like_fsdp1(model, policy) == [model.head]
    assert False in asked and True in asked  # asked as FSDP1 asks, recurse included


def test_the_unit_cases_cover_units_refusals_and_batchnorm():
    outcomes = {name: _expected(case) for name, case in UNIT_CASES.items()}
    plain = [n for n, (_, refusal, _) in outcomes.items() if refusal is None]
    assert len(plain) >= 20
    assert {r for _, r, _ in outcomes.values()} == {None, "fully_shard_like_fsdp1", "container"}
    size_mp = outcomes["size-based 300, mixed precision (recursion everywhere, BatchNorm apart)"]
    assert "head_bn" in size_mp[0] and "layers.0.bn" in size_mp[0]


def test_units_under_an_fsdp2_policy_are_those_of_fsdp1s_default_mixed_precision():
    """An FSDP2 ``MixedPrecisionPolicy`` means "under mixed precision", with FSDP1's default
    exceptions (BatchNorm)."""
    case = UNIT_CASES["size-based 300, mixed precision (recursion everywhere, BatchNorm apart)"]
    default = dataclasses.replace(case, mixed_precision=MixedPrecision(param_dtype=BF16))
    want, refusal, _ = _expected(default)
    assert refusal is None
    assert _ours(case, MixedPrecisionPolicy(param_dtype=BF16))[0] == want
    assert _ours(case, None)[0] == _expected(dataclasses.replace(case, mixed_precision=None))[0]
    assert _ours(case, None)[0] != want


def test_units_without_a_policy_and_refusals():
    model = fsdp1_units.Model()
    assert units_like_fsdp1(model, None) == []
    assert units_like_fsdp1(model, None, mixed_precision=MixedPrecision(param_dtype=BF16)) == []
    with pytest.raises(ValueError, match=r"a dict of its fields, an FSDP2 MixedPrecisionPolicy"):
        units_like_fsdp1(model, ModuleWrapPolicy({nn.Linear}), mixed_precision=BF16)


def test_full_precision_classes_are_those_fsdp1_keeps_out_of_mixed_precision():
    """The classes FSDP1 makes fp32 units of under a policy: none without mixed precision,
    BatchNorm's base by default (also for an FSDP2 policy, as ``units_like_fsdp1`` reads
    it), a MixedPrecision's own ``_module_classes_to_ignore`` in either spelling."""
    norm = nn.modules.batchnorm._BatchNorm
    assert full_precision_like_fsdp1(None) == ()
    assert full_precision_like_fsdp1(MixedPrecision(param_dtype=BF16)) == (norm,)
    assert full_precision_like_fsdp1(dict(param_dtype=BF16)) == (norm,)
    assert full_precision_like_fsdp1(MixedPrecisionPolicy(param_dtype=BF16)) == (norm,)
    own = MixedPrecision(param_dtype=BF16, _module_classes_to_ignore=[nn.LayerNorm])
    assert full_precision_like_fsdp1(own) == (nn.LayerNorm,)
    assert full_precision_like_fsdp1(dict(_module_classes_to_ignore=(nn.LayerNorm,))) == (
        nn.LayerNorm,
    )
    with pytest.raises(ValueError, match="MixedPrecisionPolicy or None"):
        full_precision_like_fsdp1("bf16")


def test_member_tests_by_name_hold_as_the_member_tests_for_either_spelling():
    """F2P013 writes ``x == ShardingStrategy.X`` as ``member_name(x) == "X"`` and may write x by
    its name: for every member x and every member X of FSDP1's three enums, both spellings of
    x give the answer ``x == X`` gave; values that are no member (None, a number) pass as they
    are, so a test on them still fails."""
    for enum in (S, BackwardPrefetch, StateDictType):
        for value in enum:
            for tested in enum:
                assert (member_name(value) == tested.name) is (value == tested)
                assert (member_name(value.name) == tested.name) is (value == tested)
        for other in (None, 0, 1.5):
            assert member_name(other) is other
            assert all(member_name(other) != m.name for m in enum)
    assert {member_name(m) for m in S} == set(S.__members__)  # _HYBRID_SHARD_ZERO2 too


def test_configs_as_dicts_of_their_fields_read_as_the_configs():
    """F2P013 writes ``MixedPrecision(...)`` / ``CPUOffload(...)`` as ``dict(...)`` where only
    readers read them: the same FSDP2 values and units, and the same refusals."""
    for fields in (
        {},
        {"param_dtype": BF16},
        {"param_dtype": BF16, "reduce_dtype": torch.float32, "cast_forward_inputs": True},
        {"reduce_dtype": BF16, "cast_root_forward_inputs": False},
    ):
        for root in (False, True):
            want = _fields(mp_policy_like_fsdp1(MixedPrecision(**fields), root=root))
            assert _fields(mp_policy_like_fsdp1(dict(fields), root=root)) == want
    for offload in (False, True):
        want_policy = offload_policy_like_fsdp1(CPUOffload(offload_params=offload))
        policy = offload_policy_like_fsdp1({"offload_params": offload})
        assert type(policy) is type(want_policy) and vars(policy) == vars(want_policy)
    case = UNIT_CASES["size-based 300, mixed precision (recursion everywhere, BatchNorm apart)"]
    assert _ours(case, dict(param_dtype=BF16))[0] == _ours(case, MixedPrecision(BF16))[0]
    with pytest.raises(ValueError, match=r"keep_low_precision_grads=True"):
        mp_policy_like_fsdp1(dict(param_dtype=BF16, keep_low_precision_grads=True))
    with pytest.raises(ValueError, match=r"'offload' not a field of CPUOffload"):
        offload_policy_like_fsdp1({"offload": True})


# -- a program written with the readers trains as FSDP1 (2 gloo ranks) -----------------------------


@dataclasses.dataclass(frozen=True)
class Program:
    """FSDP1's arguments, built on each rank (a process group is a collective)."""

    policy: Callable[[], Any]
    strategy: ShardingStrategy
    mixed_precision: MixedPrecision | None = None
    process_group: Callable[[], Any] = lambda: None
    tol: str = "fp32"


PROGRAMS = {
    "size-based policy, SHARD_GRAD_OP": Program(
        lambda: functools.partial(size_based_auto_wrap_policy, min_num_params=200),
        S.SHARD_GRAD_OP,
    ),
    "transformer policy, NO_SHARD, bf16 (BatchNorm apart, in fp32)": Program(
        lambda: functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={GainBlock}),
        S.NO_SHARD,
        MixedPrecision(param_dtype=BF16),
        tol="bf16",
    ),
    "ModuleWrapPolicy, FULL_SHARD, a process group that is not WORLD": Program(
        lambda: ModuleWrapPolicy({GainBlock}),
        S.FULL_SHARD,
        process_group=lambda: dist.new_group([0, 1]),
    ),
}


def _by_readers(
    model: nn.Module,
    policy: Any,
    strategy: ShardingStrategy,
    process_group: Any,
    mp: MixedPrecision | None,
) -> nn.Module:
    """What the codemod's plain form writes for ``FSDP(model, ...)`` with run-time values."""
    mesh = mesh_like_fsdp1(strategy, process_group, device_id=CPU)
    reshard = reshard_after_forward_like_fsdp1(strategy)
    offload = offload_policy_like_fsdp1(None, mesh)
    for unit in units_like_fsdp1(model, policy, mixed_precision=mp):
        unit_mp = mp_policy_like_fsdp1(mp)
        if mp is not None and isinstance(unit, nn.modules.batchnorm._BatchNorm):
            # FSDP1's exception: in fp32, the output cast back (FSDP1: to the input's dtype)
            unit_mp = MixedPrecisionPolicy(param_dtype=torch.float32, output_dtype=mp.param_dtype)
        fully_shard(
            unit,
            mesh=mesh,
            reshard_after_forward=reshard,
            mp_policy=unit_mp,
            offload_policy=offload,
        )
    fully_shard(
        model,
        mesh=mesh,
        reshard_after_forward=reshard,
        mp_policy=mp_policy_like_fsdp1(mp, root=True),
        offload_policy=offload,
    )
    return model


def _fp32_units_as_fsdp1_says(layout: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """FSDP1 runs its BatchNorm units without mixed precision (param and reduce dtype None, no
    input cast) between hooks that cast to fp32 and back; the program spells that as an fp32
    ``MixedPrecisionPolicy``. The same computation, written two ways: compared as FSDP1's."""
    out = {}
    for name, unit in layout.items():
        if unit["param_dtype"] == torch.float32:
            unit = {**unit, "param_dtype": None, "cast_inputs": False}
            if unit["reduce_dtype"] == torch.float32:
                unit["reduce_dtype"] = None
        out[name] = unit
    return out


def _compare_program(rank: int, world: int, name: str, program: Program) -> None:
    where = f"[{name}] rank {rank}"
    theirs = FSDP(
        like._net(rank),
        auto_wrap_policy=program.policy(),
        sharding_strategy=program.strategy,
        process_group=program.process_group(),
        mixed_precision=program.mixed_precision,
        device_id=CPU,
    )
    model = like._net(rank)
    policy = program.policy()  # the caller's object (ModuleWrapPolicy runs FSDP1's __init__)
    group = program.process_group()
    with record_fsdp1_calls() as recorded:
        ours = _by_readers(model, policy, program.strategy, group, program.mixed_precision)
        ours_history = like._train(ours, like._fsdp2_clip, rank, world)
    assert recorded.calls == [], (where, recorded.calls)
    theirs_history = like._train(theirs, like._fsdp1_clip, rank, world)
    assert like._fsdp2_units(ours) == like._fsdp1_units(theirs) - like._empty_containers(theirs)
    layout = _fp32_units_as_fsdp1_says(like._fsdp2_layout(ours))
    assert layout == like._fsdp1_layout(theirs), where
    assert like._buffer_dtypes(ours) == like._buffer_dtypes(theirs), where
    # The tolerance of tests/test_like_fsdp1.py, which compares the same quantities (losses,
    # pre-clip global norms, full parameters after 3 AdamW steps) between FSDP1 and FSDP2 on the
    # same model and batches: fp32 1e-6 (a few ulps from FSDP1 dividing by the world size
    # before and after its reduce-scatter and the norms summed in another order), bf16 2e-3 (an
    # ulp in an fp32 shard can flip the rounding of its bf16 copy a step later). Its docstring
    # has the measurements.
    tol = like.TOL[program.tol]
    assert any(norm > like.MAX_NORM for _, norm in theirs_history), f"{where}: clipping must fire"
    for step, ((loss, norm), (want_loss, want_norm)) in enumerate(
        zip(ours_history, theirs_history)
    ):
        assert math.isclose(loss, want_loss, rel_tol=tol), (where, step, loss, want_loss)
        assert math.isclose(norm, want_norm, rel_tol=tol), (where, step, norm, want_norm)
    theirs_params, ours_params = like._fsdp1_params(theirs), like._fsdp2_params(ours)
    assert ours_params.keys() == theirs_params.keys(), where
    for n, p in ours_params.items():
        torch.testing.assert_close(
            p, theirs_params[n], rtol=tol, atol=tol, msg=lambda m, n=n: f"{where} {n}: {m}"
        )


def _compare_programs(rank: int, world: int) -> None:
    for name, program in PROGRAMS.items():
        try:
            _compare_program(rank, world, name, program)
        except Exception as e:  # the traceback above it says where
            raise RuntimeError(f"program [{name}] failed on rank {rank}") from e


@pytest.mark.slow
def test_a_program_written_with_the_readers_trains_as_fsdp1():
    run_ranks(_compare_programs, 2, timeout=240)


def test_kwargs_as_migrated_passes_the_keys_it_was_written_for_and_names_any_change() -> None:
    kwargs = {"sharding_strategy": "FULL_SHARD", "use_orig_params": True}
    assert fsdp2_port.kwargs_as_migrated(kwargs, "use_orig_params", "sharding_strategy") is kwargs
    with pytest.raises(ValueError, match=r"added: cpu_offload; missing: use_orig_params"):
        fsdp2_port.kwargs_as_migrated(
            {"sharding_strategy": "FULL_SHARD", "cpu_offload": None},
            "sharding_strategy",
            "use_orig_params",
        )
    optional = ("cpu_offload",)
    assert fsdp2_port.kwargs_as_migrated({}, optional=optional) == {"cpu_offload": None}
    offload = {"cpu_offload": CPUOffload(offload_params=True)}
    assert fsdp2_port.kwargs_as_migrated(offload, optional=optional) == offload
    with pytest.raises(ValueError, match=r"added: limit_all_gathers\)"):
        fsdp2_port.kwargs_as_migrated({"limit_all_gathers": True}, optional=optional)
    with pytest.raises(TypeError, match="mapping"):
        fsdp2_port.kwargs_as_migrated([("sharding_strategy", "FULL_SHARD")], "sharding_strategy")


# -- FSDP2's slots that take either spelling alike (F2P013's ``_FSDP2_SLOTS``) ------------------


def _one_step(model: nn.Module, **kwargs: Any) -> list[torch.Tensor]:
    """``fully_shard(model, **kwargs)``, one forward and backward: the local gradients."""
    fully_shard(model, mesh=init_device_mesh("cpu", (1,)), **kwargs)
    model(torch.ones(2, 4)).sum().backward()
    return [p.grad.to_local().clone() for p in model.parameters()]


def test_fsdp2_slots_take_fsdp1_values_and_their_dicts_alike(one_rank):
    """F2P013 respells an FSDP1 value that also reaches these slots of ``fully_shard``: it is
    only right while FSDP1's value and its dict do the same there. ``offload_policy``: neither
    is a ``CPUOffloadPolicy``, so both train as no offload, to the bit; ``mp_policy`` and
    ``reshard_after_forward``: both fail before a step completes (a run that took that path
    never trained)."""
    torch.manual_seed(0)
    reference = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 1))
    expected = _one_step(copy.deepcopy(reference))
    for value in (CPUOffload(offload_params=True), {"offload_params": True}):
        assert all(
            torch.equal(a, b)
            for a, b in zip(_one_step(copy.deepcopy(reference), offload_policy=value), expected)
        )
    if not torch.accelerator.is_available():  # a real offload needs one: these were none
        with pytest.raises(RuntimeError, match="accelerator"):
            _one_step(copy.deepcopy(reference), offload_policy=CPUOffloadPolicy())
    fails = [
        {"mp_policy": MixedPrecision(param_dtype=torch.float32, cast_forward_inputs=True)},
        {"mp_policy": {"param_dtype": torch.float32, "cast_forward_inputs": True}},
        {"reshard_after_forward": ShardingStrategy.FULL_SHARD},
        {"reshard_after_forward": "FULL_SHARD"},
    ]
    for kwargs in fails:
        with pytest.raises((AttributeError, ValueError)):
            _one_step(copy.deepcopy(reference), **kwargs)


@pytest.mark.parametrize("policy", [transformer_auto_wrap_policy, lambda_auto_wrap_policy])
def test_a_policy_without_its_own_argument_fails_alike(one_rank, policy):
    """F2P003 marks a policy missing its required argument (OpenRLHF's bare
    ``transformer_auto_wrap_policy``), and F2P013 writes FSDP1's function out where only the
    reader reads it: FSDP1 and ``units_like_fsdp1`` raise the ``TypeError`` on either (in words
    of their own), so code that catches it falls back alike; given the argument by a
    ``partial``, the written one selects FSDP1's units."""
    name = policy.__name__
    needed = FSDP1_REQUIRED_POLICY_ARGUMENT[name]
    written = eval(policies._unbound(ast.Name(id=name), name).text)
    errors = []
    builds = (
        lambda m, p: FSDP(m, auto_wrap_policy=p, device_id=CPU),
        lambda m, p: units_like_fsdp1(m, p),
    )
    for candidate in (policy, written):
        for build in builds:
            with pytest.raises(TypeError) as raised, warnings.catch_warnings():
                warnings.simplefilter("ignore")
                build(nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2)), candidate)
            errors.append(str(raised.value))
    assert all("missing" in error and repr(needed) in error for error in errors), errors
    model = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.Linear(2, 2), nn.ReLU()), nn.ReLU())
    given = {"transformer_layer_cls": {nn.Linear}, "lambda_fn": lambda m: isinstance(m, nn.ReLU)}
    bound = {needed: given[needed]}
    expected = units_like_fsdp1(model, functools.partial(policy, **bound))
    assert expected and units_like_fsdp1(model, functools.partial(written, **bound)) == expected


def test_predicates_f2p013_writes_select_as_the_policies_they_replace():
    """F2P013's predicates for a policy of classes: one with the classes as a default argument
    (classes not fixed where the policy is built) and one for a lambda that passes FSDP1's
    call on to ``transformer_auto_wrap_policy``: ``units_like_fsdp1`` reads each as a
    predicate and selects what the policy selects."""
    model = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.Linear(2, 2), nn.ReLU()), nn.ReLU())
    policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={nn.Linear})
    expected = units_like_fsdp1(model, policy)
    assert expected == [model[0], model[1][0]]
    written = [
        lambda module, classes=(nn.Linear,): isinstance(module, classes),
        lambda module: isinstance(module, (nn.Linear,)),
    ]
    for predicate in written:
        assert units_like_fsdp1(model, predicate) == expected
    forwarding = lambda module, recurse, nonwrapped_numel: transformer_auto_wrap_policy(  # noqa: E731
        module, recurse, nonwrapped_numel, {nn.Linear}
    )
    assert units_like_fsdp1(model, forwarding) == expected


def test_size_based_policy_answers_a_positional_fsdp1_call_alike():
    """F2P013 writes a size policy that a user's own policy function calls as FSDP1 calls one
    (harold's ``size_policy(module, recurse, nonwrapped_numel)``, by position) as
    ``size_based_policy(...)``: every answer must be FSDP1's, recursing or not, on each side of
    the threshold, for FSDP1's excluded containers and forced leaves too."""
    ours = size_based_policy(min_num_params=100)
    fsdp1 = functools.partial(size_based_auto_wrap_policy, min_num_params=100)
    modules = [
        nn.Linear(20, 20),
        nn.Sequential(nn.Linear(2, 2)),
        nn.ModuleList([nn.Linear(20, 20)]),
        nn.MultiheadAttention(8, 2),
    ]
    asked = [(m, r, n) for m in modules for r in (True, False) for n in (0, 99, 100, 10_000)]
    answers = [(ours(*a), fsdp1(*a)) for a in asked]
    assert all(mine == theirs for mine, theirs in answers), answers
    assert {theirs for _, theirs in answers} == {True, False}  # both answers were asked for
