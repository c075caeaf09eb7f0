"""The ``fsdp2-port`` command's front door, where torch cannot be imported: its version, its
answer to a mistyped command or option, every command's ``--help``, one line (no traceback)
from the commands that need torch, and the words and counts of ``migrate``'s summary."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from codemod_samples import FSDP1_SOURCE, ROOT
from fixtures_support import cases, expected_paths

import fsdp2_port
from fsdp2_port import cli
from fsdp2_port.codemods.cli import build_parser
from fsdp2_port.codemods.cli import main as migrate
from fsdp2_port.codemods.findings import Finding
from fsdp2_port.codemods.summary import Summary, constructor_form, count, runtime_names

# FSDP(model, **kwargs) with keys only the run knows: the fully_shard_like_fsdp1 form.
BRIDGED = """\
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def from_kwargs(model, **fsdp_kwargs):
    kwargs = dict(use_orig_params=True)
    kwargs.update(fsdp_kwargs)
    return FSDP(model, **kwargs)
"""


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


def test_migrate_help_names_its_default_path_and_exit_codes():
    text = build_parser().format_help()
    assert "(default: .)" in text
    assert "1 with --check when files would change" in " ".join(text.split())
    assert "--fail-on-review" in text


def test_every_migrate_option_has_a_row_in_its_page():
    page = (ROOT / "docs" / "migrate.md").read_text()
    first_cells = re.findall(r"^\|([^|]*)\|", page, re.M)
    rows = {option for cell in first_cells for option in re.findall(r"`(--[\w-]+)", cell)}
    offered = {
        option
        for action in build_parser()._actions
        for option in action.option_strings
        if option.startswith("--") and option != "--help"
    }
    assert offered <= rows, sorted(offered - rows)


# -- the summary ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "n, noun, said", [(0, "error", "0 errors"), (1, "file", "1 file"), (2, "file", "2 files")]
)
def test_counts_in_words(n, noun, said):
    assert count(n, noun) == said


def test_the_summary_says_one_file_and_one_error(tmp_path, capsys):
    (tmp_path / "bad.py").write_text(
        "from torch.distributed.fsdp import (FullyShardedDataParallel,\n"
    )
    assert migrate([str(tmp_path)]) == 2
    last = capsys.readouterr().err.splitlines()[-1]
    assert last == (
        "fsdp2-port migrate: 1 file scanned, 0 parsed, 0 would change, 0 findings "
        "(0 to review), 1 error"
    )
    (tmp_path / "bad.py").write_text(FSDP1_SOURCE)
    (tmp_path / "other.py").write_text(FSDP1_SOURCE)
    migrate([str(tmp_path)])
    assert "migrate: 2 files scanned, 2 parsed, 2 would change, 4 findings" in (
        capsys.readouterr().err
    )


def test_the_summary_counts_constructors_by_form_and_the_files_that_import_fsdp2_port(
    tmp_path, capsys
):
    (tmp_path / "plain.py").write_text(FSDP1_SOURCE)
    (tmp_path / "bridged.py").write_text(BRIDGED)
    assert migrate([str(tmp_path)]) == 0
    assert capsys.readouterr().err.splitlines()[-1] == (
        "fsdp2-port migrate: 2 constructors to migrate (1 plain fully_shard, "
        "1 fully_shard_like_fsdp1); 1 file would import fsdp2_port at run time: "
        "fully_shard_like_fsdp1"
    )
    assert migrate(["--format", "json", "--write", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert err.splitlines()[-1] == (
        "fsdp2-port migrate: 2 constructors migrated (1 plain fully_shard, "
        "1 fully_shard_like_fsdp1); 1 file imports fsdp2_port at run time: "
        "fully_shard_like_fsdp1"
    )
    summary = json.loads(out)[-1]["summary"]
    assert summary["constructors"] == {"fully_shard": 1, "fully_shard_like_fsdp1": 1}
    bridged = str(tmp_path / "bridged.py")
    assert summary["fsdp2_port_at_run_time"] == {bridged: ["fully_shard_like_fsdp1"]}
    assert (summary["files"], summary["changed"], summary["written"]) == (2, 2, True)
    assert "fully_shard_like_fsdp1(model, **kwargs)" in Path(bridged).read_text()


def test_a_run_that_rewrites_no_constructor_has_one_summary_line(tmp_path, capsys):
    (tmp_path / "plain.py").write_text("x = 1\n")
    assert migrate(["--format", "jsonl", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert len(err.splitlines()) == 1
    (record,) = map(json.loads, out.splitlines())
    assert record["summary"]["constructors"] == {"fully_shard": 0, "fully_shard_like_fsdp1": 0}


def test_constructors_are_counted_only_where_their_file_changes():
    rewrite = Finding("a.py", 1, 1, "F2P002", "FSDP(...) -> fully_shard(...)", "safe", "rewritten")
    summary = Summary(write=True)
    summary.add([rewrite], parsed=True, changed=False, path="a.py", runtime=("no_sync",))
    assert summary.lines() == [
        "0 files scanned, 1 parsed, 0 changed, 1 finding (0 to review), 0 errors"
    ]


@pytest.mark.parametrize(
    "text, names",
    [
        ("import torch\n", ()),
        ("from fsdp2_port import no_sync, unwrapped\n", ("no_sync", "unwrapped")),
        ("import fsdp2_port\nfsdp2_port.module_state_dict(m)\n", ("module_state_dict",)),
        ("import fsdp2_port as f\nf.no_sync(m)\nf.no_sync(n)\n", ("no_sync",)),
        ("import fsdp2_port\n", ("fsdp2_port",)),
        ("from fsdp2_port.compat import BF16Optimizer\n", ("compat.BF16Optimizer",)),
        ("import fsdp2_port.compat as c\nc.BF16Optimizer\n", ("compat.BF16Optimizer",)),
        (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from fsdp2_port import X\n"
            "else:\n    from fsdp2_port import Y\n",
            ("Y",),
        ),
        ("def f(:\n    import fsdp2_port\n", ()),  # no parse, no claim
    ],
)
def test_runtime_names(text, names):
    assert runtime_names(text) == names


def _snapshot(line: str) -> Finding | None:
    """A line of a fixture's ``.findings``, as a finding (severity and action in brackets)."""
    found = re.match(r"(\S+?):(\d+):(\d+): (F2P\d{3}) \[(\w+), (\w+)\] (.*)", line)
    if found is None:
        return None
    path, line_no, column, code, severity, action, message = found.groups()
    return Finding(path, int(line_no), int(column), code, message, severity, action)  # type: ignore[arg-type]


def test_every_constructor_rewrite_in_the_fixtures_has_a_form():
    """What the constructors rule writes for a rewritten FSDP(...) or partial(FSDP, ...) is
    read as one of the two forms; only the removal of a binding it inlined is not one."""
    rewrites = [
        finding
        for case in cases()
        for line in expected_paths(case)[1].read_text().splitlines()
        if (finding := _snapshot(line)) is not None
        and finding.code in ("F2P002", "F2P003")
        and finding.action == "rewritten"
    ]
    forms = [constructor_form(f) for f in rewrites]
    unread = {f.message for f, form in zip(rewrites, forms) if form is None}
    assert all(m.endswith("binding removed: inlined into the FSDP2 calls") for m in unread), unread
    assert {"fully_shard", "fully_shard_like_fsdp1"} <= set(forms)
    flagged = Finding("a.py", 1, 1, "F2P002", "FSDP(...) left as is", "review", "flagged")
    assert constructor_form(flagged) is None


ONE_RANK_SAVE = """\
import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def main(model, path):
    model = FSDP(model)
    if dist.get_rank() == 0:
        torch.save(model.state_dict(), path)
"""


def test_fail_on_review_counts_the_markers_a_write_left(tmp_path, capsys):
    """A rewrite done for review reports no finding on the next run, but its marker stays in
    the file: ``--fail-on-review`` fails until it is dealt with, and says how many remain."""
    script = tmp_path / "train.py"
    script.write_text(ONE_RANK_SAVE)
    assert migrate(["--write", str(script)]) == 0
    assert "[review, rewritten]" in capsys.readouterr().err
    assert migrate(["--check", str(script)]) == 0  # nothing would change
    capsys.readouterr()
    assert migrate(["--check", "--fail-on-review", str(script)]) == 1
    assert "1 marker to review in the files" in capsys.readouterr().err
    script.write_text(
        "\n".join(
            line for line in script.read_text().splitlines() if "TODO(fsdp2-port)" not in line
        )
        + "\n"
    )
    assert migrate(["--check", "--fail-on-review", str(script)]) == 0
