"""`fsdp2-port compare`: reading logs, judging, exit codes, and real runs of tests/scripts/.

The scripts: train_fsdp1.py (FSDP1 + fsdp2_port.compat.BF16Optimizer), train_fsdp2.py (its
migration by
hand) and train_fsdp2_local_clip.py (the migration with the rank-local clip brought back).
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fsdp2_port.prove.compare import (
    MEASURE,
    NOT_JUDGED,
    RUNS,
    Config,
    Result,
    Run,
    StepClock,
    format_text,
    judge,
    judge_runs,
    launch_command,
    memory,
    new_over_old,
    parse_log,
    patterns,
    timing,
    tolerances,
)
from fsdp2_port.prove.judge import relative_difference

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "tests" / "scripts"


def _compare(*args, timeout=240, env=None):
    return subprocess.run(
        [sys.executable, "-m", "fsdp2_port", "compare", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def _script(tmp_path, name, body):
    path = tmp_path / name
    path.write_text(body)
    return path


LOG = "print('step 0 loss 2.0 grad_norm 0.5'); print('step 1 loss 1.5 grad_norm 0.4')"


# -- reading and judging (no runs) ------------------------------------------------------------


def test_default_patterns_read_the_usual_log_lines():
    step, metrics = patterns({})
    text = "\n".join(
        [
            "step 0 loss 2.5 grad_norm 0.5",
            "Step 1/100 | Loss: 2.25 | grad norm: 4e-1",
            "[rank0] step=2 loss=2.0 gnorm=0.3 lr=1e-3",
            "step 3, loss 1.9, norm 0.2",
            "loss 9.9 grad_norm 9.9",  # no step on the line: not read
            "saving a checkpoint at step 4",  # a step with no metric: not a logged step
            "step 3 loss 1.8",  # the last value of a step wins, the others stay
            "epoch 0 step 5 train_loss 7.0 loss nan",
        ]
    )
    assert parse_log(text, step, metrics) == {
        0: {"loss": 2.5, "grad_norm": 0.5},
        1: {"loss": 2.25, "grad_norm": 0.4},
        2: {"loss": 2.0, "grad_norm": 0.3},
        3: {"loss": 1.8, "grad_norm": 0.2},
        5: {"loss": pytest.approx(float("nan"), nan_ok=True)},
    }


def test_metric_patterns_add_and_replace():
    step, metrics = patterns({"ppl": r"ppl=(\S+)", "step": r"it (\d+)"})
    assert parse_log("it 7 loss 1.0 ppl=2.7", step, metrics) == {7: {"loss": 1.0, "ppl": 2.7}}


def test_without_dtype_compare_judges_loss_and_grad_norm_as_bf16():
    """The default: one bf16 rounding (2^-9) on each metric. (A correct migration judged the
    same under torchrun, leaving no log folder behind: the multi-file programs' tests.)"""
    default = tolerances(Config().dtype, ["loss", "grad_norm"], {})
    assert default == {"loss": 2e-3, "grad_norm": 2e-3}


def test_judge_names_every_departure():
    old = {0: {"loss": 2.0, "grad_norm": 0.5}, 1: {"loss": 1.5, "grad_norm": 0.4}, 2: {"loss": 1}}
    new = {0: {"loss": 2.0 * (1 + 1e-3), "grad_norm": 0.5}, 1: {"loss": 1.5}}
    tol = {"loss": 2e-3, "grad_norm": 2e-3}
    assert judge(old, new, tol) == [
        "steps logged by old only: 2",
        "step 1: grad_norm logged by old only",
    ]
    new[0]["grad_norm"] = 0.5 * (1 + 3e-3)
    assert judge(old, new, tol)[1] == (
        "step 0: grad_norm 0.5015 vs 0.5, relative difference 3.00e-03 > 0.002"
    )
    assert relative_difference(0.0, 0.0) == 0 and relative_difference(0.0, 1e-9) == float("inf")
    nan = float("nan")
    assert relative_difference(nan, nan) == float("inf") == relative_difference(1.0, nan)


def test_on_a_node_without_rank_0_silence_is_not_a_failure():
    """Several nodes: where both runs succeeded and neither printed a step, rank 0's node
    judges; on one node the same silence is an error."""
    runs = {label: Run(f"{label}.py", [], returncode=0, stdout="loading\n") for label in RUNS}
    elsewhere = judge_runs(Config(nnodes="2", rdzv_endpoint="head:29500"), runs)
    assert (elsewhere.verdict, elsewhere.exit_code) == ("elsewhere", 0)
    alone = judge_runs(Config(), runs)
    assert (alone.verdict, alone.exit_code, alone.error) == (
        "error",
        2,
        "old and new logged no step with a metric",
    )


# -- time and memory (no runs) ---------------------------------------------------------------


def test_a_step_takes_the_time_between_its_line_and_the_previous_steps():
    """Logged every second step: a step's time is the gap over the steps it spans; the first
    logged step carries the start-up and is kept apart."""
    run = Run("old.py", [], 0, 9.0, step_times={0: 4.0, 2: 5.0, 4: 5.5, 6: 6.5})
    assert timing(run) == {
        "total_s": 9.0,
        "first_step_s": 4.0,
        "steps": [2, 4, 6],
        "per_step_s": [0.5, 0.25, 0.5],
        "median_step_s": 0.5,
    }
    once = timing(Run("old.py", [], 0, 1.0, step_times={3: 0.5}))
    assert (once["per_step_s"], once["median_step_s"], once["first_step_s"]) == ([], None, 0.5)


def test_step_clock_keeps_step_lines_and_times_the_first_that_logs_each_step():
    step, metrics = patterns({})
    clock = StepClock(step)
    assert clock("step 0 loss 1.0") and clock("saving at step 1")
    assert not clock("loss 2.0 (no step)")
    assert [line for _, line in clock.arrivals] == ["step 0 loss 1.0", "saving at step 1"]
    clock.arrivals = [
        (0.5, "step 0 loss 1.0"),
        (0.6, "step 0 loss 1.0"),  # another rank's line of the same step
        (0.7, "saving at step 1"),  # a step with no metric is not logged
        (0.9, "step 1 grad_norm 0.3"),
    ]
    assert clock.step_times(metrics) == {0: 0.5, 1: 0.9}


def test_memory_is_cudas_peak_where_a_process_used_cuda_else_the_largest_rss():
    cpu = Run("old.py", [], 0, peak_rss_bytes=300 << 20)
    gpu = Run("new.py", [], 0, peak_rss_bytes=900 << 20, cuda_max_allocated_bytes=2 << 30)
    assert memory(cpu) == {
        "kind": "rss",
        "peak_bytes": 300 << 20,
        "peak_rss_bytes": 300 << 20,
        "cuda_max_allocated_bytes": None,
    }
    assert (memory(gpu)["kind"], memory(gpu)["peak_bytes"]) == ("cuda_max_allocated", 2 << 30)


def _timed_result(old: Run, new: Run) -> Result:
    """Both runs logging the same two steps, judged."""
    for run in (old, new):
        run.stdout = "step 0 loss 2.0 grad_norm 0.5\nstep 1 loss 1.5 grad_norm 0.4\n"
    return judge_runs(Config(), {"old": old, "new": new})


def _row(text: str, name: str) -> list[str]:
    """The cells after ``name`` on its row of the text report's time and memory table."""
    line = next(line for line in text.splitlines() if line.startswith(f"  {name}  "))
    return re.split(r"\s{2,}", line[len(name) + 2 :].strip())


def test_new_over_old_and_the_text_report_show_the_payoff_and_say_it_is_not_judged():
    old = Run("old.py", ["python", "old.py"], 0, 10.0, step_times={0: 2.0, 1: 2.4, 2: 2.8})
    new = Run("new.py", ["python", "new.py"], 0, 8.0, step_times={0: 1.0, 1: 1.2, 2: 1.4})
    old.peak_rss_bytes, new.peak_rss_bytes = 400 << 20, 300 << 20
    result = _timed_result(old, new)
    assert result.verdict == "same"  # 2x faster, a quarter less memory: not a departure
    assert new_over_old(result) == {
        "median_step_s": 0.5,
        "first_step_s": 0.5,
        "total_s": 0.8,
        "peak_bytes": 0.75,
    }
    text = format_text(result)
    assert NOT_JUDGED in text
    assert _row(text, "median step") == ["400.0 ms", "200.0 ms", "0.50"]
    assert _row(text, "first step, with start-up") == ["2.00 s", "1.00 s", "0.50"]
    assert _row(text, "peak memory (RSS, largest process)") == ["400.0 MiB", "300.0 MiB", "0.75"]
    new.cuda_max_allocated_bytes = 1 << 30  # kinds apart: no ratio
    assert new_over_old(_timed_result(old, new))["peak_bytes"] is None


def test_the_shown_command_is_the_users_the_run_adds_measure_and_log_dir():
    config = Config(old="old.py", new="new.py", forbid_fsdp1=True, script_args=("--x",))
    shown = launch_command(config, "new.py", "new")
    run = launch_command(config, "new.py", "new", "/logs", measure=True)
    assert MEASURE not in shown and "--log-dir" not in shown
    assert run[run.index("--log-dir") + 2 :] == [
        *("-m", MEASURE, "-m", "fsdp2_port.prove.no_fsdp1"),
        *("new.py", "--x"),
    ]


# -- exit codes, on scripts that import nothing -----------------------------------------------


def test_a_crashing_new_run_exits_2_with_its_status_and_output(tmp_path):
    old = _script(tmp_path, "old.py", LOG)
    new = _script(tmp_path, "new.py", "print('step 0 loss 2.0')\nraise SystemExit(3)")
    run = _compare(old, new, "--launcher", "none")
    assert run.returncode == 2, run.stdout + run.stderr
    assert "new (" in run.stderr and "failed: exit 3" in run.stderr
    assert "step 0 loss 2.0" in run.stderr  # the tail of its output
    report = json.loads(_compare(old, new, "--launcher", "none", "--format", "json").stdout)
    assert report["verdict"] == "error" and report["runs"]["new"]["returncode"] == 3


def test_a_run_that_logs_no_steps_exits_2(tmp_path):
    old = _script(tmp_path, "old.py", LOG)
    new = _script(tmp_path, "new.py", "print('training done')")
    run = _compare(old, new, "--launcher", "none", "--format", "json")
    assert run.returncode == 2
    report = json.loads(run.stdout)
    assert report["error"] == "new logged no step with a metric"
    assert "training done" in report["runs"]["new"]["stdout_tail"]


def test_json_for_every_outcome_and_no_torch_in_the_parent(tmp_path):
    old = _script(tmp_path, "old.py", LOG)
    new = _script(tmp_path, "new.py", LOG.replace("1.5", "1.6"))
    for args, code in [
        ((old, old), 0),
        ((old, new), 1),
        ((old, new, "--rtol", "loss=0.1"), 0),
        ((old, new, "--rtol", "lr=0.1"), 2),  # no such metric
        ((old, new, "--metric", "x=no group"), 2),
        ((old, new, "--nproc-per-node", "2"), 2),  # torchrun's, with --launcher none
        ((old, new, "--launcher", "torchrun", "--node-rank", "1"), 2),  # no rendezvous
        ((old, tmp_path / "missing.py"), 2),
        ((old,), 2),  # argparse's own error
    ]:
        run = _compare("--launcher", "none", "--format", "json", *args)
        report = json.loads(run.stdout)
        assert (run.returncode, report["exit_code"]) == (code, code), (args, run.stderr)
        if "--node-rank" in args:
            assert "need --rdzv-endpoint" in report["error"]
        if code < 2:  # both ran: each one's time and memory, measured
            for run in report["runs"].values():
                assert run["time"]["steps"] == [1] and run["time"]["per_step_s"][0] >= 0
                assert run["time"]["total_s"] >= run["time"]["first_step_s"] > 0
                assert run["memory"]["kind"] == "rss" and run["memory"]["peak_bytes"] > 1 << 20
            assert report["new_over_old"]["total_s"] > 0
    probe = (
        "import sys; from fsdp2_port.cli import main; "
        f"code = main(['compare', {str(old)!r}, {str(new)!r}, '--launcher', 'none']); "
        "assert 'torch' not in sys.modules, 'compare imported torch'; sys.exit(code)"
    )
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert run.returncode == 1, run.stderr
    assert "step 1: loss 1.6 vs 1.5" in run.stdout


@pytest.mark.slow
def test_a_run_past_its_timeout_or_interrupted_leaves_no_process(tmp_path):
    """Both stop the run's whole process group (here a script and the child it started)."""
    pids = tmp_path / "pids"
    sleeper = _script(
        tmp_path,
        "sleeper.py",
        "import os, subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pids)!r}, 'a').write(f'{{os.getpid()}} {{child.pid}}\\n')\n"
        "print('step 0 loss 1.0', flush=True)\n"
        "time.sleep(60)\n",
    )
    run = _compare(sleeper, sleeper, "--launcher", "none", "--timeout", "2", "--format", "json")
    report = json.loads(run.stdout)
    assert run.returncode == 2 and report["runs"]["old"]["returncode"] is None
    assert "timed out" in report["error"] and "step 0 loss 1.0" in run.stderr
    interrupted = subprocess.Popen(
        [sys.executable, "-m", "fsdp2_port", "compare", sleeper, sleeper, "--launcher", "none"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 30
    while len(pids.read_text().splitlines()) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    interrupted.send_signal(signal.SIGINT)
    interrupted.communicate(timeout=30)
    time.sleep(0.5)
    for pid in map(int, pids.read_text().split()):
        assert not _alive(pid), f"process {pid} outlived compare"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is dead, only not yet reaped
        return f.read().split(") ")[-1][0] != "Z"


# -- real runs: 2 gloo ranks ------------------------------------------------------------------


@pytest.mark.slow
def test_the_rank_local_clip_is_different_with_ranks_the_scripts_spawn():
    run = _compare(
        SCRIPTS / "train_fsdp1.py",
        SCRIPTS / "train_fsdp2_local_clip.py",
        "--launcher",
        "none",
        "--format",
        "json",
        "--timeout",
        "180",
    )
    assert run.returncode == 1, run.stdout + run.stderr
    report = json.loads(run.stdout)
    assert report["runs"]["new"]["command"][1].endswith("train_fsdp2_local_clip.py")
    steps = report["steps"]
    assert len(steps) == 3 and steps[0]["rel_diff"]["loss"] == 0  # same start, same batch
    # rank 0's shard norm: well below the global one, and judged so at every step
    assert steps[0]["new"]["grad_norm"] < 0.9 * steps[0]["old"]["grad_norm"]
    assert [f.split(":")[0] for f in report["failures"]][:3] == ["step 0", "step 1", "step 2"]
    for run in report["runs"].values():  # the ranks it spawned and joined: torch in each
        assert run["time"]["steps"] == [1, 2] and run["time"]["median_step_s"] > 0
        assert run["memory"]["kind"] == "rss"
        assert run["memory"]["peak_rss_bytes"] > 100 << 20
