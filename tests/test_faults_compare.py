"""`fsdp2-port compare` owns its processes, refuses bad numbers, never calls NaN
runs "same".

The fake runs are plain Python (no torch) except one through torchrun. Each tags its whole
process tree with an environment variable of the test's own (``TAG``), independent of how
compare finds the run: afterwards no live process may carry it.
"""

import json
import math
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from fsdp2_port.prove.compare import Config, Run, judge, judge_runs
from fsdp2_port.prove.launch import GRACE_S, KILL_WAIT_S, READ_WAIT_S
from tests.processes import tagged

ROOT = Path(__file__).resolve().parents[1]
# compare's own bound after its trigger (SIGTERM, grace, SIGKILL, output), plus interpreter
# start-up and a loaded 2-core machine.
BOUND_S = GRACE_S + KILL_WAIT_S + READ_WAIT_S + 5

# A run that is hard to stop: the script ignores SIGTERM and starts a child that does too and
# a grandchild in a session of its own (os.setsid) that also ignores SIGTERM; each writes its
# pid to PIDS (argv[1]) once it is up. Then it logs a step and sleeps.
STUBBORN = """\
import os, signal, subprocess, sys, time
pids = sys.argv[1]
signal.signal(signal.SIGTERM, signal.SIG_IGN)
if len(sys.argv) > 2:
    if sys.argv[2] == "setsid":
        os.setsid()
    open(pids, "a").write(f"{os.getpid()}\\n")
    time.sleep(120)
for how in ("child", "setsid"):
    subprocess.Popen([sys.executable, __file__, pids, how])
open(pids, "a").write(f"{os.getpid()}\\n")
print("step 0 loss 1.0", flush=True)
time.sleep(120)
"""


def _tagged() -> list[int]:
    return tagged(TAG, var="FAULTS_TEST_TAG")


TAG = uuid.uuid4().hex


def _start(tmp_path, *options, launcher=("--launcher", "none")):
    script = tmp_path / "stubborn.py"
    script.write_text(STUBBORN)
    pids = tmp_path / "pids"
    cmd = [sys.executable, "-m", "fsdp2_port", "compare", script, script, *launcher, *options]
    return pids, subprocess.Popen(
        [*map(str, cmd), "--", str(pids)],
        cwd=ROOT,
        env={**os.environ, "FAULTS_TEST_TAG": TAG},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_pids(pids, n, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pids.exists() and len(pids.read_text().split()) >= n:
            return
        time.sleep(0.05)
    raise AssertionError(f"the run never started its {n} processes")


def _assert_run_gone(pids, n):
    assert len(pids.read_text().split()) == n  # the run really had its n processes
    assert _tagged() == [], f"processes of the run outlived compare: {_tagged()}"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
@pytest.mark.slow
def test_a_signal_ends_the_whole_run(tmp_path, sig):
    pids, proc = _start(tmp_path, "--format", "json")
    _wait_for_pids(pids, 3)
    sent = time.monotonic()
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=BOUND_S)
    took = time.monotonic() - sent
    assert proc.returncode == 128 + sig, stderr
    report = json.loads(stdout)  # exactly one object
    assert report["exit_code"] == 128 + sig and signal.Signals(sig).name in report["error"]
    assert took < BOUND_S
    _assert_run_gone(pids, 3)


@pytest.mark.slow
def test_the_timeout_ends_the_whole_run_in_bounded_time(tmp_path):
    pids, proc = _start(tmp_path, "--timeout", "3", "--format", "json")
    stdout, _ = proc.communicate(timeout=3 + BOUND_S + 10)
    report = json.loads(stdout)
    assert proc.returncode == 2 and report["runs"]["old"]["returncode"] is None
    assert report["runs"]["old"]["seconds"] < 3 + GRACE_S + KILL_WAIT_S + READ_WAIT_S + 2
    _assert_run_gone(pids, 3)


@pytest.mark.slow
def test_the_timeout_ends_torchrun_and_a_worker_in_its_own_session(tmp_path):
    """torchrun itself, its worker (ignoring SIGTERM) and the worker's two children."""
    # 15 s: torchrun and its worker each import torch before writing their pids, under a
    # second test worker's load (the deadline is a wait, not work)
    pids, proc = _start(
        tmp_path, "--timeout", "15", launcher=("--launcher", "torchrun", "--nproc-per-node", "1")
    )
    _, stderr = proc.communicate(timeout=15 + BOUND_S + 10)
    assert proc.returncode == 2, stderr
    assert "timed out" in stderr
    _assert_run_gone(pids, 3)


def _usage(*options, tmp_path):
    script = tmp_path / "ok.py"
    script.write_text("print('step 0 loss 1.0')\n")
    return subprocess.run(
        [sys.executable, "-m", "fsdp2_port", "compare", str(script), str(script), *options],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    "options,message",
    [
        (["--rtol", "loss=-1"], "--rtol must be a finite number >= 0"),
        (["--rtol", "loss=nan"], "--rtol must be a finite number >= 0"),
        (["--nproc-per-node", "0"], "--nproc-per-node must be >= 1"),
        (["--timeout", "0"], "--timeout must be a finite number of seconds > 0"),
    ],
)
def test_numbers_out_of_range_are_usage_errors(tmp_path, options, message):
    run = _usage(*options, tmp_path=tmp_path)
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(lines) == 1 and message in lines[0], run.stderr
    assert run.stdout == "" and list(tmp_path.glob("*.html")) == []


NAN = math.nan


@pytest.mark.parametrize(
    "old,new,why",
    [
        (NAN, NAN, "NaN in both runs: not comparable"),
        (1.0, NAN, "relative difference inf"),
        (NAN, 1.0, "relative difference inf"),
    ],
)
def test_nan_is_never_the_same(old, new, why):
    failures = judge({0: {"loss": old}}, {0: {"loss": new}}, {"loss": 1e-5})
    assert len(failures) == 1 and why in failures[0]


def test_two_all_nan_runs_are_different():
    log = "step 0 loss nan grad_norm nan\nstep 1 loss nan grad_norm nan\n"
    runs = {label: Run("s.py", [], 0, 0.0, log) for label in ("old", "new")}
    result = judge_runs(Config(), runs)
    assert result.verdict == "different" and result.exit_code == 1
    assert len(result.failures) == 4
