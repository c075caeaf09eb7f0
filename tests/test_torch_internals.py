"""The private torch entry points fsdp2-port calls are still there, with the parameters we pass.

When a torch release moves or changes one, these fail naming it: update
``fsdp2_port/torch_internals.py`` (and what calls it) before anything runs wrong.
"""

import inspect
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from fsdp2_port.fsdp1 import torch_internals
from fsdp2_port.fsdp1.torch_internals import ENTRY_POINTS


def _parameters(fn) -> list[tuple[str, bool]]:
    """``(name, has a default)`` of a Python function or of a torch operator's schema."""
    try:
        return [
            (p.name, p.default is not inspect.Parameter.empty)
            for p in inspect.signature(fn).parameters.values()
        ]
    except ValueError:  # a builtin: torch.<op> is aten::<op>
        schema = getattr(torch.ops.aten, fn.__name__).default._schema
        return [(a.name, a.has_default_value()) for a in schema.arguments]


@pytest.mark.parametrize("key", sorted(ENTRY_POINTS))
def test_entry_point_exists_with_our_parameters(key):
    entry = ENTRY_POINTS[key]
    params = _parameters(torch_internals.load(key))
    names = [name for name, _ in params]
    assert names[: len(entry.params)] == list(entry.params), (
        f"{entry.module}.{entry.name} now takes {names}, fsdp2-port passes {entry.params}"
    )
    rest = params[len(entry.params) :]
    assert all(has_default for _, has_default in rest), (
        f"{entry.module}.{entry.name} has new required parameters {rest}"
    )


def test_a_missing_entry_point_is_named(monkeypatch):
    monkeypatch.setitem(
        ENTRY_POINTS, "gone", torch_internals.EntryPoint("torch.nn", "_nope", (), "-", "test")
    )
    with pytest.raises(ImportError, match=r"torch\.nn\._nope \(test\).*torch_internals\.py"):
        torch_internals.load("gone")


def test_fsdp1_flattened_marker_is_fsdp1s():
    from torch.distributed.fsdp import _common_utils

    assert _common_utils.FSDP_FLATTENED == torch_internals.FSDP1_FLATTENED
    t = nn.Parameter(torch.zeros(2))
    assert not torch_internals.is_fsdp1_flattened(t)
    _common_utils._set_fsdp_flattened(t)
    assert torch_internals.is_fsdp1_flattened(t)


def test_dcp_load_lives_where_the_optimizer_looks_for_it():
    import torch.distributed.checkpoint as dcp

    assert dcp.load.__module__ == torch_internals.DCP_LOADER_MODULE


def test_what_the_entry_points_return():
    """The results we read: ignored-state attributes, the materialise flags."""
    model = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
    state = SimpleNamespace()
    torch_internals.call(
        "init_ignored_module_states",
        state=state,
        module=model,
        ignored_modules=[model[1]],
        ignored_states=None,
    )
    assert state._ignored_modules == {model[1]}
    assert state._ignored_params == set(model[1].parameters())
    assert state._ignored_buffer_names == {
        "1.running_mean",
        "1.running_var",
        "1.num_batches_tracked",
    }
    with torch.device("meta"):
        meta = nn.Linear(2, 2)
    assert torch_internals.call(
        "need_to_materialize_module", module=meta, ignored_params=set(), ignored_modules=set()
    ) == (True, False)
    torch_internals.call(
        "materialize_meta_module",
        root_module=meta,
        device_from_device_id=torch.device("cpu"),
        ignored_modules=set(),
        device_handle=None,
    )
    assert meta.weight.device.type == "cpu"


def test_sharded_tensor_pickles_the_state_convert_reads(monkeypatch):
    """``fsdp2_port.fsdp1.convert`` reads a pickled ``ShardedTensor`` (an FSDP1 SHARDED or LOCAL
    state dict saved per rank) through ``rebuild_from_type_v2`` without a process group: its
    state must be ``(local shards, metadata, process-group state with global_world_size, ...)``.
    """
    from torch.distributed._shard.sharded_tensor import api

    monkeypatch.setattr(api.distributed_c10d, "get_rank", lambda group=None: 1)
    monkeypatch.setattr(api.distributed_c10d, "get_world_size", lambda group=None: 2)
    fake = SimpleNamespace(
        _process_group=None,
        _local_shards=["shards"],
        _metadata="metadata",
        _sharding_spec="spec",
        _init_rrefs=False,
    )
    state = api.ShardedTensor.__getstate__(fake)
    assert state[:2] == (["shards"], "metadata")
    assert state[2].local_world_size == 2
