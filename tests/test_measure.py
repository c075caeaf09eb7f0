"""`python -m fsdp2_port.prove.measure`: a script runs under it as under `python`, and each
process that used CUDA leaves its peak (a stand-in torch here: no GPU needed)."""

import os
import subprocess
import sys
from pathlib import Path

from fsdp2_port.prove.measure import MEASURE_DIR_VAR, read_records

# A stand-in for torch with CUDA initialised on two devices, 5 and 7 bytes at their peaks.
FAKE_TORCH = """
import sys, types
cuda = types.SimpleNamespace(
    is_initialized=lambda: True,
    device_count=lambda: 2,
    max_memory_allocated=lambda d: (5, 7)[d],
)
sys.modules["torch"] = types.SimpleNamespace(cuda=cuda)
"""


def _measure(tmp_path: Path, body: str, *args: str, env: dict | None = None):
    script = tmp_path / "train.py"
    script.write_text(body)
    return subprocess.run(
        [sys.executable, "-m", "fsdp2_port.prove.measure", str(script), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def test_a_script_runs_as_under_python(tmp_path):
    body = (
        "import os, sys\n"
        "print(__name__, sys.argv[1:], os.path.basename(sys.argv[0]), sys.path[0] == "
        f"{str(tmp_path)!r})\n"
        "raise SystemExit(3)\n"
    )
    run = _measure(tmp_path, body, "--steps", "2")
    assert (run.returncode, run.stdout) == (3, "__main__ ['--steps', '2'] train.py True\n")
    failing = _measure(tmp_path, "raise ValueError('bad batch')")
    assert failing.returncode == 1 and "ValueError: bad batch" in failing.stderr


def test_a_process_that_used_cuda_leaves_its_peak_also_through_os_exit(tmp_path):
    records = tmp_path / "records"
    records.mkdir()
    env = {**os.environ, MEASURE_DIR_VAR: str(records), "RANK": "1"}
    ends_hard = FAKE_TORCH + "import os\nos._exit(0)\n"
    assert _measure(tmp_path, ends_hard, env=env).returncode == 0
    assert read_records(records) == [{"rank": "1", "cuda_max_allocated_bytes": 7}]
    for record in records.iterdir():
        record.unlink()
    assert _measure(tmp_path, "import json", env=env).returncode == 0  # no CUDA: no record
    assert read_records(records) == []
    assert _measure(tmp_path, FAKE_TORCH, env=env).returncode == 0  # ending normally, too
    assert read_records(records) == [{"rank": "1", "cuda_max_allocated_bytes": 7}]


def test_a_runs_peak_rss_is_its_largest_process_children_it_reaped_included():
    """A parent of a few MiB whose child touches 256 MiB: the run's peak is the child's. (The
    kernel counts in a process the memory of its starter up to its exec: the runs start from
    a small process, as compare is, not from this test's.)"""
    child = "b = bytearray(256 << 20); b[::4096] = b'x' * len(b[::4096])"
    parent = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {child!r}])"
    measure = (
        "import sys; from fsdp2_port.prove.launch import run_command; "
        "print(*(run_command([sys.executable, '-c', c], 60).peak_rss_bytes for c in sys.argv[1:]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", measure, parent, "pass"], capture_output=True, text=True, timeout=60
    )
    big, small = map(int, done.stdout.split())
    assert big > 256 << 20 > 4 * small > 0, (big, small)
