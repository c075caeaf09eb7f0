"""``device_id`` in the plain form moves a unit's parameters to the device no earlier than
FSDP1 did: one unit at a time, just before that unit is sharded, never the whole unsharded
model first (for a model that only fits sharded, that is out of memory where FSDP1 fit).

FSDP1 moved each unit's CPU states to ``device_id`` as it wrapped that unit (children first,
then the root's rest); ``fully_shard`` moves each unit's states to its mesh's device in the same
way. The emitted code adds moves of its own only where ``sync_module_states`` needs the states
on the device to broadcast them, unit by unit.

On one gloo rank on the CPU (``device_id=torch.device("cpu")``), every ``Tensor.to`` call on a
parameter of the model is counted, with every sharding (FSDP1's constructor for a unit, or
``fully_shard``): the figure is the most parameter bytes moved between two shardings, the
unsharded bytes the device holds beyond what is already sharded. FSDP1 gives its largest unit
(or the root's rest); code that moves the whole model first gives the whole model. Counts are
exact byte sums: no tolerance. (On the CPU, ``fully_shard`` finds the states already there and
calls no ``.to``: its own per-unit moves are not counted, torch's ``_move_states_to_device``
over the unit's managed states alone.)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
import torch
import torch.distributed.fsdp as fsdp
from torch import nn
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

from fsdp2_port.codemods import engine, registry
from fsdp2_port.codemods.options import Options
from tests.models import GainBlock, NormNet

pytestmark = pytest.mark.usefixtures("one_rank")

SOURCE = """\
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import ModuleWrapPolicy


def build(net, classes):
    return FSDP(net, auto_wrap_policy=ModuleWrapPolicy(classes), device_id=torch.device("cpu"))


def build_synced(net, classes):
    return FSDP(
        net,
        auto_wrap_policy=ModuleWrapPolicy(classes),
        device_id=torch.device("cpu"),
        sync_module_states=True,
    )
"""

#: FSDP2 code that moves the whole model first (what a naive ``model.to(device_id)`` before
#: sharding does): the measurement must tell it apart.
WHOLE_MODEL_FIRST = """\
import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard


def build(net, classes):
    mesh = init_device_mesh("cpu", (torch.distributed.get_world_size(),))
    net.to(torch.device("cpu"))
    for submodule in reversed(list(net.modules())):
        if submodule is not net and isinstance(submodule, tuple(classes)):
            fully_shard(submodule, mesh=mesh)
    return fully_shard(net, mesh=mesh)
"""


class _Moves:
    """Parameter bytes moved by ``Tensor.to`` since the last sharding, and the most of them."""

    def __init__(self, model: nn.Module) -> None:
        self.params = {id(p): p for p in model.parameters()}  # held: no id is reused
        self.since_sharding = 0
        self.most = 0
        self.total = 0

    def moved(self, tensor: torch.Tensor) -> None:
        size = tensor.nbytes if self.params.get(id(tensor)) is tensor else 0
        self.since_sharding += size
        self.total += size
        self.most = max(self.most, self.since_sharding)

    def sharded(self) -> None:
        self.since_sharding = 0


@contextlib.contextmanager
def _counted(model: nn.Module, monkeypatch: pytest.MonkeyPatch) -> Iterator[_Moves]:
    """Count moves of ``model``'s parameters and shardings, FSDP1's and FSDP2's."""
    moves = _Moves(model)
    to, fsdp1_init, fully_shard = torch.Tensor.to, FSDP.__init__, fsdp.fully_shard

    def counted_to(self: torch.Tensor, *args, **kwargs):
        moves.moved(self)
        return to(self, *args, **kwargs)

    def counted_fsdp1(self: FSDP, *args, **kwargs) -> None:
        fsdp1_init(self, *args, **kwargs)
        moves.sharded()

    def counted_fully_shard(module, *args, **kwargs):
        out = fully_shard(module, *args, **kwargs)
        moves.sharded()
        return out

    with monkeypatch.context() as patch:
        patch.setattr(torch.Tensor, "to", counted_to)
        patch.setattr(FSDP, "__init__", counted_fsdp1)
        patch.setattr(fsdp, "fully_shard", counted_fully_shard)
        yield moves


def _net() -> NormNet:
    torch.manual_seed(0)
    return NormNet()


def _built(source: str, function: str, monkeypatch: pytest.MonkeyPatch) -> tuple[_Moves, int]:
    """The moves of building a fresh model with ``function`` of ``source``, and the bytes of
    its parameters."""
    net = _net()
    whole = sum(p.nbytes for p in net.parameters())
    with _counted(net, monkeypatch) as moves:
        namespace: dict = {}
        exec(compile(source, "train.py", "exec"), namespace)
        namespace[function](net, {GainBlock})
    return moves, whole


@pytest.fixture(scope="module")
def migrated() -> str:
    text, _ = engine.migrate_text(SOURCE, "train.py", registry.select(), Options())
    assert "FSDP(" not in text and "fully_shard_like_fsdp1" not in text, text
    return text


def test_device_id_moves_no_more_than_fsdp1_did(migrated, monkeypatch) -> None:
    fsdp1, whole = _built(SOURCE, "build", monkeypatch)
    largest_unit = max(
        sum(p.nbytes for p in m.parameters()) for m in _net().modules() if isinstance(m, GainBlock)
    )
    # FSDP1 moved every parameter once, one unit at a time
    assert fsdp1.total == whole and fsdp1.most == largest_unit < whole
    plain, _ = _built(migrated, "build", monkeypatch)
    assert plain.most <= fsdp1.most, migrated
    naive, _ = _built(WHOLE_MODEL_FIRST, "build", monkeypatch)
    assert naive.most == whole  # what the measurement catches


def test_device_id_with_sync_moves_each_unit_as_fsdp1_did(migrated, monkeypatch) -> None:
    """With ``sync_module_states`` the emitted code moves each unit's parameters itself, to
    broadcast them there: every parameter once, unit by unit, as FSDP1 (which refuses the
    broadcast on CPU tensors, so its moves are measured without it: they are the same)."""
    fsdp1, whole = _built(SOURCE, "build", monkeypatch)
    plain, _ = _built(migrated, "build_synced", monkeypatch)
    assert (plain.total, plain.most) == (whole, fsdp1.most), migrated
