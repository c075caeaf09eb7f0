"""The plain form with values only the run knows trains as FSDP1 did, and runs no FSDP1 code.

Real code computes its FSDP1 arguments elsewhere (verl's shape): a policy a function returns,
``getattr(ShardingStrategy, name)``, a ``MixedPrecision`` a function builds (or None), a
process group, ``sync_module_states`` from a config (and within the caller's
``device_mesh``). The codemod writes the plain ``fully_shard`` form and reads those values
with ``fsdp2_port``'s readers (``mesh_like_fsdp1``, ``reshard_after_forward_like_fsdp1``,
``units_like_fsdp1``, ``mp_policy_like_fsdp1``). What is chosen in branches here is written
out where it is chosen, no reader: verl's mixed precision as ``MixedPrecisionPolicy``, a
strategy as ``reshard_after_forward`` and an ``init_device_mesh``. FSDP1 source and its
migration run side by side on 2 gloo ranks from the same weights and batches
(``tests/test_plain_rewrite.py``'s training and checks); the migrated side also builds and
trains under ``forbid_fsdp1_calls``.

Tolerance 1e-6, bf16 included, as in ``tests/test_plain_rewrite.py``: both sides run the same
kernels on the same dtypes and two ranks' reductions add the same two numbers.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import ShardingStrategy

from fsdp2_port.codemods import engine, registry
from fsdp2_port.codemods.options import Options
from fsdp2_port.prove.launch import run_ranks
from fsdp2_port.prove.no_fsdp1 import forbid_fsdp1_calls
from tests.models import GainBlock
from tests.test_plain_rewrite import _net, _train

pytestmark = pytest.mark.slow  # gloo ranks

SOURCE = """\
import functools
import logging

import torch
from torch.distributed.fsdp import CPUOffload, MixedPrecision, ShardingStrategy
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import ModuleWrapPolicy, size_based_auto_wrap_policy
from torch.distributed.fsdp.wrap import lambda_auto_wrap_policy, transformer_auto_wrap_policy


def policy_of(cfg):
    return functools.partial(size_based_auto_wrap_policy, min_num_params=cfg["min_params"])


def precision_of(cfg):
    if cfg["dtype"] is None:
        return None
    dtype = cfg["dtype"]
    return MixedPrecision(param_dtype=dtype, reduce_dtype=dtype, buffer_dtype=dtype)


def build(net, cfg, group):
    net = FSDP(
        net,
        auto_wrap_policy=policy_of(cfg),
        sharding_strategy=getattr(ShardingStrategy, cfg["strategy"]),
        mixed_precision=precision_of(cfg),
        process_group=group,
        sync_module_states=cfg["sync"],
        device_id=torch.device("cpu"),
    )
    return net


def build_on_mesh(net, mesh, sync):
    return FSDP(net, device_mesh=mesh, sync_module_states=sync, device_id=torch.device("cpu"))


def build_by_key(net, key, sync, classes):
    if key == "full":
        strategy = ShardingStrategy.FULL_SHARD
    elif key == "zero2":
        strategy = ShardingStrategy.SHARD_GRAD_OP
    else:
        strategy = ShardingStrategy.NO_SHARD
    return FSDP(
        net,
        sharding_strategy=strategy,
        auto_wrap_policy=ModuleWrapPolicy(classes),
        sync_module_states=sync,
        device_id=torch.device("cpu"),
    )


def build_offload(net, offload, classes):
    cpu_offload = CPUOffload(offload_params=offload)
    return FSDP(
        net,
        cpu_offload=cpu_offload,
        auto_wrap_policy=ModuleWrapPolicy(classes),
        device_id=torch.device("cpu"),
    )


def shard_with(net, policy, name):
    return FSDP(
        net,
        auto_wrap_policy=policy,
        sharding_strategy=getattr(ShardingStrategy, name),
        device_id=torch.device("cpu"),
    )


def build_helped(net, classes, by_class):
    if by_class:
        return shard_with(
            net,
            functools.partial(transformer_auto_wrap_policy, transformer_layer_cls=classes),
            "SHARD_GRAD_OP",
        )
    blocks = [m for m in net.modules() if isinstance(m, tuple(classes))]
    policy = functools.partial(lambda_auto_wrap_policy, lambda_fn=lambda m: m in blocks)
    return shard_with(net, policy, "FULL_SHARD")


def build_chosen(net, dtype, is_ref, classes):
    buffer_dtype = dtype
    mixed_precision = MixedPrecision(
        param_dtype=dtype, reduce_dtype=torch.float32, buffer_dtype=buffer_dtype
    )
    if is_ref:
        mixed_precision = None
    net = FSDP(
        net,
        auto_wrap_policy=ModuleWrapPolicy(classes),
        mixed_precision=mixed_precision,
        device_id=torch.device("cpu"),
    )
    return net


def build_grown(net, classes, dtype):
    policy = functools.partial(
        lambda_auto_wrap_policy, lambda_fn=lambda m: isinstance(m, tuple(classes))
    )
    options = {"auto_wrap_policy": policy, "device_id": torch.device("cpu")}
    if dtype is not None:
        options["mixed_precision"] = MixedPrecision(
            param_dtype=dtype, reduce_dtype=dtype, buffer_dtype=dtype
        )
    return FSDP(net, **options)


def build_tested(net, strategy, bf16, classes):
    if bf16:
        precision = MixedPrecision(
            param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16, buffer_dtype=torch.bfloat16
        )
    else:
        precision = MixedPrecision(
            param_dtype=torch.float32, reduce_dtype=torch.float32, buffer_dtype=torch.float32
        )
    assert strategy in (ShardingStrategy.FULL_SHARD, ShardingStrategy.SHARD_GRAD_OP), strategy
    if strategy == ShardingStrategy.SHARD_GRAD_OP:
        logging.info(f"ZeRO-2 in {precision.param_dtype}")
    return FSDP(
        net,
        auto_wrap_policy=ModuleWrapPolicy(classes),
        sharding_strategy=strategy,
        mixed_precision=precision,
        device_id=torch.device("cpu"),
    )


def precision_ignoring(dtype, norms):
    return MixedPrecision(
        param_dtype=dtype, reduce_dtype=dtype, buffer_dtype=dtype, _module_classes_to_ignore=norms
    )


def build_ignoring(net, classes, dtype, norms):
    return FSDP(
        net,
        auto_wrap_policy=ModuleWrapPolicy(classes),
        mixed_precision=precision_ignoring(dtype, norms),
        device_id=torch.device("cpu"),
    )


class Defaults:
    fsdp = {
        "sharding_strategy": ShardingStrategy.SHARD_GRAD_OP,
        "mixed_precision": MixedPrecision(
            param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16, buffer_dtype=torch.bfloat16
        ),
        "device_id": torch.device("cpu"),
    }

    def wrap(self, net, classes):
        return FSDP(net, auto_wrap_policy=ModuleWrapPolicy(classes), **self.fsdp)
"""

#: (strategy, compute dtype or None, a group of its own, sync_module_states); "mesh": the
#: caller's DeviceMesh, no policy (``build_on_mesh``); "chosen": verl's mixed precision,
#: chosen in branches (``build_chosen``: written out as MixedPrecisionPolicy, no reader);
#: "key:<key>": a strategy chosen by ``if``/``elif`` (``build_by_key``: each branch binds its
#: ``reshard_after_forward`` and ``init_device_mesh``); "offload": CPU offload by a flag, on
#: the migrated side only (it moves no numbers; FSDP1 pins memory, which needs an accelerator);
#: "helped:<class|lambda>": a policy and a strategy name handed to a helper that builds the
#: model (``build_helped``: written as a predicate and a name where they are built, F2P013);
#: "spread": a class attribute's keyword arguments (``Defaults.wrap``: the keys known, the
#: values read at run time through ``kwargs_as_migrated``); "grown": keyword arguments
#: extended under a condition (``build_grown``: a key it may lack reads as None); "tested":
#: openvla's shape, a strategy FSDP1's caller passes, tested against members, and a
#: MixedPrecision whose fields a log line reads (``build_tested``: tested by name, the config
#: written as a dict and its fields read from it); "ignoring": a MixedPrecision built
#: elsewhere whose ``_module_classes_to_ignore`` keeps LayerNorm in full precision
#: (``build_ignoring``: ``full_precision_like_fsdp1`` reads the classes)
CASES = {
    "ignoring-bf16": ("ignoring", torch.bfloat16, False, False),
    "tested-bf16": ("tested", torch.bfloat16, False, False),
    "grown-bf16": ("grown", torch.bfloat16, False, False),
    "grown-fp32": ("grown", None, False, False),
    "spread": ("spread", torch.bfloat16, False, False),
    "helped-class": ("helped:class", None, False, False),
    "helped-lambda": ("helped:lambda", None, False, False),
    "chosen-bf16": ("chosen", torch.bfloat16, False, False),
    "key-ddp-sync": ("key:ddp", None, False, True),
    "key-zero2": ("key:zero2", None, False, False),
    "offload": ("offload", None, False, False),
    "mesh-sync": ("mesh", None, False, True),
    "shard_grad_op-bf16-group-sync": ("SHARD_GRAD_OP", torch.bfloat16, True, True),
    "full_shard-fp32": ("FULL_SHARD", None, False, False),
    "no_shard-bf16": ("NO_SHARD", torch.bfloat16, False, False),
}


def _build(namespace: dict, case: str, rank: int, world: int, migrated: bool) -> nn.Module:
    kind, dtype, own_group, sync = CASES[case]
    # FSDP1 refuses sync_module_states on CPU: its arm starts from rank 0's weights on every
    # rank, which is what the migrated arm's broadcast must produce
    sync = sync and migrated
    net = _perturbed(rank) if sync else _net()
    if kind == "mesh":
        return namespace["build_on_mesh"](net, init_device_mesh("cpu", (world,)), sync)
    if kind == "chosen":
        return namespace["build_chosen"](net, dtype, False, {GainBlock})
    if kind == "offload":  # FSDP1 pins its CPU copies: it cannot offload on a CPU-only machine
        return namespace["build_offload"](net, migrated, {GainBlock})
    if kind == "grown":
        return namespace["build_grown"](net, {GainBlock}, dtype)
    if kind == "ignoring":  # LayerNorm units in fp32: in bf16 the numbers differ
        return namespace["build_ignoring"](net, {GainBlock}, dtype, (nn.LayerNorm,))
    if kind == "tested":  # the caller passes FSDP1's member to both arms
        return namespace["build_tested"](net, ShardingStrategy.SHARD_GRAD_OP, True, {GainBlock})
    if kind == "spread":
        return namespace["Defaults"]().wrap(net, {GainBlock})
    if kind.startswith("helped:"):
        return namespace["build_helped"](net, {GainBlock}, kind == "helped:class")
    if kind.startswith("key:"):
        return namespace["build_by_key"](net, kind.removeprefix("key:"), sync, {GainBlock})
    group = dist.new_group(list(range(world))) if own_group else None
    cfg = {"min_params": 400, "strategy": kind, "dtype": dtype, "sync": sync}
    return namespace["build"](net, cfg, group)


def _compare(rank: int, world: int, migrated: str, case: str) -> None:
    compute = CASES[case][1] or torch.float32
    results = []
    for text in (SOURCE, migrated):
        namespace: dict = {}
        exec(compile(text, "train.py", "exec"), namespace)
        is_migrated = text is migrated
        with forbid_fsdp1_calls() if is_migrated else contextlib.nullcontext():
            model = _build(namespace, case, rank, world, is_migrated)
            results.append(_train(model, rank, world, compute))
    for step, (a, b) in enumerate(zip(*results)):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-6, msg=f"{case}, step {step}")


def _perturbed(rank: int) -> nn.Module:
    """The test net with every rank's weights moved apart: only a broadcast from rank 0 makes
    the two runs start alike."""
    net = _net()
    with torch.no_grad():
        for parameter in net.parameters():
            parameter.add_(0.01 * rank)
    return net


@pytest.fixture(scope="module")
def migrated() -> str:
    text, findings = engine.migrate_text(SOURCE, "train.py", registry.select(), Options())
    assert "fully_shard_like_fsdp1" not in text and "FSDP(" not in text, text
    assert "units_like_fsdp1" in text and "mesh_like_fsdp1" in text, text
    offload = text.split("def build_offload")[1].split("def build_chosen")[0]
    assert "CPUOffloadPolicy(pin_memory=False) if offload else OffloadPolicy()" in offload, offload
    by_key = text.split("def build_by_key")[1].split("def build_offload")[0]
    assert "init_device_mesh(" in by_key and "fsdp2_port" not in by_key, by_key
    helped = text.split("def shard_with")[1].split("def build_chosen")[0]
    assert "lambda module: isinstance(module, tuple(classes))" in helped, helped
    assert "lambda_fn" not in helped and "ShardingStrategy" not in helped, helped
    chosen = text.split("def build_chosen")[1].split("def build_grown")[0]
    assert "MixedPrecision(" not in chosen and "fsdp2_port" not in chosen, chosen
    ignoring = text.split("def build_ignoring")[1].split("class Defaults")[0]
    assert ignoring.count("isinstance(owner, fsdp2_port.full_precision_like_fsdp1(") == 1, ignoring
    assert "_BatchNorm" not in ignoring, ignoring
    tested = text.split("def build_tested")[1].split("def precision_ignoring")[0]
    assert tested.count("fsdp2_port.member_name(strategy)") == 2, tested
    assert "ShardingStrategy" not in tested and "MixedPrecision(" not in tested, tested
    assert "precision['param_dtype']" in tested, tested
    grown = text.split("def build_grown")[1].split("def build_tested")[0]
    assert 'optional=("mixed_precision",)' in grown and "**" not in grown, grown
    assert "MixedPrecision(" not in grown and "lambda_auto" not in grown, grown  # F2P013
    spread = text.split("class Defaults")[1]
    assert "fsdp2_port.kwargs_as_migrated(" in spread and "**" not in spread, spread
    assert not [f for f in findings if f.severity == "review"], findings
    return text


@pytest.mark.parametrize("case", sorted(CASES))
def test_plain_form_with_readers_trains_as_fsdp1_did(migrated: str, case: str) -> None:
    run_ranks(_compare, 2, migrated, case, timeout=120)
