"""fully_shard_like_fsdp1 against FullyShardedDataParallel itself, on 2 and 4 gloo ranks.

Every case builds one model twice from one seed, wraps a copy with ``FSDP(model, **kw)`` and
the other with ``fully_shard_like_fsdp1(model, **kw)`` (``kw`` read from the model at run time,
as real training code does), and checks:

- units: the qualified names of the modules that became FSDP units are FSDP1's;
- layout, per unit with parameters: the ranks of its replicate and shard groups, reshard
  after forward, param and reduce dtypes, input casting, CPU offload. These move no numbers
  (a 2x2 mesh with its dims swapped trains the same), so only this catches a wrong mapping;
- buffers: their dtypes after the first step (FSDP1 casts them to ``buffer_dtype`` then);
- training: 3 steps of a global-norm clip (``fsdp2_port.compat.clip_grad_norm_`` on FSDP1,
  ``fsdp2_port.clip_grad_norm_`` on FSDP2; clipping fires) and AdamW, elementwise, so FSDP1's
  flat parameters and FSDP2's DTensors step alike: per-step losses and pre-clip norms, then
  the full parameters;
- no FSDP1 code: ``fully_shard_like_fsdp1(...)`` and the FSDP2 side's training steps run under
  ``fsdp2_port.prove.no_fsdp1.forbid_fsdp1_calls``, on every rank (FSDP1 stays the reference).

Tolerances (``TOL``). fp32: both reduce the same per-rank gradients, but FSDP1 divides by the
world size before and after its reduce-scatter and FSDP2 once, and the norms are summed in
another order: a few ulps. Measured on 2 and 4 ranks: losses, norms and parameters after 3
AdamW steps of lr 1e-2 within 2e-7 (relative). We allow 1e-6, stricter than the issue's
1e-5. bf16 compute: both sides compute in bf16 from bf16 copies of the same fp32 shards, and
the numbers measured here are as close as in fp32 (losses equal); but one ulp of difference
in an fp32 shard can flip the rounding of its bf16 copy in a later step, which moves a loss by
about a bf16 ulp of one term, so we allow the issue's 2e-3. What moves no numbers (dtypes,
groups, resharding, offload) is pinned exactly by the layout check, not by a tolerance.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
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
    FSDPModule,
    MixedPrecision,
    ShardingStrategy,
    fully_shard,
)
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import (
    CustomPolicy,
    ModuleWrapPolicy,
    _or_policy,
    always_wrap_policy,
    lambda_auto_wrap_policy,
    size_based_auto_wrap_policy,
    transformer_auto_wrap_policy,
)
from torch.distributed.tensor import DTensor

import fsdp2_port
from fsdp2_port import compat
from fsdp2_port.fsdp1.like_fsdp1 import fully_shard_like_fsdp1
from fsdp2_port.prove.launch import run_ranks
from fsdp2_port.prove.no_fsdp1 import forbid_fsdp1_calls
from tests.models import GainBlock, cpu_mesh, global_batch, local_rows, loss_fn
from tests.models import NormNet as Net

CPU = torch.device("cpu")
S = ShardingStrategy
LR, MAX_NORM, STEPS = 1e-2, 1.0, 3
#: BatchNorm over 2 rows maps any input to +-1, leaving embed gradients of rounding noise
ROWS_PER_RANK = 4
TOL = {"fp32": 1e-6, "bf16": 2e-3}  # why: module docstring
BF16 = torch.bfloat16
BF16_FP32_REDUCE = MixedPrecision(param_dtype=BF16, reduce_dtype=torch.float32)


# -- the model --------------------------------------------------------------------------------


def _net(rank: int) -> Net:
    torch.manual_seed(0)
    return Net()


def _rank_dependent_net(rank: int) -> Net:
    """Every rank starts elsewhere: only sync_module_states makes them rank 0's."""
    torch.manual_seed(100 + rank)
    net = Net()
    net.bn.running_mean.fill_(float(rank))
    return net


def _meta_net(rank: int) -> Net:
    with torch.device("meta"):
        net = Net()
    torch.manual_seed(7)  # the materialisation draws from here, in FSDP1's order
    return net


def _init_on_cpu(module: nn.Module) -> None:
    """A typical param_init_fn: allocate this module's own states, then initialise them."""
    module.to_empty(device=CPU, recurse=False)
    if hasattr(module, "reset_parameters"):
        module.reset_parameters()


# -- the cases: FSDP1 arguments read from the model, as training code builds them ---------------


def _conditional_kwargs(model: Net) -> dict[str, Any]:
    """A kwargs dict with a policy chosen from a config, a runtime enum and a frozen, ignored
    module, the shape of most constructors the codemod could not translate in place."""
    cfg = {"wrap": "blocks", "strategy": "SHARD_GRAD_OP", "freeze_embed": True}
    policy = (
        ModuleWrapPolicy({GainBlock})
        if cfg["wrap"] == "blocks"
        else functools.partial(size_based_auto_wrap_policy, min_num_params=10**6)
    )
    model.embed.requires_grad_(not cfg["freeze_embed"])
    return {
        "auto_wrap_policy": policy,
        "sharding_strategy": ShardingStrategy[str(cfg["strategy"])],
        "ignored_modules": [model.embed] if cfg["freeze_embed"] else None,
        "device_id": CPU,
        "use_orig_params": True,
    }


def _custom_policy(model: Net, head: ShardingStrategy = S.SHARD_GRAD_OP) -> CustomPolicy:
    def choose(module: nn.Module) -> bool | dict[str, Any]:
        if module is model.head:
            return {"sharding_strategy": head}
        return isinstance(module, GainBlock)

    return CustomPolicy(choose)


def _or(model: Net) -> Any:
    return functools.partial(
        _or_policy,
        policies=[
            functools.partial(lambda_auto_wrap_policy, lambda_fn=lambda m: m is model.head),
            functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={GainBlock}),
        ],
    )


def _size_based(min_num_params: int) -> Any:
    return functools.partial(size_based_auto_wrap_policy, min_num_params=min_num_params)


def _blocks_in_bf16(model: Net) -> CustomPolicy:
    """Blocks in bf16 (casting their inputs), the head in fp32 (casting its inputs back)."""
    blocks = MixedPrecision(
        param_dtype=torch.bfloat16, reduce_dtype=torch.float32, cast_forward_inputs=True
    )
    head = MixedPrecision(param_dtype=torch.float32, cast_forward_inputs=True)

    def choose(module: nn.Module) -> bool | dict[str, Any]:
        if isinstance(module, GainBlock):
            return {"mixed_precision": blocks}
        return {"mixed_precision": head} if module is model.head else False

    return CustomPolicy(choose)


def _forward_prefetch_is_set(model: nn.Module) -> None:
    """FSDP1's forward_prefetch -> FSDP2's explicit forward prefetch in first-forward order."""
    blocks = [b for b in model.modules() if isinstance(b, GainBlock)]
    for before, after in itertools.pairwise(blocks):
        targets = before._get_fsdp_state()._states_to_forward_prefetch
        assert targets == [after._get_fsdp_state()], targets


def _offload_is_set(model: nn.Module) -> None:
    units = [m for m in model.modules() if isinstance(m, FSDPModule)]
    for m in units:
        group = m._get_fsdp_state()._fsdp_param_group
        assert group is None or isinstance(group.offload_policy, CPUOffloadPolicy), m


def _pair_of_groups(model: Net) -> Any:
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("inter", "intra"))
    return (mesh.get_group("intra"), mesh.get_group("inter"))


def _unnamed_2x2(model: Net) -> Any:
    return init_device_mesh("cpu", (2, 2))


@dataclass(frozen=True)
class Case:
    kwargs: Callable[[Net], dict[str, Any]]
    tol: str = "fp32"
    model: Callable[[int], Net] = _net
    #: the FSDP1 arm's kwargs, where FSDP1 cannot run this one on a CPU-only build
    fsdp1_kwargs: Callable[[Net], dict[str, Any]] | None = None
    #: one more assertion on the FSDP2 model after training
    check: Callable[[nn.Module], None] | None = None


CASES: dict[str, dict[str, Case]] = {
    "policies": {
        "kwargs dict, conditional policy, frozen ignored module": Case(_conditional_kwargs),
        "size-based min_num_params, use_orig_params=False": Case(
            lambda m: {"auto_wrap_policy": _size_based(200), "device_id": CPU}
        ),
        "_or_policy of lambda and transformer policies, ignored_states": Case(
            lambda m: {
                "auto_wrap_policy": _or(m),
                "ignored_states": list(m.embed.parameters()),
                "device_id": CPU,
                "use_orig_params": True,
            }
        ),
        "CustomPolicy with a SHARD_GRAD_OP override, a process_group": Case(
            lambda m: {
                "auto_wrap_policy": _custom_policy(m),
                "process_group": dist.new_group([0, 1]),
                "device_id": CPU,
            }
        ),
        "NO_SHARD, always_wrap_policy (the ModuleList container manages nothing)": Case(
            lambda m: {
                "auto_wrap_policy": always_wrap_policy,
                "sharding_strategy": S.NO_SHARD,
                "device_id": CPU,
            }
        ),
        "a 1-D device_mesh, prefetch and limit arguments": Case(
            lambda m: {
                "auto_wrap_policy": ModuleWrapPolicy({GainBlock}),
                "device_mesh": init_device_mesh("cpu", (2,)),
                "forward_prefetch": True,
                "backward_prefetch": BackwardPrefetch.BACKWARD_POST,
                "limit_all_gathers": False,
                "device_id": CPU,
            },
            check=_forward_prefetch_is_set,
        ),
        # FSDP1's CPU offload pins memory, which a CPU-only build cannot: the FSDP1 arm runs
        # without it (offloading moves tensors, not values) and the check asserts the policy.
        "cpu_offload": Case(
            lambda m: {
                "auto_wrap_policy": ModuleWrapPolicy({GainBlock}),
                "cpu_offload": CPUOffload(offload_params=True),
                "device_id": CPU,
            },
            fsdp1_kwargs=lambda m: {
                "auto_wrap_policy": ModuleWrapPolicy({GainBlock}),
                "device_id": CPU,
            },
            check=_offload_is_set,
        ),
    },
    "mixed_precision": {
        "bf16, fp32 reduce, bf16 buffers; BatchNorm apart without mixed precision": Case(
            lambda m: {
                "auto_wrap_policy": ModuleWrapPolicy({GainBlock}),
                "mixed_precision": MixedPrecision(
                    param_dtype=torch.bfloat16,
                    reduce_dtype=torch.float32,
                    buffer_dtype=torch.bfloat16,
                ),
                "device_id": CPU,
            },
            tol="bf16",
        ),
        "bf16 reduce by default (size-based policy: BatchNorm apart again)": Case(
            lambda m: {
                "auto_wrap_policy": _size_based(400),
                "mixed_precision": MixedPrecision(param_dtype=torch.bfloat16),
                "device_id": CPU,
            },
            tol="bf16",
        ),
        "root only: cast_forward_inputs without cast_root_forward_inputs, bf16 buffers": Case(
            lambda m: {
                "mixed_precision": MixedPrecision(
                    param_dtype=torch.bfloat16,
                    reduce_dtype=torch.float32,
                    buffer_dtype=torch.bfloat16,
                    cast_forward_inputs=True,
                    cast_root_forward_inputs=False,
                ),
                "device_id": CPU,
            },
            tol="bf16",
        ),
        "CustomPolicy overriding mixed_precision per unit": Case(
            lambda m: {"auto_wrap_policy": _blocks_in_bf16(m), "device_id": CPU},
            tol="bf16",
        ),
    },
    "init": {
        "sync_module_states from rank-dependent init": Case(
            lambda m: {
                "auto_wrap_policy": ModuleWrapPolicy({GainBlock}),
                "sync_module_states": True,
                "device_id": CPU,
            },
            model=_rank_dependent_net,
        ),
        "meta device with param_init_fn": Case(
            lambda m: {
                "auto_wrap_policy": ModuleWrapPolicy({GainBlock}),
                "param_init_fn": _init_on_cpu,
                "device_id": CPU,
            },
            model=_meta_net,
        ),
        "meta device, reset_parameters, size-based policy": Case(
            lambda m: {"auto_wrap_policy": _size_based(200), "device_id": CPU},
            model=_meta_net,
        ),
    },
    "hybrid_4_ranks": {
        "HYBRID_SHARD on a 2x2 device_mesh without dim names": Case(
            lambda m: {
                "auto_wrap_policy": ModuleWrapPolicy({GainBlock}),
                "sharding_strategy": S.HYBRID_SHARD,
                "device_mesh": _unnamed_2x2(m),
                "device_id": CPU,
            }
        ),
        "_HYBRID_SHARD_ZERO2 from an (intra, inter) pair, sync_module_states": Case(
            lambda m: {
                "auto_wrap_policy": _size_based(400),
                "sharding_strategy": S._HYBRID_SHARD_ZERO2,
                "process_group": _pair_of_groups(m),
                "sync_module_states": True,
                "device_id": CPU,
            },
            model=_rank_dependent_net,
        ),
        "HYBRID_SHARD, CustomPolicy with a _HYBRID_SHARD_ZERO2 override": Case(
            lambda m: {
                "auto_wrap_policy": _custom_policy(m, head=S._HYBRID_SHARD_ZERO2),
                "sharding_strategy": S.HYBRID_SHARD,
                "device_mesh": init_device_mesh("cpu", (2, 2), mesh_dim_names=("r", "s")),
                "device_id": CPU,
            }
        ),
        "FULL_SHARD, size-based, bf16 with fp32 reduce": Case(
            lambda m: {
                "auto_wrap_policy": _size_based(200),
                "mixed_precision": BF16_FP32_REDUCE,
                "device_id": CPU,
            },
            tol="bf16",
        ),
    },
}


# -- what each side became ----------------------------------------------------------------------


def _clean(name: str) -> str:
    return name.replace("_fsdp_wrapped_module.", "").replace("_fsdp_wrapped_module", "").strip(".")


def _fsdp1_units(model: nn.Module) -> set[str]:
    return {_clean(n) for n, m in model.named_modules() if isinstance(m, FSDP)}


def _empty_containers(model: nn.Module) -> set[str]:
    """FSDP1 units around a ModuleList/ModuleDict that manage nothing: fully_shard refuses
    containers, and skipping one that manages nothing changes nothing."""
    return {
        _clean(n)
        for n, m in model.named_modules()
        if isinstance(m, FSDP) and m._handle is None and isinstance(m.module, nn.ModuleList)
    }


def _fsdp2_units(model: nn.Module) -> set[str]:
    return {n for n, m in model.named_modules() if isinstance(m, FSDPModule)}


def _ranks(group: dist.ProcessGroup) -> list[int]:
    return dist.get_process_group_ranks(group)


def _fsdp1_layout(model: nn.Module) -> dict[str, dict[str, Any]]:
    """Per unit with parameters: (replicate group, shard group) by their ranks, and so on."""
    out = {}
    for name, m in model.named_modules():
        if not isinstance(m, FSDP) or m._handle is None:
            continue
        strategy, group = m.sharding_strategy, _ranks(m.process_group)
        if strategy in (S.HYBRID_SHARD, S._HYBRID_SHARD_ZERO2):
            mesh = (_ranks(m._inter_node_pg), group)
        else:
            alone = [dist.get_rank()]
            mesh = (group, alone) if strategy == S.NO_SHARD else (alone, group)
        mp = m.mixed_precision
        cast = mp.cast_forward_inputs or (m._is_root and mp.cast_root_forward_inputs)
        out[_clean(name)] = {
            "mesh": mesh,
            "reshard": not m._is_root and strategy in (S.FULL_SHARD, S.HYBRID_SHARD),
            "param_dtype": mp.param_dtype,
            "reduce_dtype": mp.reduce_dtype or mp.param_dtype,
            "cast_inputs": mp.param_dtype is not None and cast,
            "offload": m.cpu_offload.offload_params,
        }
    return out


def _fsdp2_layout(model: nn.Module) -> dict[str, dict[str, Any]]:
    out = {}
    for name, m in model.named_modules():
        if not isinstance(m, FSDPModule) or (g := m._get_fsdp_state()._fsdp_param_group) is None:
            continue
        mp = g.mp_policy
        replicas = getattr(g.mesh_info, "replicate_process_group", None)
        shards = g.mesh_info.shard_process_group
        out[name] = {
            "mesh": (_ranks(replicas) if replicas else [dist.get_rank()], _ranks(shards)),
            "reshard": g.post_forward_mesh_info is not None,
            "param_dtype": mp.param_dtype,
            "reduce_dtype": mp.reduce_dtype,  # spelled out, as FSDP1 reads it
            "cast_inputs": mp.param_dtype is not None and mp.cast_forward_inputs,
            "offload": isinstance(g.offload_policy, CPUOffloadPolicy),
        }
    return out


def test_spellings_without_fsdp1_build_what_fsdp1s_build():
    """The codemod writes FSDP1's values without FSDP1 where only the bridge reads them
    (F2P013): a strategy's and a prefetch's name, a module policy as a predicate, a config's
    fields as a dict. The same units, each with the same mesh, resharding, mixed precision and
    offload, and the same buffer dtypes. (Its own one-rank group: this module's refusals need
    none to be there.)"""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        _spellings_without_fsdp1()
    finally:
        dist.destroy_process_group()


def _spellings_without_fsdp1() -> None:
    built = []
    for strategy, policy, mp, offload, prefetch in (
        (
            ShardingStrategy.SHARD_GRAD_OP,
            ModuleWrapPolicy({GainBlock}),
            MixedPrecision(param_dtype=BF16, buffer_dtype=BF16),
            CPUOffload(offload_params=True),
            BackwardPrefetch.BACKWARD_POST,
        ),
        (
            "SHARD_GRAD_OP",
            lambda module: isinstance(module, (GainBlock,)),
            dict(param_dtype=BF16, buffer_dtype=BF16),
            dict(offload_params=True),
            "BACKWARD_POST",
        ),
    ):
        torch.manual_seed(0)
        model = fully_shard_like_fsdp1(
            Net(),
            sharding_strategy=strategy,
            auto_wrap_policy=policy,
            mixed_precision=mp,
            cpu_offload=offload,
            backward_prefetch=prefetch,
            device_id=CPU,
        )
        built.append((_fsdp2_layout(model), _buffer_dtypes(model)))
    assert built[0] == built[1] and len(built[0][0]) > 1
    layout, buffers = built[0]
    assert not any(unit["reshard"] for unit in layout.values())  # SHARD_GRAD_OP's
    assert all(unit["offload"] for unit in layout.values())
    # mixed precision on the blocks (the BatchNorm unit runs without it, as in FSDP1)
    assert {name: unit["param_dtype"] for name, unit in layout.items()}["blocks.0"] is BF16
    assert buffers["blocks.0.gain"] is BF16 and buffers["bn.running_mean"] is torch.float32


def _buffer_dtypes(model: nn.Module) -> dict[str, torch.dtype]:
    return {_clean(n): b.dtype for n, b in model.named_buffers()}


def _fsdp1_params(model: nn.Module) -> dict[str, torch.Tensor]:
    with FSDP.summon_full_params(model):
        return {_clean(n): p.detach().float().clone() for n, p in model.named_parameters()}


def _fsdp2_params(model: nn.Module) -> dict[str, torch.Tensor]:
    return {
        n: (p.full_tensor() if isinstance(p, DTensor) else p).detach().float()
        for n, p in model.named_parameters()
    }


# -- training ------------------------------------------------------------------------------------


def _train(model: nn.Module, clip: Callable, rank: int, world: int) -> list[tuple[float, float]]:
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=LR)
    history = []
    for step in range(STEPS):
        x, y = global_batch(step, size=ROWS_PER_RANK * world)
        loss = loss_fn(model, local_rows(x, rank, world), local_rows(y, rank, world))
        # Gradients of ignored parameters stay unreduced on both sides (each rank steps its
        # own copy); reducing them here would hide a unit that shards what FSDP1 ignores.
        loss.backward()
        norm = clip(model)
        opt.step()
        opt.zero_grad()
        history.append((loss.item(), norm.item()))
    return history


def _fsdp1_clip(model: nn.Module) -> torch.Tensor:
    return compat.clip_grad_norm_(model, MAX_NORM)


def _fsdp2_clip(model: nn.Module) -> torch.Tensor:
    return fsdp2_port.clip_grad_norm_(model.parameters(), MAX_NORM)


def _no_cpu_check():
    """FSDP1 refuses sync_module_states for CPU tensors only because NCCL needs the GPU; on
    gloo its broadcast is right, so the FSDP1 arm runs it (fully_shard_like_fsdp1 needs no
    such patch)."""
    return mock.patch(
        "torch.distributed.fsdp._init_utils._check_module_states_for_sync_module_states",
        lambda states: None,
    )


def _compare(rank: int, world: int, name: str, case: Case) -> None:
    where = f"[{name}] rank {rank}"
    theirs_model = case.model(rank)
    with _no_cpu_check():
        theirs = FSDP(theirs_model, **(case.fsdp1_kwargs or case.kwargs)(theirs_model))
    ours_model = case.model(rank)
    # the arguments are the caller's values (building a ModuleWrapPolicy runs FSDP1's __init__);
    # sharding and training run no FSDP1 code at all
    ours_kwargs = case.kwargs(ours_model)
    with forbid_fsdp1_calls():
        ours = fully_shard_like_fsdp1(ours_model, **ours_kwargs)
    assert ours is ours_model and isinstance(ours, FSDPModule), where
    assert _fsdp2_units(ours) == _fsdp1_units(theirs) - _empty_containers(theirs), where
    if case.model is _rank_dependent_net:  # every rank now holds rank 0's states
        rank0 = _rank_dependent_net(0)
        for n, p in _fsdp2_params(ours).items():
            assert torch.equal(p, rank0.get_parameter(n)), (where, n)
        assert torch.equal(ours.bn.running_mean, rank0.bn.running_mean), where
    theirs_history = _train(theirs, _fsdp1_clip, rank, world)
    with forbid_fsdp1_calls():
        ours_history = _train(ours, _fsdp2_clip, rank, world)
    layout, want = _fsdp2_layout(ours), _fsdp1_layout(theirs)
    if case.fsdp1_kwargs is not None:  # the FSDP1 arm ran without offload
        want = {n: {**u, "offload": layout[n]["offload"]} for n, u in want.items()}
    assert layout == want, (where, layout, want)
    assert _buffer_dtypes(ours) == _buffer_dtypes(theirs), where
    tol = TOL[case.tol]
    assert any(norm > MAX_NORM for _, norm in theirs_history), f"{where}: clipping must fire"
    for step, ((loss, norm), (want_loss, want_norm)) in enumerate(
        zip(ours_history, theirs_history)
    ):
        assert math.isclose(loss, want_loss, rel_tol=tol), (where, step, loss, want_loss)
        assert math.isclose(norm, want_norm, rel_tol=tol), (where, step, norm, want_norm)
    theirs_params, ours_params = _fsdp1_params(theirs), _fsdp2_params(ours)
    assert ours_params.keys() == theirs_params.keys(), where
    for n, p in ours_params.items():
        torch.testing.assert_close(
            p, theirs_params[n], rtol=tol, atol=tol, msg=lambda m, n=n: f"{where} {n}: {m}"
        )
    if case.check is not None:
        case.check(ours)


def _compare_group(rank: int, world: int, group: str) -> None:
    for name, case in CASES[group].items():
        try:
            _compare(rank, world, name, case)
        except Exception as e:  # the traceback above it says where
            raise RuntimeError(f"case [{name}] failed on rank {rank}") from e


# Each group is one spawn (about 3 s) whose cases run in turn; a failure names its case.
@pytest.mark.parametrize(
    "group, world",
    [("policies", 2), ("mixed_precision", 2), ("init", 2), ("hybrid_4_ranks", 4)],
)
@pytest.mark.slow
def test_trains_like_fsdp1(group, world):
    run_ranks(_compare_group, world, group, timeout=240)


# -- the signature ------------------------------------------------------------------------------


def test_signature_is_fsdp1s():
    """Names, order, kinds and defaults: the codemod copies FSDP1 arguments verbatim."""
    theirs = list(inspect.signature(FSDP.__init__).parameters.values())[1:]
    ours = list(inspect.signature(fully_shard_like_fsdp1).parameters.values())
    strip = lambda ps: [(p.name, p.kind, p.default) for p in ps]  # noqa: E731
    assert strip(ours) == strip(theirs)
    assert fsdp2_port.fully_shard_like_fsdp1 is fully_shard_like_fsdp1


# -- refusals -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (
            {"mixed_precision": MixedPrecision(torch.bfloat16, keep_low_precision_grads=True)},
            r"keep_low_precision_grads=True.*model\.to\(torch\.bfloat16\) before sharding",
        ),
        ({"sharding_strategy": "full"}, r"names no ShardingStrategy"),
        ({"sharding_strategy": 1}, r"must be a ShardingStrategy, its name or None"),
        ({"backward_prefetch": "BACKWARD"}, r"'BACKWARD' names no BackwardPrefetch"),
        (
            {"mixed_precision": {"param_dtype": torch.bfloat16, "buffer": torch.float32}},
            r"mixed_precision: 'buffer' not a field of MixedPrecision \(its fields: param_dtype",
        ),
        (
            {"process_group": object(), "device_mesh": object()},
            r"process_group and device_mesh: pass one",
        ),
        ({"cpu_offload": True}, r"cpu_offload must be an FSDP1 CPUOffload, a dict of its"),
        ({}, r"needs an initialised process group.*init_process_group\(\) first"),
    ],
)
def test_refuses_what_fsdp2_cannot_honour(kwargs, match):
    """Checked before anything is built: no process group needed."""
    with pytest.raises(ValueError, match=match):
        fully_shard_like_fsdp1(nn.Linear(2, 2), **kwargs)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_refuses_a_device_this_process_lacks():
    with pytest.raises(ValueError, match=r"device_id=device\(type='cuda', index=0\): no cuda"):
        fully_shard_like_fsdp1(nn.Linear(2, 2), device_id=torch.device("cuda", 0))


@pytest.mark.skipif(torch.accelerator.is_available(), reason="needs a machine without one")
def test_refuses_an_accelerator_index_on_a_machine_without_one():
    with pytest.raises(ValueError, match=r"device_id=1: an accelerator index, but this machine"):
        fully_shard_like_fsdp1(nn.Linear(2, 2), device_id=1)


def test_refuses_full_precision_eval_switch():
    env = mock.patch.dict(os.environ, {"FSDP_USE_FULL_PREC_IN_EVAL": "1"})
    with env, pytest.raises(ValueError, match=r"FSDP_USE_FULL_PREC_IN_EVAL=1.*Unset it"):
        fully_shard_like_fsdp1(nn.Linear(2, 2), mixed_precision=BF16_FP32_REDUCE)


def _like_fsdp1_refusals() -> None:
    # A container that would manage parameters of its own: FSDP1 never gathers them.
    with pytest.raises(ValueError, match=r"container ModuleList .* select the modules inside"):
        fully_shard_like_fsdp1(
            Net(), auto_wrap_policy=ModuleWrapPolicy({nn.ModuleList}), device_id=CPU
        )
    with pytest.raises(ValueError, match=r"2-D device_mesh with a non-hybrid .*device_mesh\[name"):
        fully_shard_like_fsdp1(Net(), device_mesh=init_device_mesh("cpu", (2, 1)))
    # FSDP1's default hybrid groups on the CPU (one device per node): shard groups of one
    # rank, which FSDP1 silently turns into ranks that train alone.
    with pytest.raises(
        ValueError, match=r"never reduces gradients across .*=ShardingStrategy\.NO_SHARD"
    ):
        fully_shard_like_fsdp1(Net(), sharding_strategy=S.HYBRID_SHARD, device_id=CPU)
    # A module FSDP1 (or fully_shard) already wraps: sharding it twice fails at forward.
    with pytest.raises(ValueError, match=r"already holds FullyShardedDataParallel modules"):
        fully_shard_like_fsdp1(FSDP(Net(), device_id=CPU))
    with pytest.raises(ValueError, match=r"already holds .* \(FSDP1 or fully_shard\)"):
        fully_shard_like_fsdp1(fully_shard(Net(), mesh=cpu_mesh()))
    with pytest.raises(ValueError, match=r"hybrid sharding_strategy takes process_group=\("):
        fully_shard_like_fsdp1(
            Net(), sharding_strategy=S.HYBRID_SHARD, process_group=dist.group.WORLD
        )


def _tools_refuse_the_other_fsdp() -> None:
    """Each side's norm tools count only their own layout: a norm over the other's tensors
    would be wrong (an FSDP1 shard taken for a replica, an FSDP2 shard for a whole tensor)."""
    fsdp1 = FSDP(Net(), device_id=CPU, use_orig_params=True)
    loss_fn(fsdp1, *global_batch(0)).backward()
    for call, message in [
        (
            lambda: fsdp2_port.BF16Optimizer(fsdp1, LR),
            r"fsdp2_port\.BF16Optimizer was given parameters of an FSDP1 .* Use "
            r"fsdp2_port\.compat\.BF16Optimizer while the model is on FSDP1",
        ),
        (
            lambda: fsdp2_port.clip_grad_norm_(fsdp1.parameters(), MAX_NORM),
            r"fsdp2_port\.clip_grad_norm_ was given .* "
            r"Use fsdp2_port\.compat\.clip_grad_norm_ while",
        ),
        (
            lambda: fsdp2_port.global_grad_norm(list(fsdp1.parameters())),
            r"fsdp2_port\.global_grad_norm was given .* "
            r"Use fsdp2_port\.compat\.clip_grad_norm_ while",
        ),
    ]:
        with pytest.raises(TypeError, match=message):
            call()
    flat = FSDP(Net(), device_id=CPU, use_orig_params=False)  # flat parameters themselves
    with pytest.raises(TypeError, match=r"fsdp2_port\.BF16Optimizer was given parameters"):
        fsdp2_port.BF16Optimizer(flat, LR)
    fsdp2 = fully_shard_like_fsdp1(
        Net(), auto_wrap_policy=ModuleWrapPolicy({GainBlock}), device_id=CPU
    )
    loss_fn(fsdp2, *global_batch(0)).backward()
    # compat's optimizer on an FSDP2 model (or an inner module of one) is fsdp2_port's
    assert type(compat.BF16Optimizer(fsdp2, LR)) is fsdp2_port.BF16Optimizer
    assert type(compat.BF16Optimizer(fsdp2.blocks[0], LR)) is fsdp2_port.BF16Optimizer
    with pytest.raises(TypeError, match=r"compat\.clip_grad_norm_ .* Use fsdp2_port\.clip_grad_"):
        compat.clip_grad_norm_(fsdp2, MAX_NORM)


def _refusals(rank: int, world: int) -> None:
    _like_fsdp1_refusals()
    _tools_refuse_the_other_fsdp()


@pytest.mark.slow
def test_refusals_that_need_ranks():
    run_ranks(_refusals, 2, timeout=120)
