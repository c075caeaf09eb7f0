"""What tests run as subprocesses, and how they find the processes a run left: read from
/proc directly (``benchmarks.faults.tagged``, which the fault benchmark uses the same way),
independently of ``fsdp2_port.prove.launch``, whose cleanup they judge."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from benchmarks.faults import tagged

__all__ = ["ROOT", "fsdp2_port_cli", "tagged"]

ROOT = Path(__file__).resolve().parents[1]


def fsdp2_port_cli(
    *args: str, timeout: float = 300, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m fsdp2_port ARGS`` from the repository's root (``env``: the whole
    environment, or this process's)."""
    return subprocess.run(
        [sys.executable, "-m", "fsdp2_port", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
