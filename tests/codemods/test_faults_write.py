"""``fsdp2-port migrate`` under faults and bad input.

Invariants checked: after any interruption of ``--write`` every file holds its old or its new
bytes, ``--check`` changes nothing, and once the next ``--write`` has run the tree is the
clean migration, with no staged copy or journal left; rewritten files keep owner, group, mode
and hard links; what the command is given is read (or named as an error); errors reach every
output format.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from codemod_samples import FSDP1_SOURCE, FSDP2_SOURCE, ROOT

from fsdp2_port.codemods import writes
from fsdp2_port.codemods.cli import main

PACKAGE = ROOT / "tests" / "codemods" / "fixtures" / "whole_models" / "untied.in"

# The real CLI, with each staged write and each replace slowed so that a kill lands inside
# the write phase; it touches MARK when the write phase starts and, if set, REPLACING when it
# replaces its first file.
SLOWED_CLI = """\
import os, sys, time
from fsdp2_port.codemods import writes
mark, replacing = os.environ["MARK"], os.environ.get("REPLACING")
real_stage, real_replace, real_in_place = writes._stage, os.replace, writes._write_in_place
def stage(*args):
    open(mark, "a").close()
    time.sleep(0.01)
    return real_stage(*args)
def replace(source, target):
    if replacing and str(target).endswith(".py"):
        open(replacing, "a").close()
    time.sleep(0.02)
    return real_replace(source, target)
def in_place(f):  # hard-linked files
    time.sleep(0.02)
    return real_in_place(f)
writes._stage, os.replace, writes._write_in_place = stage, replace, in_place
from fsdp2_port.codemods.cli import main
sys.exit(main(sys.argv[1:]))
"""


def journals() -> list[Path]:
    """The journals of this test's runs (in its private state directory)."""
    return sorted(Path(os.environ["FSDP2_PORT_STATE_DIR"]).glob("*.json"))


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (relative path -> bytes), leftovers included."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


@pytest.fixture(scope="module")
def package_states(tmp_path_factory) -> tuple[dict[str, bytes], dict[str, bytes]]:
    """``(original, clean migration)`` of the multi-file package."""
    base = tmp_path_factory.mktemp("reference")
    shutil.copytree(PACKAGE, base / "tree")
    original = snapshot(base / "tree")
    assert main(["--write", str(base / "tree")]) == 0
    migrated = snapshot(base / "tree")
    assert migrated != original
    return original, migrated


def slowed_cli(tree: Path, mark: Path, *args: str, **extra: str) -> subprocess.Popen:
    env = dict(os.environ, MARK=str(mark), PYTHONPATH=str(ROOT), **extra)
    return subprocess.Popen(
        [sys.executable, "-c", SLOWED_CLI, "--write", *args, str(tree)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(mark: Path, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 30
    while not mark.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)


@pytest.mark.slow
def test_sigkill_at_20_random_moments_leaves_a_repairable_tree(tmp_path, package_states, capsys):
    original, migrated = package_states
    generator = random.Random(21)
    outcomes = []
    for attempt in range(20):
        tree, mark = tmp_path / f"t{attempt}", tmp_path / f"mark{attempt}"
        shutil.copytree(PACKAGE, tree)
        outside = tmp_path / f"link{attempt}.py"  # a hard link: that file is written in place
        os.link(tree / "pkg" / "base.py", outside)
        process = slowed_cli(tree, mark)
        wait_for(mark, process)
        time.sleep(generator.uniform(0.0, 0.2))
        process.send_signal(signal.SIGKILL)
        process.wait()
        after = snapshot(tree)
        for name, data in after.items():
            if name.endswith(".py"):
                assert data in (original[name], migrated[name]), f"{name} torn (attempt {attempt})"
        python = {k: v for k, v in after.items() if k.endswith(".py")}
        mixed = python not in (original, migrated)
        assert not mixed or journals(), "a mixed tree must have its journal"
        outcomes.append("mixed" if mixed else "original" if python == original else "migrated")
        # --check reads nothing of a tree a run may have half written, and changes nothing.
        assert main(["--check", str(tree)]) in ((2,) if mixed else (0, 1, 2))
        assert snapshot(tree) == after
        # The next --write finishes it: all or nothing, no leftovers.
        assert main(["--write", str(tree)]) == 0
        assert snapshot(tree) == migrated, f"attempt {attempt}: {sorted(snapshot(tree))}"
        assert outside.read_bytes() == migrated["pkg/base.py"], "the hard link follows"
        assert not journals()
    capsys.readouterr()
    assert "mixed" in outcomes, f"no kill landed between two replaces: {outcomes}"


def test_sigint_during_the_replace_finishes_the_run(tmp_path, package_states):
    _, migrated = package_states
    tree, mark, replacing = tmp_path / "tree", tmp_path / "mark", tmp_path / "replacing"
    shutil.copytree(PACKAGE, tree)
    process = slowed_cli(tree, mark, REPLACING=str(replacing))
    deadline = time.monotonic() + 30
    while not replacing.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.001)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode in (0, 130), err
    assert snapshot(tree) == migrated, "Ctrl-C during the replace still ends fully migrated"


# The real CLI, killed (SIGKILL) right after it staged its first copy, or as it is about to
# replace its $KILL_AT-th file by rename.
KILLED_CLI = """\
import os, signal, sys
from fsdp2_port.codemods import writes
real_stage, real_replace, count = writes._stage, os.replace, [0]
def stage(*args):
    real_stage(*args)
    if not os.environ.get("KILL_AT"):
        os.kill(os.getpid(), signal.SIGKILL)
def replace(source, target):
    if str(target).endswith(".py"):
        count[0] += 1
        if str(count[0]) == os.environ.get("KILL_AT"):
            os.kill(os.getpid(), signal.SIGKILL)
    return real_replace(source, target)
writes._stage, os.replace = stage, replace
from fsdp2_port.codemods.cli import main
sys.exit(main(sys.argv[1:]))
"""


def killed_cli(tree: Path, **extra: str) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT), **extra)
    command = [sys.executable, "-c", KILLED_CLI, "--write", str(tree)]
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == -signal.SIGKILL, run.stderr


def test_staged_copies_of_a_run_killed_while_staging_are_removed_by_the_next_write(
    tmp_path, capsys
):
    target = write(tmp_path / "train.py", FSDP1_SOURCE)
    lookalike = write(tmp_path / ".train.py.abc123.fsdp2-port.tmp", "not the run's\n")
    killed_cli(tmp_path)
    staged = [p for p in tmp_path.iterdir() if p.name.startswith(".") and p != lookalike]
    assert len(staged) == 1 and staged[0].read_text() == FSDP2_SOURCE
    assert main(["--check", str(tmp_path)]) == 1, "nothing was replaced: the tree reads whole"
    assert staged[0].exists(), "--check changes nothing"
    assert main(["--write", str(tmp_path)]) == 0
    assert "removed the staged copies of an interrupted --write" in capsys.readouterr().err
    assert not staged[0].exists() and target.read_text() == FSDP2_SOURCE
    assert lookalike.read_text() == "not the run's\n", "a file the run did not create stays"


def test_a_journal_found_above_the_path_is_finished(tmp_path, capsys):
    first, second = (
        write(tmp_path / "a.py", FSDP1_SOURCE),
        write(tmp_path / "sub/b.py", FSDP1_SOURCE),
    )
    killed_cli(tmp_path, KILL_AT="2")  # after replacing a.py
    assert first.read_text() == FSDP2_SOURCE and second.read_text() == FSDP1_SOURCE
    assert main(["--write", str(tmp_path / "sub")]) == 0
    assert "finished an interrupted --write: 1 of 2 files" in capsys.readouterr().err
    assert first.read_text() == FSDP2_SOURCE and second.read_text() == FSDP2_SOURCE
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["a.py", "b.py"]
    assert not journals()


def test_owner_group_and_mode_are_kept(tmp_path, capsys):
    if os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")
    target = write(tmp_path / "train.py", FSDP1_SOURCE)
    os.chown(target, 12345, 23456)
    target.chmod(0o640)
    assert main(["--write", str(target)]) == 0
    status = target.stat()
    assert (status.st_uid, status.st_gid, stat.S_IMODE(status.st_mode)) == (12345, 23456, 0o640)
    assert target.read_text() == FSDP2_SOURCE
    assert [p.name for p in tmp_path.iterdir()] == ["train.py"], "copies of another user's file"


def test_hard_links_are_kept(tmp_path, capsys):
    target = write(tmp_path / "src" / "train.py", FSDP1_SOURCE)
    other = tmp_path / "elsewhere.py"
    os.link(target, other)
    inode = target.stat().st_ino
    assert main(["--write", str(target)]) == 0
    assert target.stat().st_ino == inode and target.stat().st_nlink == 2
    assert other.read_text() == FSDP2_SOURCE
    assert sorted(p.name for p in (tmp_path / "src").iterdir()) == ["train.py"]


def test_a_read_only_file_is_an_error_unless_forced(tmp_path, capsys):
    target = write(tmp_path / "train.py", FSDP1_SOURCE)
    neighbour = write(tmp_path / "z.py", FSDP1_SOURCE)
    target.chmod(0o444)
    assert main(["--write", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{target}: error: read-only" in err and "0 changed" in err
    assert target.read_text() == FSDP1_SOURCE and neighbour.read_text() == FSDP1_SOURCE
    assert main(["--write", "--force", str(tmp_path)]) == 0
    assert target.read_text() == FSDP2_SOURCE and neighbour.read_text() == FSDP2_SOURCE
    assert stat.S_IMODE(target.stat().st_mode) == 0o444


def test_a_symlinked_directory_named_is_followed(tmp_path, capsys):
    real = write(tmp_path / "real" / "train.py", FSDP1_SOURCE)
    (tmp_path / "link").symlink_to(real.parent)
    assert main(["--check", str(tmp_path / "link")]) == 1
    assert "1 file scanned" in capsys.readouterr().err


def test_an_unreadable_directory_is_an_error(tmp_path, capsys, monkeypatch):
    write(tmp_path / "ok.py", "x = 1\n")
    hidden = tmp_path / "secret"
    write(hidden / "train.py", FSDP1_SOURCE)
    real_scandir = os.scandir

    def scandir(path="."):
        if os.fspath(path) == str(hidden):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    assert main(["--check", str(tmp_path)]) == 2
    assert f"{hidden}: cannot read directory: Permission denied" in capsys.readouterr().err


def test_the_same_file_given_twice_is_read_once(tmp_path, capsys, monkeypatch):
    target = write(tmp_path / "train.py", FSDP1_SOURCE)
    monkeypatch.chdir(tmp_path)
    assert main(["--format", "json", "train.py", str(target), str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert "1 file scanned" in err
    assert len(json.loads(out)) == 2 + 1  # the two findings of one file, the summary


def test_json_and_jsonl_carry_errors(tmp_path, capsys):
    broken = write(
        tmp_path / "broken.py", "from torch.distributed.fsdp import (FullyShardedDataParallel,\n"
    )
    missing = str(tmp_path / "missing.py")
    assert main(["--format", "json", str(broken), missing]) == 2
    *records, summary = json.loads(capsys.readouterr().out)
    assert summary["summary"]["errors"] == 2
    assert {r["path"] for r in records} == {str(broken), missing}
    assert all(set(r) == {"path", "error"} for r in records)
    assert main(["--format", "jsonl", str(broken)]) == 2
    line, _ = capsys.readouterr().out.splitlines()  # the error, the summary
    assert json.loads(line)["error"].startswith("cannot parse")


def test_a_failed_write_is_not_counted_as_changed(tmp_path, capsys, monkeypatch):
    write(tmp_path / "a.py", FSDP1_SOURCE)

    def full(target, data, like):
        raise OSError(28, "No space left on device", target)

    monkeypatch.setattr(writes, "_stage", full)
    from fsdp2_port.codemods.engine import migrate_files
    from fsdp2_port.codemods.options import Options
    from fsdp2_port.codemods.registry import select

    (result,) = migrate_files([str(tmp_path / "a.py")], select([], []), Options(), write=True)
    assert result.error and "No space left" in result.error and not result.changed
    assert main(["--write", str(tmp_path)]) == 2
    assert "0 changed" in capsys.readouterr().err


def test_a_nul_byte_is_reported_with_its_position(tmp_path, capsys):
    target = tmp_path / "nul.py"
    target.write_bytes(b"from torch.distributed.fsdp import FullyShardedDataParallel\nx = 1\0\n")
    assert main([str(target)]) == 2
    err = capsys.readouterr().err
    assert "NUL byte (line 2, column 6)" in err and "None" not in err


#: A statement each Python here cannot parse that a later one can (3.12's ``type``, 3.14's
#: template strings).
_NEWER_SYNTAX = {(3, 11): "type Wrapped = FSDP\n", (3, 12): 'shown = t"{FSDP}"\n'}
_NEWER_SYNTAX[3, 13] = _NEWER_SYNTAX[3, 12]


def test_newer_python_syntax_says_so(tmp_path, capsys):
    newer = _NEWER_SYNTAX.get(sys.version_info[:2])
    if newer is None:
        pytest.skip("no syntax newer than this Python is known here")
    target = write(
        tmp_path / "new.py",
        "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n" + newer,
    )
    assert main([str(target)]) == 2
    err = capsys.readouterr().err
    assert f"needs a newer Python than {sys.version_info[0]}.{sys.version_info[1]}?" in err
