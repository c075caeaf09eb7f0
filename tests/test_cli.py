"""The ``fsdp2-port`` command itself: its version, its answer to a mistyped command, and help
for every command where torch is not installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

import fsdp2_port
from fsdp2_port import cli

ROOT = Path(__file__).resolve().parents[1]

# fsdp2-port's CLI in an interpreter where torch cannot be imported nor found installed (what a
# venv with only `pip install fsdp2-port` is): each command line of argv[1] (JSON) is run,
# and (exit code, standard output's first line, standard error) printed as JSON.
WITHOUT_TORCH = """\
import contextlib, io, json, sys
from importlib import metadata

class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r}")

sys.meta_path.insert(0, NoTorch())
installed = metadata.version
def version(name):
    if name == "torch":
        raise metadata.PackageNotFoundError(name)
    return installed(name)
metadata.version = version

from fsdp2_port.cli import main
seen = []
for args in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(args)
        except SystemExit as leaving:
            code = leaving.code
    seen.append((code, (out.getvalue().splitlines() or [""])[0], err.getvalue()))
assert "torch" not in sys.modules
print(json.dumps(seen))
"""


def test_version(capsys):
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out == f"fsdp2-port {fsdp2_port.__version__}\n"
    assert fsdp2_port.__version__ == metadata.version("fsdp2-port")
    assert cli.main(["-V"]) == 0


@pytest.mark.parametrize(
    "typed, says",
    [
        ("migrat", "(did you mean 'migrate'?)"),
        ("convert", "(did you mean 'convert-checkpoint'?)"),
        ("comapre", "(did you mean 'compare'?)"),
        ("lint", "(one of migrate, compare, verify, convert-checkpoint)"),
    ],
)
def test_a_mistyped_command_gets_one_line_and_a_suggestion(capsys, typed, says):
    assert cli.main([typed]) == 2
    assert capsys.readouterr().err == f"fsdp2-port: error: unknown command {typed!r} {says}\n"


def test_every_help_works_without_torch():
    helps = [["--help"], *([c, "--help"] for c in ("migrate", "compare", "verify"))]
    helps.append(["convert-checkpoint", "--help"])
    runtime = [["verify", "--steps", "2"], ["convert-checkpoint", "a.pt", "b.pt"]]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    run = subprocess.run(
        [sys.executable, "-c", WITHOUT_TORCH, json.dumps([*helps, runtime[0], runtime[1]])],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    seen = json.loads(run.stdout)
    for args, (code, first, err) in zip(helps, seen):
        assert code == 0 and first.startswith("usage: fsdp2-port") and not err, (args, err)
    for args, (code, _, err) in zip(runtime, seen[len(helps) :]):
        # the runtime commands say, in one line, what is missing
        assert code == 2 and len(err.splitlines()) == 1 and "needs torch" in err, (args, err)
