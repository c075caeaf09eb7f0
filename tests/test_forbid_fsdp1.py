"""``fsdp2-port compare --forbid-fsdp1``: NEW runs under ``fsdp2_port.prove.no_fsdp1``, and a
run that ends with ``os._exit`` (``launch.exit_now``, how the bundled scripts end their ranks)
is reported before it ends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fsdp2_port.prove.compare import Config, launch_command

STEPS = """\
import sys
{body}
for step in range(2):
    print(f"step {{step}} loss {{1.0 / (step + 1)}}", flush=True)
{end}
"""
FSDP1_CALL = (
    "import torch.distributed.fsdp.wrap as wrap\n"
    "from torch import nn\n"
    "wrap.always_wrap_policy(nn.Linear(1, 1), True, 0)"
)
EXIT_NOW = "from fsdp2_port.prove.launch import exit_now\nexit_now(0)"


def test_only_new_runs_under_the_guard() -> None:
    config = Config(old="old.py", new="new.py", forbid_fsdp1=True, script_args=("--x",))
    old, new = launch_command(config, "old.py", "old"), launch_command(config, "new.py", "new")
    assert old[-2:] == ["old.py", "--x"] and "fsdp2_port.prove.no_fsdp1" not in old
    assert new[-4:] == ["-m", "fsdp2_port.prove.no_fsdp1", "new.py", "--x"]
    unguarded = launch_command(Config(old="o", new="n"), "new.py", "new")
    assert "fsdp2_port.prove.no_fsdp1" not in unguarded
    logged = launch_command(config, "new.py", "new", "/logs")
    assert logged[logged.index("--log-dir") + 1] == os.path.join("/logs", "new")
    assert logged.index("--log-dir") < logged.index("fsdp2_port.prove.no_fsdp1")


@pytest.mark.slow
def test_a_run_ending_with_os_exit_is_reported_first(tmp_path: Path) -> None:
    script = tmp_path / "ends_hard.py"
    script.write_text(STEPS.format(body=FSDP1_CALL, end=EXIT_NOW))
    run = subprocess.run(
        [sys.executable, "-m", "fsdp2_port.prove.no_fsdp1", str(script)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 3, run.stderr
    assert "always_wrap_policy" in run.stderr


@pytest.mark.slow
@pytest.mark.parametrize(("new_body", "verdict", "code"), [("", "same", 0), (FSDP1_CALL, None, 2)])
def test_compare_fails_a_new_run_that_calls_fsdp1(tmp_path, new_body, verdict, code) -> None:
    old, new = tmp_path / "old.py", tmp_path / "new.py"
    old.write_text(STEPS.format(body=FSDP1_CALL, end=EXIT_NOW))  # OLD may: it is FSDP1's
    new.write_text(STEPS.format(body=new_body, end=EXIT_NOW))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "fsdp2_port",
            "compare",
            str(old),
            str(new),
            "--launcher",
            "none",
            "--forbid-fsdp1",
            "--dtype",
            "fp32",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    result = json.loads(done.stdout)
    assert done.returncode == code, done.stdout + done.stderr
    assert result.get("verdict") == verdict or verdict is None
    if code:
        assert "always_wrap_policy" in done.stdout + done.stderr
