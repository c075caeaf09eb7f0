"""Fixtures shared by the codemod tests.

The codemods never import torch, and their tests run without it (``.ci/run`` checks that in an
environment that has none): only test_emitted_api and test_audit_torch import it, skipped there.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from codemod_samples import ROOT


@pytest.fixture
def run_module():
    """Run ``python -m MODULE ARGS`` from the repository root with the project importable."""

    def run(module: str, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
        env = dict(
            os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
        )
        return subprocess.run(
            [sys.executable, "-m", module, *args],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    return run
