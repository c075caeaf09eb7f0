"""What ``pip install fsdp2-port`` puts in site-packages: one top-level import name,
``fsdp2_port`` (its parts live under it: ``fsdp2_port.codemods``, ``fsdp2_port.compat``), so
that nothing collides with a user's own ``compat.py`` or another distribution's ``codemods``.
Read from a wheel built from a copy of the sources."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PIP_WHEEL = (sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q")


@pytest.mark.timeout(300)
def test_the_wheel_installs_fsdp2_port_alone(tmp_path):
    pytest.importorskip("setuptools")
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(
        ROOT / "fsdp2_port",
        source / "fsdp2_port",
        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"),
    )
    built = subprocess.run(
        [*PIP_WHEEL, str(source), "-w", str(tmp_path / "dist")],
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"fsdp2_port"}
    for module in ("codemods/cli.py", "compat/bf16_optimizer.py", "train/clip.py"):
        assert f"fsdp2_port/{module}" in names, module
    assert not [n for n in names if "/cases/" in n]  # rule cases are test data
