"""A dict of keyword arguments grown under conditions, with ignored modules (SpecForge's
dataflow backend), migrates to plain ``fully_shard`` code that trains as FSDP1 did.

The source is SpecForge's shape: ``dict(...)`` with ``MixedPrecision``, a strategy by name and
a process group (and ``device_id``: FSDP1 on the CPU needs it), then
``kw["ignored_modules"] = frozen`` under ``if frozen:`` and ``kw.update(auto_wrap_policy=...,
forward_prefetch=..., backward_prefetch=..., limit_all_gathers=...)`` under
``if block_classes:``. The model ignores a frozen module and a
trainable block of the wrap policy's class: FSDP1 makes no unit of it, neither shards it nor
reduces its gradients (each rank trains its own copy), nor casts its buffer to
``buffer_dtype``, which scales its activations (a bf16 ``gain`` gives other numbers). FSDP1
and the migration run on 2 gloo ranks from the same weights and batches, with ignored
modules and without; the losses, the eval output and every full parameter after 4 Adam steps
must agree on each rank.

Tolerance 0: both sides run the same kernels on the same dtypes, in the same order, and two
ranks' reductions add the same two numbers (measured: bitwise equal).
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FSDPModule
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.tensor import DTensor

from fsdp2_port.codemods import engine, registry
from fsdp2_port.codemods.options import Options
from fsdp2_port.prove.launch import run_ranks
from tests.models import GainBlock, global_batch, local_rows, loss_fn
from tests.test_plain_rewrite import _net

pytestmark = pytest.mark.slow  # gloo ranks

SOURCE = """\
import functools

import torch
from torch.distributed.fsdp import BackwardPrefetch, MixedPrecision, ShardingStrategy
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy


def build(model, strategy, group, frozen, block_classes):
    sharding = getattr(ShardingStrategy, strategy)
    fsdp_kwargs = dict(
        use_orig_params=True,
        mixed_precision=MixedPrecision(reduce_dtype=torch.bfloat16, buffer_dtype=torch.bfloat16),
        sharding_strategy=sharding,
        process_group=group,
        device_id=torch.device("cpu"),
    )
    if frozen:
        fsdp_kwargs["ignored_modules"] = frozen
    if block_classes:
        fsdp_kwargs.update(
            auto_wrap_policy=functools.partial(
                transformer_auto_wrap_policy, transformer_layer_cls=block_classes
            ),
            forward_prefetch=True,
            backward_prefetch=BackwardPrefetch.BACKWARD_PRE,
            limit_all_gathers=True,
        )
    model = FSDP(model, **fsdp_kwargs)
    return model
"""


def _full_parameters(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter in full, by its name in the unwrapped model."""
    if isinstance(model, FSDP):
        with FSDP.summon_full_params(model):
            return {
                n.replace("_fsdp_wrapped_module.", ""): p.detach().clone()
                for n, p in model.named_parameters()
            }
    return {
        n: (p.full_tensor() if isinstance(p, DTensor) else p).detach()
        for n, p in model.named_parameters()
    }


def _units(model: nn.Module) -> list[str]:
    """The names of the modules that are units (FSDP1's or FSDP2's), in the unwrapped model."""
    return [
        n.replace("_fsdp_wrapped_module.", "").replace("._fsdp_wrapped_module", "")
        for n, m in model.named_modules()
        if isinstance(m, (FSDP, FSDPModule))
    ]


def _run(build, rank: int, world: int, ignore: bool) -> list:
    """The units, the losses of 4 Adam steps on this rank's rows, the eval output, the full
    parameters."""
    net = _net()
    net.embed.weight.requires_grad_(False)  # frozen, as SpecForge's ignored target tables
    frozen = (net.embed, net.blocks[1]) if ignore else ()
    model = build(net, "SHARD_GRAD_OP", dist.new_group(list(range(world))), frozen, {GainBlock})
    out: list = [_units(model)]
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    for step in range(4):
        x, y = global_batch(step)
        loss = loss_fn(model, local_rows(x, rank, world), local_rows(y, rank, world))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        out.append(loss.detach())
    model.eval()
    with torch.no_grad():
        out.append(model(global_batch(99)[0]))
    out.append(_full_parameters(model))
    return out


def _compare(rank: int, world: int, migrated: str) -> None:
    builds = []
    for text in (SOURCE, migrated):
        namespace: dict = {}
        exec(compile(text, "train.py", "exec"), namespace)
        builds.append(namespace["build"])
    for ignore in (True, False):
        old, new = (_run(build, rank, world, ignore) for build in builds)
        assert new[0] == old[0], (ignore, new[0], old[0])  # the same units
        assert ("blocks.1" in old[0]) is not ignore, old[0]
        for step, (a, b) in enumerate(zip(old[1:], new[1:])):
            torch.testing.assert_close(b, a, rtol=0, atol=0, msg=f"ignore={ignore}, {step}")
        if ignore:  # the ignored block trained on each rank's rows alone, a unit on all rows
            params = new[-1]
            assert isinstance(params, dict)
            for name, same in (("blocks.1.up.weight", False), ("blocks.0.up.weight", True)):
                theirs = params[name].clone()
                dist.broadcast(theirs, 0)
                assert torch.equal(theirs, params[name]) is (same or rank == 0), name


@pytest.fixture(scope="module")
def migrated() -> str:
    text, findings = engine.migrate_text(SOURCE, "train.py", registry.select(), Options())
    assert "fully_shard_like_fsdp1" not in text and "FSDP(" not in text, text
    assert "ignored_params=" in text and "MixedPrecision(" not in text, text
    assert not [f for f in findings if f.severity == "review"], findings
    return text


def test_grown_kwargs_with_ignored_modules_train_as_fsdp1_did(migrated: str) -> None:
    run_ranks(_compare, 2, migrated, timeout=120)
