"""The ``fsdp2-port`` command's front door, where torch cannot be imported: its version, its
answer to a mistyped command or option, every command's ``--help``, and one line (no
traceback) from the commands that need torch."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib import metadata

import pytest
from codemod_samples import ROOT

import fsdp2_port
from fsdp2_port import cli


@pytest.fixture
def without_torch(tmp_path):
    """Run ``python -m fsdp2_port ARGS`` where ``import torch`` raises ImportError."""
    blocker = tmp_path / "no_torch"
    (blocker / "torch").mkdir(parents=True)
    (blocker / "torch" / "__init__.py").write_text("raise ImportError('torch is blocked')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(blocker), str(ROOT)]))

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "fsdp2_port", *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    return run


def test_version(capsys):
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out == f"fsdp2-port {fsdp2_port.__version__}\n"
    assert cli.main(["-V"]) == 0
    assert capsys.readouterr().out == f"fsdp2-port {fsdp2_port.__version__}\n"
    assert fsdp2_port.__version__ == metadata.version("fsdp2-port")


@pytest.mark.parametrize(
    "typed, says",
    [
        ("migrat", "unknown command 'migrat' (did you mean 'migrate'?)"),
        ("mig", "unknown command 'mig' (did you mean 'migrate'?)"),
        ("convert", "unknown command 'convert' (did you mean 'convert-checkpoint'?)"),
        ("comapre", "unknown command 'comapre' (did you mean 'compare'?)"),
        ("lint", "unknown command 'lint' (one of migrate, compare, verify, convert-checkpoint)"),
        ("--verbose", "unknown option '--verbose' (try --help)"),
    ],
)
def test_a_mistyped_command_gets_one_line_and_a_suggestion(capsys, typed, says):
    assert cli.main([typed]) == 2
    out, err = capsys.readouterr()
    assert (out, err) == ("", f"fsdp2-port: error: {says}\n")


@pytest.mark.parametrize("command", ["", *cli._COMMANDS])
def test_every_help_works_without_torch(without_torch, command):
    done = without_torch(*filter(None, [command, "--help"]))
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.startswith(f"usage: fsdp2-port {command}".rstrip())


@pytest.mark.parametrize(
    "args",
    [
        ["verify", "--steps", "1"],
        ["convert-checkpoint", "a.pt", "b.pt"],
        ["compare", "old.py", "new.py"],  # torchrun is torch's
    ],
    ids=lambda args: args[0],
)
def test_a_command_that_needs_torch_says_so_in_one_line(without_torch, args):
    done = without_torch(*args)
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"fsdp2-port {args[0]}: error: fsdp2-port's runtime "), line
    assert "torch" in line.split("runtime ", 1)[1]


# fsdp2-port's runtime commands where torch is not installed at all (its metadata absent too,
# as in a venv made with `pip install fsdp2-port` alone): require_torch's message.
NOT_INSTALLED = """\
import sys
from importlib import metadata

found = metadata.version
def version(name):
    if name == "torch":
        raise metadata.PackageNotFoundError(name)
    return found(name)
metadata.version = version

from fsdp2_port.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_missing_torch_is_named_with_the_release_it_needs(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-c", NOT_INSTALLED, "convert-checkpoint", "a.pt", "b.pt"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert re.fullmatch(r".*needs torch >= [\d.]+, and none is installed: pip install .*", line)
