"""What tests run as subprocesses, and how they find the processes a run left: read from
/proc directly, independently of ``fsdp2_port.prove.launch``, whose cleanup they judge."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def fsdp2_port_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``python -m fsdp2_port ARGS`` from the repository's root."""
    return subprocess.run(
        [sys.executable, "-m", "fsdp2_port", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def tagged(var: str, tag: str) -> list[int]:
    """Live processes (zombies are dead) whose environment holds ``var=tag``."""
    needle = f"{var}={tag}".encode()
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.append(int(pid))
        except OSError:
            continue
    return found
