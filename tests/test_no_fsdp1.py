"""The FSDP1 guard (``fsdp2_port.prove.no_fsdp1``): it must catch FSDP1 code the program calls
and pass what FSDP2, torch itself and FSDP1's config values do.

In one process on a one-rank gloo group; the command (``python -m fsdp2_port.prove.no_fsdp1``)
in fresh interpreters, alone and under torchrun.
"""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
import textwrap
import threading
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import get_model_state_dict
from torch.distributed.fsdp import (
    BackwardPrefetch,
    CPUOffload,
    FSDPModule,
    MixedPrecision,
    MixedPrecisionPolicy,
    ShardingStrategy,
    StateDictType,
    fully_shard,
)
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

from fsdp2_port.prove.no_fsdp1 import (
    EXIT_FSDP1_CALLS,
    FSDP1CallError,
    forbid_fsdp1_calls,
    record_fsdp1_calls,
)
from tests.models import cpu_mesh

CPU = torch.device("cpu")
HERE = Path(__file__).resolve()
ROOT = HERE.parents[1]


pytestmark = pytest.mark.usefixtures("one_rank")


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def _fsdp1(net: nn.Module) -> FSDP:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # FSDP1's deprecation
        return FSDP(net, device_id=CPU)


def _line(marker: str) -> int:
    """The line of this file holding ``marker`` (a comment on the call)."""
    lines = HERE.read_text().splitlines()
    return next(i + 1 for i, line in enumerate(lines) if line.rstrip().endswith(f"# {marker}"))


def _seen(recorded, function: str) -> list[str]:
    """The callers recorded for FSDP1 functions whose qualified name ends with ``function``."""
    return [c.caller for c in recorded.calls if c.function.endswith(":" + function)]


# -- what it must catch --------------------------------------------------------------------------


def test_catches_the_fsdp1_constructor():
    net = _net()
    with record_fsdp1_calls() as recorded, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        FSDP(net, device_id=CPU)  # construct
    assert _seen(recorded, "FullyShardedDataParallel.__init__") == [f"{HERE}:{_line('construct')}"]
    # what FSDP1's constructor calls inside torch is not reported, only counted
    assert len(recorded.calls) == 1 and recorded.from_torch > 0
    call = recorded.calls[0]
    assert call.function == (
        "torch/distributed/fsdp/fully_sharded_data_parallel.py:FullyShardedDataParallel.__init__"
    )


def test_catches_a_policy_function_called_from_user_code():
    with record_fsdp1_calls() as recorded:
        transformer_auto_wrap_policy(nn.Linear(1, 1), False, 0, {nn.Linear})  # policy
    assert [c.function for c in recorded.calls] == [
        "torch/distributed/fsdp/wrap.py:transformer_auto_wrap_policy"
    ]
    assert _seen(recorded, "transformer_auto_wrap_policy") == [f"{HERE}:{_line('policy')}"]


@pytest.mark.filterwarnings("ignore::FutureWarning")  # FSDP1 deprecations
def test_catches_state_dict_type_entered_through_contextlib():
    model = _fsdp1(_net())
    full = StateDictType.FULL_STATE_DICT
    with record_fsdp1_calls() as recorded, FSDP.state_dict_type(model, full):  # context
        pass
    assert set(_seen(recorded, "FullyShardedDataParallel.state_dict_type")) == {
        f"{HERE}:{_line('context')}"
    }


def test_catches_decorated_methods_and_the_forward_of_an_fsdp1_model():
    """``@torch.no_grad`` wrappers and ``nn.Module.__call__`` pass the user's call through."""
    model = _fsdp1(_net())
    with record_fsdp1_calls() as recorded:
        loss = model(torch.randn(3, 4)).sum()  # forward
        loss.backward()
        model.clip_grad_norm_(1.0)  # clip
    assert _seen(recorded, "FullyShardedDataParallel.forward") == [f"{HERE}:{_line('forward')}"]
    assert _seen(recorded, "FullyShardedDataParallel.clip_grad_norm_") == [
        f"{HERE}:{_line('clip')}"
    ]


def test_catches_calls_from_code_compiled_from_a_string_and_from_threads():
    source = textwrap.dedent(
        """
        from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
        def ask(m):
            return transformer_auto_wrap_policy(m, False, 0, {type(m)})
        ask(module)
        """
    )
    with record_fsdp1_calls() as recorded:
        exec(compile(source, "<string>", "exec"), {"module": nn.Linear(1, 1)})  # exec
        worker = threading.Thread(
            target=lambda: transformer_auto_wrap_policy(nn.Linear(1, 1), False, 0, set()),
            name="worker",
        )
        worker.start()
        worker.join()
    callers = {(c.caller, c.thread) for c in recorded.calls}
    assert ("<string>:5", "MainThread") in callers  # `ask(module)`, the string's top level
    assert any(thread == "worker" and caller.startswith(str(HERE)) for caller, thread in callers)


def test_forbid_raises_listing_the_calls_and_leaves_the_blocks_own_errors_alone():
    called = r"wrap\.py:transformer_auto_wrap_policy, called"
    with pytest.raises(FSDP1CallError, match=called), forbid_fsdp1_calls():
        transformer_auto_wrap_policy(nn.Linear(1, 1), True, 0, set())
    with pytest.raises(KeyError), forbid_fsdp1_calls():
        transformer_auto_wrap_policy(nn.Linear(1, 1), True, 0, set())
        raise KeyError("the block's own")


def test_guards_nest_and_restore_the_profile_function():
    outer_seen: list[str] = []

    def outer(frame, event, arg):
        if event == "call":
            outer_seen.append(frame.f_code.co_name)

    sys.setprofile(outer)
    try:
        with record_fsdp1_calls() as a, record_fsdp1_calls() as b:
            transformer_auto_wrap_policy(nn.Linear(1, 1), True, 0, set())
        assert sys.getprofile() is outer
    finally:
        sys.setprofile(None)
    assert len(a.calls) == len(b.calls) == 1
    assert "transformer_auto_wrap_policy" in outer_seen


# -- what it must pass ---------------------------------------------------------------------------


def test_fully_shard_and_a_training_step_of_an_fsdp2_model_are_clean():
    with record_fsdp1_calls() as recorded:
        # FSDP1's values as arguments: dataclasses, enums, isinstance
        mp = MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        assert mp == MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        assert ShardingStrategy["FULL_SHARD"] is ShardingStrategy.FULL_SHARD
        assert {ShardingStrategy.NO_SHARD: 1}[ShardingStrategy.NO_SHARD] == 1
        repr(CPUOffload(offload_params=True)), BackwardPrefetch.BACKWARD_PRE.name
        net = _net()
        assert not isinstance(net, FSDP)
        policy = MixedPrecisionPolicy(param_dtype=mp.param_dtype, reduce_dtype=mp.reduce_dtype)
        mesh = cpu_mesh()
        fully_shard(net[0], mesh=mesh, mp_policy=policy)
        fully_shard(net, mesh=mesh, mp_policy=policy)
        assert isinstance(net, FSDPModule)
        opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
        for _ in range(2):
            net(torch.randn(3, 4)).float().sum().backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            opt.step()
            opt.zero_grad()
        get_model_state_dict(net)  # DCP calls FSDP.fsdp_modules: torch's own call
    assert not recorded, recorded.report()
    assert recorded.from_torch > 0  # FSDP1 helpers ran, called by torch (FSDP2, DCP)


# -- the command ---------------------------------------------------------------------------------

_CLEAN = """
import sys
import torch
import torch.distributed as dist
import torch.distributed.fsdp  # importing FSDP1 runs its modules' bodies: not calls
from torch import nn
from torch.distributed.fsdp import MixedPrecision, ShardingStrategy
import fsdp2_port

assert sys.argv[1:] == ["--steps", "2"], sys.argv
if not dist.is_initialized():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
torch.manual_seed(0)
net = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 2))
fsdp2_port.fully_shard_like_fsdp1(
    net,
    auto_wrap_policy=lambda module, recurse, nonwrapped_numel: recurse or module is net[0],
    sharding_strategy=ShardingStrategy.FULL_SHARD,
    mixed_precision=MixedPrecision(param_dtype=torch.float32),
    device_id=torch.device("cpu"),
)
opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
for _ in range(int(sys.argv[2])):
    net(torch.randn(3, 4)).sum().backward()
    fsdp2_port.clip_grad_norm_(net.parameters(), 1.0)
    opt.step()
    opt.zero_grad()
print("trained", __name__)
if __name__ == "__main__" and dist.get_world_size() > 1:
    # torchrun's ranks: gloo's teardown race aborts 1 run in a few here (launch.exit_now)
    from fsdp2_port.prove.launch import exit_now

    exit_now()
"""

_FSDP1 = """
import sys
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
model = FSDP(nn.Linear(2, 2), device_id=torch.device("cpu"))  # line 9
model(torch.randn(1, 2)).sum().backward()  # line 10
sys.exit(int(sys.argv[1]))
"""


def _command(*args: str, **kwargs) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run(
        [sys.executable, "-m", "fsdp2_port.prove.no_fsdp1", *args],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        **kwargs,
    )


@pytest.mark.slow
def test_command_runs_a_clean_script_as_main_with_its_arguments(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(_CLEAN)
    done = _command(str(script), "--steps", "2", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "trained __main__" in done.stdout
    assert "no_fsdp1" not in done.stderr


@pytest.mark.slow
def test_command_reports_fsdp1_calls_and_exits_3_or_the_scripts_own_failure(tmp_path):
    script = tmp_path / "old.py"
    script.write_text(_FSDP1)
    done = _command(str(script), "0")
    assert done.returncode == EXIT_FSDP1_CALLS, done.stderr
    report = done.stderr[done.stderr.index("no_fsdp1:") :]
    assert f"FullyShardedDataParallel.__init__, called from {script}:9" in report
    assert f"FullyShardedDataParallel.forward, called from {script}:10" in report
    failed = _command(str(script), "5")
    assert failed.returncode == 5
    assert "FullyShardedDataParallel.__init__" in failed.stderr
    assert _command().returncode == 2
    assert _command(str(tmp_path / "missing.py")).returncode == 2


@pytest.mark.slow
def test_command_under_torchrun_checks_each_rank(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(_CLEAN.replace("store=dist.HashStore(), rank=0, world_size=1", ""))
    old = tmp_path / "old.py"
    old.write_text(_FSDP1.replace("store=dist.HashStore(), rank=0, world_size=1", ""))
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    launch = [*torchrun, "--nproc-per-node", "2", "-m", "fsdp2_port.prove.no_fsdp1"]
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}
    clean = subprocess.run(
        [*launch, str(script), "--steps", "2"], capture_output=True, text=True, env=env, timeout=240
    )
    assert clean.returncode == 0, clean.stderr[-3000:]
    assert clean.stdout.count("trained") == clean.stdout.count("__main__") == 2  # interleaved
    dirty = subprocess.run(
        [*launch, str(old), "0"], capture_output=True, text=True, env=env, timeout=240
    )
    # the first rank to exit 3 makes torchrun end the other, which may not have reported yet
    assert dirty.returncode != 0
    assert re.search(r"no_fsdp1: rank [01]: ", dirty.stderr), dirty.stderr[-3000:]
    assert "FullyShardedDataParallel.__init__, called from" in dirty.stderr


def test_the_command_imports_no_torch_before_the_script():
    source = inspect.getsource(sys.modules["fsdp2_port.prove.no_fsdp1"])
    assert "import torch" not in source


@pytest.mark.slow
def test_forked_children_exit_as_they_asked_and_only_the_guarded_process_reports(tmp_path):
    """A ``fork`` child (DataLoader workers, pools) ends with ``os._exit`` as well: it must not
    report the parent's calls again nor exit 3."""
    script = tmp_path / "forks.py"
    script.write_text(
        "import multiprocessing\n"
        "import torch.distributed.fsdp.wrap as wrap\n"
        "from torch import nn\n"
        "from fsdp2_port.prove.launch import exit_now\n"
        "wrap.always_wrap_policy(nn.Linear(1, 1), True, 0)\n"
        "child = multiprocessing.get_context('fork').Process(target=print, args=('child',))\n"
        "child.start()\n"
        "child.join()\n"
        "print('child exit', child.exitcode, flush=True)\n"
        "exit_now(0)\n"
    )
    done = _command(str(script))
    assert done.returncode == EXIT_FSDP1_CALLS, done.stderr
    assert "child exit 0" in done.stdout
    assert done.stderr.count("no_fsdp1:") == 1, done.stderr
