"""`fsdp2-port verify` refuses bad numbers before spawning, turns sys.exit and
KeyboardInterrupt in a factory into its documented exit codes and JSON, and owns its ranks:
after a signal or a hung rank, no rank and no process a rank started is left.

The stubborn ranks tag their whole process tree with an environment variable of the test's
own (``TAG``), independent of how verify finds them: afterwards no live process may carry it.
"""

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from fsdp2_port.cli import main
from fsdp2_port.prove import verify as v
from fsdp2_port.prove.launch import GRACE_S, KILL_WAIT_S, RankTimeout, run_ranks
from tests.processes import tagged

ROOT = Path(__file__).resolve().parents[1]
TAG = uuid.uuid4().hex
# verify's own bound after a signal (SIGTERM, grace, SIGKILL), plus interpreter start-up and a
# loaded 2-core machine.
BOUND_S = GRACE_S + KILL_WAIT_S + 5

# A factory module. `stubborn`: a model whose batch function, on every rank, writes the rank's
# pid to $PIDS, starts a child in a session of its own, and then both ignore SIGTERM and sleep.
FACTORIES = """\
import os, signal, subprocess, sys, time

def exits():
    sys.exit(3)

def interrupts():
    raise KeyboardInterrupt

def sleeper():
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    open(os.environ["PIDS"], "a").write(f"{os.getpid()}\\n")
    time.sleep(120)

def stubborn():
    from torch import nn  # here: a child that only sleeps starts without importing torch

    def batch(step, size):
        code = "import sys; sys.path.insert(0, sys.argv[1]); import factories; factories.sleeper()"
        here = os.path.dirname(os.path.abspath(__file__))
        subprocess.Popen([sys.executable, "-c", code, here], start_new_session=True)
        sleeper()
    return nn.Linear(4, 4), batch
"""


@pytest.fixture
def factories(tmp_path, monkeypatch):
    (tmp_path / "factories.py").write_text(FACTORIES)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("factories", None)
    yield tmp_path
    sys.modules.pop("factories", None)


def _in_process(capsys, *args):
    """``fsdp2-port verify ARGS`` in this process: (exit code, stdout, stderr). Anything that
    escapes ``main`` (SystemExit, KeyboardInterrupt) is a failure, not the end of pytest."""
    try:
        code = main(["verify", *args])
    except BaseException as e:  # what escaped is the defect
        pytest.fail(f"verify let {type(e).__name__}({e}) escape")
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def no_spawn(monkeypatch):
    """Spawning ranks is a failure: a bad number must be refused before."""

    def spawned(config):
        raise AssertionError(f"ranks were spawned for {config}")

    monkeypatch.setattr(v, "_spawned", spawned)


@pytest.mark.parametrize(
    "option, value, named",
    [
        ("--world-size", "0", "--world-size"),
        ("--world-size", "-3", "--world-size"),
        ("--world-size", "1000", "--world-size"),
        ("--steps", "0", "--steps"),
        ("--max-grad-norm", "nan", "--max-grad-norm"),
        ("--max-grad-norm", "-1", "--max-grad-norm"),
        ("--max-grad-norm", "0", "--max-grad-norm"),
        ("--lr", "nan", "--lr"),
        ("--lr", "-0.1", "--lr"),
        ("--timeout", "0", "--timeout"),
        ("--timeout", "inf", "--timeout"),
    ],
)
def test_numbers_out_of_range_are_usage_errors(capsys, no_spawn, option, value, named):
    code, out, err = _in_process(capsys, option, value, "--format", "json")
    report = json.loads(out)  # exactly one object
    assert code == 2 and report["exit_code"] == 2 and report["verdict"] == "error"
    assert named in report["error"] and value in report["error"]
    assert err.strip().splitlines() == [f"fsdp2-port verify: {report['error']}"]  # one line


def test_the_largest_world_size_is_bounded_by_the_machine():
    most = v.max_local_world_size("cpu")
    assert 8 <= most <= 4 * (os.cpu_count() or 1)
    with pytest.raises(v.VerifyError, match="more ranks"):
        v.resolved(v.Config(world_size=most + 1))
    assert v.resolved(v.Config(world_size=2)).world_size == 2


def test_sys_exit_in_a_factory_is_a_bad_factory(capsys, factories, no_spawn):
    code, out, err = _in_process(capsys, "--model", "factories:exits", "--format", "json")
    report = json.loads(out)
    assert code == 2 and report["exit_code"] == 2
    assert report["error"] == "calling factories:exits(): SystemExit: 3"
    assert err.strip().splitlines()[-1] == f"fsdp2-port verify: {report['error']}"


def test_keyboard_interrupt_in_a_factory_exits_130(capsys, factories, no_spawn):
    code, out, _ = _in_process(capsys, "--model", "factories:interrupts", "--format", "json")
    report = json.loads(out)
    assert code == 130 and report["exit_code"] == 130 and report["verdict"] == "error"


def _tagged() -> list[int]:
    return tagged(TAG, var="FAULTS_TEST_TAG")


def _wait_for_pids(pids, n, proc, timeout=90):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pids.exists() and len(pids.read_text().split()) >= n:
            return
        if proc.poll() is not None:
            raise AssertionError(f"verify ended early: {proc.communicate()}")
        time.sleep(0.05)
    raise AssertionError(f"the ranks never started their {n} processes")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
@pytest.mark.slow
def test_a_signal_ends_every_rank_and_its_children(factories, sig):
    pids = factories / "pids"
    env = {**os.environ, "FAULTS_TEST_TAG": TAG, "PIDS": str(pids)}
    env["PYTHONPATH"] = os.pathsep.join([str(factories), str(ROOT)])
    command = ["verify", "--model", "factories:stubborn", "--world-size", "2", "--format", "json"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "fsdp2_port", *command],
        cwd=factories,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for_pids(pids, 4, proc)  # 2 ranks, each with a child in its own session
        sent = time.monotonic()
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=BOUND_S)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + sig, stderr
    report = json.loads(stdout)  # exactly one object
    assert report["exit_code"] == 128 + sig and signal.Signals(sig).name in report["error"]
    assert stderr.strip().splitlines()[-1] == f"fsdp2-port verify: {report['error']}"
    assert took < BOUND_S
    assert len(pids.read_text().split()) == 4
    # verify's resource tracker, not a rank's process, ends once verify has
    deadline = time.monotonic() + 2
    while _tagged() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _tagged() == [], f"processes of verify's ranks outlived it: {_tagged()}"


def _hung_rank(rank, world, pids):
    """Starts a child in its own session that ignores SIGTERM, then never finishes."""
    here = str(Path(pids).parent)
    code = "import sys; sys.path.insert(0, sys.argv[1]); import factories; factories.sleeper()"
    os.environ["PIDS"] = pids
    subprocess.Popen([sys.executable, "-c", code, here], start_new_session=True)
    while len(Path(pids).read_text().split()) < world if Path(pids).exists() else True:
        time.sleep(0.05)
    time.sleep(120)


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


@pytest.mark.slow
def test_a_hung_rank_leaves_no_process_of_its_own(factories):
    pids = factories / "pids"
    with pytest.raises(RankTimeout):
        run_ranks(_hung_rank, 2, str(pids), timeout=8)  # both ranks write their pids first
    started = [int(p) for p in pids.read_text().split()]
    assert len(started) == 2
    deadline = time.monotonic() + 2
    while any(map(_alive, started)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(map(_alive, started)), f"children of hung ranks outlived them: {started}"
