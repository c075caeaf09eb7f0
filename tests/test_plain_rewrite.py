"""The plain FSDP2 form the codemod writes for runtime-shaped FSDP1 constructors trains as FSDP1
did: FSDP1 source and its migration run side by side on 2 gloo ranks from the same weights and
batches; losses at every step and the eval outputs after them (which read every parameter and
BatchNorm's running statistics) must agree.

The sources are what real code writes (``**kwargs`` from a dict shared by two constructors, a
policy and mixed precision bound to names, a runtime class set, ``buffer_dtype``, offload
chosen by a flag, BatchNorm under a policy with mixed precision; Lumina's shape: a lambda
policy, a process group, strategy and dtype chosen by a key; ``param_init_fn`` on a meta-device
model, through ``fsdp2_port.materialize_like_fsdp1``; mixed precision chosen by an ``if``, the
BatchNorm exception then decided at run time; mixed precision or none by a flag in the call);
the migration must be plain:
no ``fully_shard_like_fsdp1`` and no FSDP1 name left. FSDP1's CPU offload pins memory, which
needs an accelerator, so the offload branch is not taken here; ``tests/test_plain_readers.py``
runs the plain form's offload on the CPU against FSDP1 without it.

Tolerance 1e-6, bf16 included: both sides run the same kernels on the same dtypes, and two
ranks' reductions add the same two numbers (measured: equal within 1e-9 in fp32 and bf16).
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch import nn

from fsdp2_port.codemods import engine, registry
from fsdp2_port.codemods.options import Options
from fsdp2_port.prove.launch import run_ranks
from tests.models import GainBlock, global_batch, local_rows, loss_fn
from tests.models import NormNet as Net

pytestmark = pytest.mark.slow  # gloo ranks

SOURCE = """\
import functools

import torch
from torch.distributed.fsdp import CPUOffload, MixedPrecision, ShardingStrategy
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import (
    ModuleWrapPolicy,
    lambda_auto_wrap_policy,
    transformer_auto_wrap_policy,
)


def build(net, twin, block, dtype, offload):
    shared = dict(
        auto_wrap_policy=functools.partial(
            transformer_auto_wrap_policy, transformer_layer_cls={block}
        ),
        sharding_strategy=ShardingStrategy.SHARD_GRAD_OP,
        device_id=torch.device("cpu"),
        use_orig_params=True,
        limit_all_gathers=offload,
    )
    precision = MixedPrecision(param_dtype=dtype, reduce_dtype=dtype, buffer_dtype=dtype)
    net = FSDP(net, **shared, mixed_precision=precision)
    twin = FSDP(twin, **shared, cpu_offload=CPUOffload(offload_params=True) if offload else None)
    return net, twin


def build_by_classes(net, classes):
    policy = ModuleWrapPolicy(classes)
    net = FSDP(net, auto_wrap_policy=policy, device_id=torch.device("cpu"))
    return net


def build_on_meta(net, classes, init):
    net = FSDP(
        net,
        auto_wrap_policy=functools.partial(
            transformer_auto_wrap_policy, transformer_layer_cls=classes
        ),
        param_init_fn=init,
        device_id=torch.device("cpu"),
    )
    return net


def build_with_reduce_dtype(net, classes, half):
    precision = None
    if half:
        precision = MixedPrecision(reduce_dtype=torch.bfloat16)
    net = FSDP(
        net,
        mixed_precision=precision,
        auto_wrap_policy=ModuleWrapPolicy(classes),
        device_id=torch.device("cpu"),
    )
    return net


def build_if_half(net, classes, half):
    return FSDP(
        net,
        auto_wrap_policy=ModuleWrapPolicy(classes),
        mixed_precision=MixedPrecision(
            param_dtype=torch.bfloat16, buffer_dtype=torch.bfloat16
        ) if half else None,
        device_id=torch.device("cpu"),
    )


def build_by_choices(net, group, choice, precision):
    net = FSDP(
        net,
        auto_wrap_policy=functools.partial(
            lambda_auto_wrap_policy, lambda_fn=lambda m: m in list(net.blocks)
        ),
        process_group=group,
        sharding_strategy={
            "fsdp": ShardingStrategy.FULL_SHARD,
            "sdp": ShardingStrategy.SHARD_GRAD_OP,
        }[choice],
        mixed_precision=MixedPrecision(
            param_dtype={"fp32": torch.float32, "bf16": torch.bfloat16}[precision],
        ),
        device_id=torch.device("cpu"),
    )
    return net
"""


def _net() -> Net:
    torch.manual_seed(0)
    return Net()


def _init(module: nn.Module) -> None:
    """A ``param_init_fn`` that draws from the RNG: only FSDP1's order of calls gives FSDP1's
    weights."""
    module.to_empty(device="cpu", recurse=False)
    with torch.no_grad():
        for parameter in module.parameters(recurse=False):
            parameter.normal_(0, 0.3)
        for name, buffer in module.named_buffers(recurse=False):
            buffer.fill_(1 if name in ("running_var", "gain") else 0)


def _train(model: nn.Module, rank: int, world: int, dtype: torch.dtype) -> list[torch.Tensor]:
    """Losses of 4 Adam steps on this rank's rows, then the eval output on a fixed batch."""
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    out = []
    for step in range(4):
        x, y = global_batch(step)
        loss = loss_fn(model, local_rows(x, rank, world).to(dtype), local_rows(y, rank, world))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        out.append(loss.detach())
    model.eval()
    with torch.no_grad():
        out.append(model(global_batch(99)[0].to(dtype)).float())
    return out


def _compare(rank: int, world: int, source: str, migrated: str, case: str, rtol: float) -> None:
    results = []
    for text in (source, migrated):
        namespace: dict = {}
        exec(compile(text, "train.py", "exec"), namespace)
        if case == "shared":
            model, twin = namespace["build"](_net(), _net(), GainBlock, torch.bfloat16, False)
            results.append(_train(model, rank, world, torch.bfloat16))
            results.append(_train(twin, rank, world, torch.float32))
        elif case == "classes":
            model = namespace["build_by_classes"](_net(), {GainBlock, nn.BatchNorm1d})
            results.append(_train(model, rank, world, torch.float32))
        elif case == "chosen":  # mixed precision chosen at run time: bf16 reductions
            model = namespace["build_with_reduce_dtype"](_net(), {GainBlock}, True)
            results.append(_train(model, rank, world, torch.float32))
        elif case == "if half":  # mixed precision or none by a flag, in the call
            model = namespace["build_if_half"](_net(), {GainBlock}, True)
            results.append(_train(model, rank, world, torch.bfloat16))
        elif case == "meta":  # param_init_fn on a meta-device model: its RNG draws in order
            with torch.device("meta"):
                net = Net()
            torch.manual_seed(7)
            model = namespace["build_on_meta"](net, {GainBlock, nn.BatchNorm1d}, _init)
            results.append(_train(model, rank, world, torch.float32))
        else:  # a lambda policy, a process group, strategy and dtype chosen by a key
            group = dist.new_group(list(range(world)))
            model = namespace["build_by_choices"](_net(), group, "sdp", "bf16")
            results.append(_train(model, rank, world, torch.bfloat16))
    half = len(results) // 2
    for old, new in zip(results[:half], results[half:]):
        for step, (a, b) in enumerate(zip(old, new)):
            torch.testing.assert_close(b, a, rtol=rtol, atol=rtol, msg=f"{case}, step {step}")


@pytest.fixture(scope="module")
def migrated() -> str:
    text, findings = engine.migrate_text(SOURCE, "train.py", registry.select(), Options())
    assert "fully_shard_like_fsdp1" not in text, text
    assert "torch.distributed.fsdp.wrap" not in text and "FSDP(" not in text, text
    assert "ShardingStrategy" not in text and "MixedPrecision(" not in text, text
    assert not [f for f in findings if f.severity == "review"], findings
    return text


@pytest.mark.parametrize(
    ("case", "rtol"),
    [
        ("shared", 1e-6),
        ("classes", 1e-6),
        ("choices", 1e-6),
        ("meta", 1e-6),
        ("chosen", 1e-6),
        ("if half", 1e-6),
    ],
)
def test_plain_rewrite_trains_as_fsdp1_did(migrated: str, case: str, rtol: float) -> None:
    run_ranks(_compare, 2, SOURCE, migrated, case, rtol, timeout=120)
