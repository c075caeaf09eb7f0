"""Fixtures shared by test modules (torch imported where a fixture runs: the codemod's tests
run without it)."""

import pytest


@pytest.fixture(scope="module")
def one_rank():
    """A one-rank gloo process group for the module's tests (one already there is kept)."""
    import torch.distributed as dist

    started = not dist.is_initialized()
    if started:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    if started:
        dist.destroy_process_group()


@pytest.fixture(autouse=True)
def private_state_dir(tmp_path_factory, monkeypatch):
    """Each test keeps ``fsdp2-port migrate --write``'s journals in a directory of its own
    (inherited by the commands it starts), never in the home directory of whoever runs it."""
    monkeypatch.setenv("FSDP2_PORT_STATE_DIR", str(tmp_path_factory.mktemp("state")))
