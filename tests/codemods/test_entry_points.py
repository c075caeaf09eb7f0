"""The two ways in that run in a subprocess: ``python -m fsdp2_port migrate`` and libcst.tool."""

from __future__ import annotations

import os
import subprocess
import sys

from codemod_samples import FSDP1_SOURCE, FSDP2_SOURCE, ROOT


def test_fsdp2_port_migrate_end_to_end_without_torch(tmp_path, run_module):
    target = tmp_path / "train.py"
    target.write_text(FSDP1_SOURCE)
    blocker = tmp_path / "no_torch"
    (blocker / "torch").mkdir(parents=True)
    (blocker / "torch" / "__init__.py").write_text(
        "raise ImportError('the codemods must not import torch')\n"
    )
    check = run_module("fsdp2_port", "migrate", "--check", str(target))
    assert check.returncode == 1, check.stderr
    assert "+    return fully_shard(model)" in check.stdout
    probe = (
        f"import sys; sys.path.insert(0, {str(blocker)!r}); from fsdp2_port.codemods.cli import "
        f"main; "
        f"code = main(['--write', {str(target)!r}]); assert 'torch' not in sys.modules; "
        "sys.exit(code)"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    written = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert written.returncode == 0, written.stderr
    assert target.read_text() == FSDP2_SOURCE


def test_libcst_tool_runs_the_migrate_command(tmp_path, run_module):
    target = tmp_path / "train.py"
    target.write_text(FSDP1_SOURCE)
    result = run_module(
        "libcst.tool",
        "codemod",
        "--no-format",
        "--hide-progress",
        "migrate.MigrateCommand",
        str(target),
    )
    assert result.returncode == 0, result.stderr
    assert target.read_text() == FSDP2_SOURCE
    assert "F2P002" in result.stderr


def test_libcst_tool_runs_a_single_rule_with_options(tmp_path, run_module):
    target = tmp_path / "train.py"
    target.write_text(FSDP1_SOURCE)
    result = run_module(
        "libcst.tool",
        "codemod",
        "--no-format",
        "--hide-progress",
        "migrate.MigrateCommand",
        "--target-torch",
        "2.5",
        "--select",
        "F2P002,F2P001",
        "-u",
        "1",
        str(target),
    )
    assert result.returncode == 0, result.stderr
    assert "+from torch.distributed._composable.fsdp import fully_shard" in result.stdout
    assert target.read_text() == FSDP1_SOURCE
