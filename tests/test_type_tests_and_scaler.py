"""A program's type tests of the FSDP1 class, its unread state-dict configs and its
``ShardedGradScaler``, migrated, answer and train as the FSDP1 program did.

The source (below) tests modules against the FSDP1 class every way F2P005 rewrites
(``isinstance`` with the class alone, in a tuple and in a union, ``issubclass``, ``type(x) ==``,
``!=``, ``is``, ``is not``, an annotation), binds ``FullStateDictConfig``s that only
``state_dict_type`` reads (F2P012 removes them once F2P008 rewrites those reads), builds its
model with a policy (F2P003), whole and through ``functools.partial(FSDP, ...)`` (F2P002), and
trains with a ``ShardedGradScaler`` (F2P010). The codemod migrates it; FSDP1 source and
migration then run side by side on 2 gloo ranks from the same weights and batches, with an inf
put into rank 1's gradient shard at one step:

- the type tests give the same answers on the root, on each wrapped unit and on modules that are
  no unit, and count the same units;
- the full state dicts agree before training (bit for bit) and after it;
- every step's loss and the scaler's scale agree, the inf step skipped on both ranks.

Tolerance 1e-6 on losses and weights after training: both sides run the same kernels on the same
dtypes, and two ranks' reductions add the same two numbers (``tests/test_plain_rewrite.py``
measures them equal within 1e-9); scales and type answers are compared exactly.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn
from torch.distributed.tensor import DTensor

from fsdp2_port.codemods import engine, registry
from fsdp2_port.codemods.options import Options
from fsdp2_port.prove.launch import run_ranks
from tests.models import Block, TinyNet, global_batch, local_rows, loss_fn

pytestmark = pytest.mark.slow  # gloo ranks

SOURCE = """\
import functools

import torch
from torch import nn
from torch.distributed.fsdp import FullStateDictConfig, StateDictType
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
from torch.distributed.fsdp.wrap import ModuleWrapPolicy

_FULL = FullStateDictConfig(rank0_only=False)


def build(net, block):
    return FSDP(net, auto_wrap_policy=ModuleWrapPolicy({block}), device_id=torch.device("cpu"))


def build_whole(net):
    return FSDP(net, device_id=torch.device("cpu"))


def build_by_partial(net, block):
    wrap = functools.partial(
        FSDP, auto_wrap_policy=ModuleWrapPolicy({block}), device_id=torch.device("cpu")
    )
    return wrap(net)


def answers(module: nn.Module) -> tuple:
    return (
        isinstance(module, FSDP),
        isinstance(module, (FSDP, nn.Linear)),
        isinstance(module, FSDP | nn.LayerNorm),
        issubclass(type(module), FSDP),
        type(module) == FSDP,
        type(module) != FSDP,
        type(module) is FSDP,
        type(module) is not FSDP,
        FSDP is type(module),
    )


def units(model: FSDP) -> int:
    return sum(1 for m in model.modules() if isinstance(m, FSDP))


def full_state(model, again):
    config = FullStateDictConfig(rank0_only=False)
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, config):
        state = model.state_dict()
    if again:
        with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, config):
            state = model.state_dict()
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, _FULL):
        return state, model.state_dict()


def train(model, batches, loss_fn, poison):
    scaler = ShardedGradScaler("cpu", init_scale=2.0**8, growth_interval=2)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
    record = []
    for step, (x, y) in enumerate(batches):
        loss = loss_fn(model, x, y)
        scaler.scale(loss).backward()
        poison(model, step)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
        record.append((loss.detach(), scaler.get_scale()))
    return record
"""

#: The codes whose rewrites this program runs: each must be in the migration's findings.
CODES = {"F2P002", "F2P003", "F2P005", "F2P008", "F2P010", "F2P012"}
STEPS, INF_STEP, RTOL = 4, 1, 1e-6
#: Which probes (``_probes``) FSDP1 makes units, per builder of the source.
UNITS = {
    "build": [True, True, True, False, False, False, False],
    "build_whole": [True, False, False, False, False, False, False],
    "build_by_partial": [True, True, True, False, False, False, False],
}


def _poisoner(rank: int):
    """Puts an inf into the first element of rank 1's first gradient shard at ``INF_STEP``."""

    def poison(model: nn.Module, step: int) -> None:
        if step != INF_STEP or rank != 1:
            return
        with torch.no_grad():
            for p in model.parameters():
                grad = p.grad
                local = grad.to_local() if isinstance(grad, DTensor) else grad
                if local is not None and local.numel():
                    local.view(-1)[0] = float("inf")
                    return
        raise AssertionError("rank 1 holds no gradient")

    return poison


def _probes(model: nn.Module) -> list[nn.Module]:
    """The root, both wrapped blocks, and modules that are no unit (inside a unit or not)."""
    blocks = model.blocks
    return [model, blocks[0], blocks[1], blocks[0].up, blocks[1].norm, model.embed, model.head]


def _run(rank: int, world: int, text: str, builder: str) -> dict:
    namespace: dict = {}
    exec(compile(text, "train.py", "exec"), namespace)
    torch.manual_seed(0)
    net = TinyNet()
    model = namespace[builder](net) if builder == "build_whole" else namespace[builder](net, Block)
    batches = [
        tuple(local_rows(t, rank, world) for t in global_batch(step)) for step in range(STEPS)
    ]
    state, again = namespace["full_state"](model, True)
    return {
        "answers": [namespace["answers"](m) for m in _probes(model)],
        "units": namespace["units"](model),
        "before": (state, again),
        "record": namespace["train"](model, batches, loss_fn, _poisoner(rank)),
        "after": namespace["full_state"](model, False)[1],
    }


def _compare(rank: int, world: int, source: str, migrated: str) -> None:
    warnings.simplefilter("ignore", FutureWarning)  # FSDP1's state_dict_type is deprecated
    for builder, units in UNITS.items():
        old, new = (_run(rank, world, text, builder) for text in (source, migrated))
        # FSDP1's answers tell units from other modules: the check is not vacuous
        assert [a[0] for a in old["answers"]] == units, builder
        assert new["answers"] == old["answers"], builder
        assert new["units"] == old["units"] == sum(units), builder
        for got, want in zip(new["before"], old["before"], strict=True):
            assert got.keys() == want.keys(), builder
            for key in want:
                assert torch.equal(got[key], want[key]), f"{builder}: {key} before training"
        scales = [scale for _, scale in old["record"]]
        assert scales[INF_STEP] == scales[INF_STEP - 1] / 2, "the inf step is skipped"
        assert [scale for _, scale in new["record"]] == scales, builder
        for step, ((a, _), (b, _)) in enumerate(zip(old["record"], new["record"], strict=True)):
            torch.testing.assert_close(b, a, rtol=RTOL, atol=RTOL, msg=f"{builder}, step {step}")
        torch.testing.assert_close(new["after"], old["after"], rtol=RTOL, atol=RTOL, msg=builder)


@pytest.fixture(scope="module")
def migrated() -> str:
    text, findings = engine.migrate_text(SOURCE, "train.py", registry.select(), Options())
    assert [f for f in findings if f.severity == "review"] == [], findings
    assert {f.code for f in findings} >= CODES, findings
    assert "FullyShardedDataParallel" not in text and "ShardedGradScaler" not in text, text
    assert "FullStateDictConfig" not in text, text
    return text


def test_type_tests_configs_and_scaler_run_as_fsdp1_did(migrated: str) -> None:
    run_ranks(_compare, 2, SOURCE, migrated, timeout=120)
