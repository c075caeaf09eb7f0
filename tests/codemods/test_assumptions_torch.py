"""The registry's facts about FSDP1 (``fsdp2_port.codemods.assumptions``) against the installed
torch.

Like ``test_emitted_api``, it imports torch (the codemods never do) and is skipped without it.
"""

from __future__ import annotations

import pytest

from fsdp2_port.codemods.assumptions import FSDP1_ONLY_ATTRIBUTES

torch = pytest.importorskip("torch")

#: FSDP1's attributes before torch 2.1, gone since: its list of handles, and the static method
#: that gathered them.
BEFORE_2_1 = {"_handles", "_fsdp_handles"}


def test_fsdp1_only_attributes_are_fsdp1s_and_no_fsdp2_modules(one_rank) -> None:
    from torch import nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FullyShardedDataParallel, fully_shard

    torch.manual_seed(0)
    fsdp1 = FullyShardedDataParallel(
        nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4)), device_id=torch.device("cpu")
    )
    fsdp2 = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    mesh = init_device_mesh("cpu", (1,))
    fully_shard(fsdp2[0], mesh=mesh)
    fully_shard(fsdp2, mesh=mesh)
    fsdp1(torch.randn(2, 4)).sum().backward()  # lazily initialised attributes exist from here
    fsdp2(torch.randn(2, 4)).sum().backward()
    handle = fsdp1._handle
    for name in FSDP1_ONLY_ATTRIBUTES:
        assert not any(hasattr(m, name) for m in (fsdp2, fsdp2[0], fsdp2[1])), name
        if name not in BEFORE_2_1:
            assert hasattr(fsdp1, name) or hasattr(handle, name), name
    assert not any(hasattr(fsdp1, name) for name in BEFORE_2_1), "still there: not torch's past"
