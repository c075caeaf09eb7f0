"""``fsdp2-port migrate`` on a tree nobody vouches for, raced by its user, short of resources.

The attacker's tests plant what a hostile checkout can hold (a journal, a symlink named like a
staged copy, a FIFO named like a source) in a sandbox tree beside an ``outside`` directory,
and check that nothing outside the tree changed, whatever the run. The user's tests edit files
while a run reads or writes them, or after it crashed, and check that no edit is lost. The
exhaustion tests fill the disk, ask for absurd worker counts, and close the output pipe.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import Executor
from pathlib import Path
from typing import ClassVar

import pytest
from codemod_samples import FSDP1_SOURCE, FSDP2_SOURCE, ROOT

from fsdp2_port.codemods import engine, writes
from fsdp2_port.codemods.cli import main


def env(**extra: str) -> dict[str, str]:
    """This process's environment (the test's state directory included) for a command."""
    return {**os.environ, "PYTHONPATH": str(ROOT), **extra}


USER_EDIT = "# the user's edit, saved meanwhile\n"

# The real CLI, killed (SIGKILL, no cleanup of any kind) the moment it is about to replace
# the $KILL_AT-th source file by rename; $PID_AS: the pid the run believes it has.
KILLED_CLI = """\
import os, signal, sys
from fsdp2_port.codemods.cli import main
count, real_replace, me = [0], os.replace, os.getpid()
def replace(source, target, *args, **kwargs):
    if str(target).endswith(".py"):
        count[0] += 1
        if count[0] == int(os.environ["KILL_AT"]):
            os.kill(me, signal.SIGKILL)
    return real_replace(source, target, *args, **kwargs)
os.replace = replace
if os.environ.get("PID_AS"):
    os.getpid = lambda: int(os.environ["PID_AS"])
sys.exit(main(sys.argv[1:]))
"""

# The real CLI with a pause after it staged its first copy; it touches $MARK then.
PAUSED_CLI = """\
import os, sys, time
from fsdp2_port.codemods import writes
real_stage, paused = writes._stage, []
def stage(*args, **kwargs):
    staged = real_stage(*args, **kwargs)
    if not paused:
        paused.append(1)
        open(os.environ["MARK"], "w").close()
        time.sleep(0.6)
    return staged
writes._stage = stage
from fsdp2_port.codemods.cli import main
sys.exit(main(sys.argv[1:]))
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def snapshot(root: Path, skip: Path | None = None) -> dict[str, tuple[str, bytes]]:
    """Every entry under ``root`` but ``skip``: its kind and bytes (a link's target)."""
    found = {}
    for path in sorted(root.rglob("*")):
        if skip is not None and (path == skip or skip in path.parents):
            continue
        if "__pycache__" in path.parts:
            continue
        if path.is_symlink():
            found[str(path.relative_to(root))] = ("link", os.readlink(path).encode())
        elif path.is_file():
            found[str(path.relative_to(root))] = ("file", path.read_bytes())
        elif path.is_dir():
            found[str(path.relative_to(root))] = ("dir", b"")
        else:
            found[str(path.relative_to(root))] = ("special", b"")
    return found


@pytest.fixture
def sandbox(tmp_path):
    """``(tree, outside)``: a tree holding one FSDP1 file and a directory beside it holding
    files an attacker would like changed, created or deleted."""
    tree, outside = tmp_path / "tree", tmp_path / "outside"
    write(tree / "train.py", FSDP1_SOURCE)
    write(outside / "victim.py", "precious = 1\n")
    write(outside / "third.txt", "also precious\n")
    return tree, outside


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# -- hostile inputs --------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [["--check"], [], ["--write"]], ids=["check", "diff", "write"])
def test_a_journal_planted_in_the_tree_changes_nothing_outside(sandbox, capsys, mode):
    tree, outside = sandbox
    before = snapshot(outside)
    write(tree / ".evil", "owned = True\n")
    write(tree / "evil2", "created = True\n")
    journal = {
        "fsdp2-port-journal": 1,
        "pid": 0,
        "host": "",
        "files": [
            # overwrite a file outside, "in place" (once skipped the edited-since check)
            {
                "path": "../outside/victim.py",
                "staged": ".evil",
                "old": "0",
                "new": _sha("owned = True\n"),
                "in_place": True,
            },
            # create one (a missing file's digest is null)
            {
                "path": str(outside / "created.py"),
                "staged": "evil2",
                "old": None,
                "new": _sha("created = True\n"),
                "in_place": False,
            },
            # delete a third, named as the staged copy of a file already "done"
            {
                "path": "train.py",
                "staged": "../outside/third.txt",
                "old": "0",
                "new": _sha(FSDP1_SOURCE),
                "in_place": False,
            },
        ],
    }
    write(tree / ".fsdp2-port-journal.json", json.dumps(journal))
    main([*mode, str(tree)])
    capsys.readouterr()
    assert snapshot(outside) == before, "the planted journal acted outside the tree"
    expected = FSDP2_SOURCE if mode == ["--write"] else FSDP1_SOURCE
    assert (tree / "train.py").read_text() == expected


@pytest.mark.parametrize("mode", [["--check"], ["--write"]], ids=["check", "write"])
def test_a_symlink_named_like_a_staged_copy_is_not_followed(sandbox, capsys, mode):
    tree, outside = sandbox
    link = tree / ".train.py.abc123.fsdp2-port.tmp"
    link.symlink_to(outside / "victim.py")
    (tree / ".x.py.def456.fsdp2-port.tmp").symlink_to(outside)
    before = snapshot(outside)
    main([*mode, str(tree)])
    capsys.readouterr()
    assert snapshot(outside) == before, "a file outside the tree was deleted"
    assert link.is_symlink(), "a file the run did not create was removed"


def test_a_symlinked_file_named_on_the_command_line_is_written_through(tmp_path, capsys):
    real = write(tmp_path / "real" / "train.py", FSDP1_SOURCE)
    link = tmp_path / "link.py"
    link.symlink_to(real)
    assert main(["--write", str(link)]) == 0
    assert link.is_symlink() and os.readlink(link) == str(real), "the link was replaced"
    assert real.read_text() == FSDP2_SOURCE


@pytest.mark.parametrize("named", [False, True], ids=["in-a-directory", "named"])
def test_a_fifo_named_like_a_source_is_skipped_and_named(tmp_path, named):
    tree = tmp_path / "tree"
    write(tree / "train.py", FSDP1_SOURCE)
    fifo = tree / "x.py"
    os.mkfifo(fifo)
    paths = [str(tree / "train.py"), str(fifo)] if named else [str(tree)]
    command = [sys.executable, "-m", "fsdp2_port", "migrate", "--check", *paths]
    # Opening a FIFO for reading blocks until someone writes: a run that opens it never ends.
    run = subprocess.run(command, env=env(), capture_output=True, text=True, timeout=60)
    assert run.returncode == 2, run.stderr
    assert f"{fifo}: not a regular file (a FIFO): skipped" in run.stderr
    assert "1 would change" in run.stderr, "the other file is still checked"


def test_a_device_named_like_a_source_is_never_read(tmp_path):
    zero = tmp_path / "zero.py"
    zero.symlink_to("/dev/zero")  # read to its end, it never ends
    command = [sys.executable, "-m", "fsdp2_port", "migrate", "--check", str(zero)]
    run = subprocess.run(command, env=env(), capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert f"{zero}: not a regular file (a character device): skipped" in run.stderr


# -- races with the user -----------------------------------------------------------------------


def test_an_edit_saved_while_the_run_analyses_is_kept(tmp_path, capsys, monkeypatch):
    """The run reads both files, then the user saves one: nothing of the run is written, the
    edit stays, and the message names the file."""
    first = write(tmp_path / "a.py", FSDP1_SOURCE)
    second = write(tmp_path / "b.py", FSDP1_SOURCE)
    real = engine.decide

    def decide_while_the_user_saves(*args, **kwargs):
        with first.open("a") as handle:
            handle.write(USER_EDIT)
        return real(*args, **kwargs)

    monkeypatch.setattr(engine, "decide", decide_while_the_user_saves)
    assert main(["--write", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert first.read_text() == FSDP1_SOURCE + USER_EDIT, "the user's edit was lost"
    assert second.read_text() == FSDP1_SOURCE, "a file of the group was written anyway"
    assert f"{first} changed since the run read it" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.py", "b.py"], "leftovers"


def test_an_edit_saved_while_the_run_replaces_files_is_kept(tmp_path, capsys, monkeypatch):
    """The user saves b.py (atomically, as editors do) while the run replaces a.py."""
    first = write(tmp_path / "a.py", FSDP1_SOURCE)
    second = write(tmp_path / "b.py", FSDP1_SOURCE)
    real, saved = os.replace, []

    def replace(source, target, *args, **kwargs):
        if str(target).endswith(".py") and not saved:
            saved.append(1)
            write(tmp_path / "b.py.swp", FSDP1_SOURCE + USER_EDIT)
            real(tmp_path / "b.py.swp", second)
        return real(source, target, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    assert main(["--write", str(tmp_path)]) == 2
    capsys.readouterr()
    assert second.read_text() == FSDP1_SOURCE + USER_EDIT, "the user's edit was lost"
    assert first.read_text() == FSDP1_SOURCE, "half of the run stayed written"


def _killed(tree: Path, kill_at: int, **extra: str) -> None:
    """A ``--write`` over ``tree`` killed at its ``kill_at``-th replace by rename."""
    run = subprocess.run(
        [sys.executable, "-c", KILLED_CLI, "--write", str(tree)],
        env=env(KILL_AT=str(kill_at), **extra),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == -signal.SIGKILL, run.stderr


def test_an_edit_after_a_crash_is_kept_by_the_rerun(tmp_path, capsys):
    """A run dies mid-write; the user edits the hard-linked file (written in place) before
    rerunning: the rerun must not write over the edit."""
    tree = tmp_path / "tree"
    write(tree / "a.py", FSDP1_SOURCE)
    linked = write(tree / "b.py", FSDP1_SOURCE)
    os.link(linked, tmp_path / "elsewhere.py")
    _killed(tree, kill_at=1)
    edited = linked.read_text() + USER_EDIT
    linked.write_text(edited)
    assert main(["--write", str(tree)]) == 2
    err = capsys.readouterr().err
    assert linked.read_text() == edited and (tmp_path / "elsewhere.py").read_text() == edited
    assert f"{linked} was edited since" in err


@pytest.mark.parametrize("replaced", [0, 1])
def test_check_never_writes_after_an_interrupted_run(tmp_path, capsys, replaced):
    """A run dies after replacing ``replaced`` of its two files (then the user restores the
    one replaced): a plain diff and --check report the unfinished run and change nothing."""
    tree = tmp_path / "tree"
    first = write(tree / "a.py", FSDP1_SOURCE)
    second = write(tree / "b.py", FSDP1_SOURCE)
    _killed(tree, kill_at=replaced + 1)
    assert first.read_text() == (FSDP2_SOURCE if replaced else FSDP1_SOURCE)
    assert second.read_text() == FSDP1_SOURCE
    first.write_text(FSDP1_SOURCE)  # git checkout a.py
    before = snapshot(tmp_path)
    for mode in (["--check"], []):
        assert main([*mode, str(tree)]) == 2
        assert "rerun with --write to finish it" in capsys.readouterr().err
        assert snapshot(tmp_path) == before, f"{mode or 'a diff'} changed the tree"


def test_a_check_while_a_write_stages_leaves_the_writer_alone(tmp_path, capsys):
    tree, mark = tmp_path / "tree", tmp_path / "mark"
    write(tree / "a.py", FSDP1_SOURCE)
    write(tree / "b.py", FSDP1_SOURCE)
    writer = subprocess.Popen(
        [sys.executable, "-c", PAUSED_CLI, "--write", str(tree)],
        env=env(MARK=str(mark)),
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not mark.exists() and writer.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    assert main(["--check", str(tree)]) in (1, 2)
    _, err = writer.communicate(timeout=60)
    assert writer.returncode == 0, err
    assert [p.read_text() for p in sorted(tree.iterdir())] == [FSDP2_SOURCE, FSDP2_SOURCE]
    assert main(["--check", str(tree)]) == 0


def test_a_dead_runs_journal_whose_pid_is_now_another_process_does_not_block(tmp_path, capsys):
    tree = tmp_path / "tree"
    write(tree / "a.py", FSDP1_SOURCE)
    write(tree / "b.py", FSDP1_SOURCE)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        _killed(tree, kill_at=2, PID_AS=str(other.pid))  # the pid the dead run had
        assert main(["--write", str(tree)]) == 0, capsys.readouterr().err
    finally:
        other.kill()
        other.wait()
    assert [p.read_text() for p in sorted(tree.glob("*.py"))] == [FSDP2_SOURCE] * 2
    assert sorted(p.name for p in tree.iterdir()) == ["a.py", "b.py"]


# -- resource exhaustion and the file system ---------------------------------------------------


# Its migration is longer than itself (the markers): an in-place write of it needs more room.
GROWING = """\
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def wrap(model):
    m = FSDP(model)
    m._handle.flat_param.grad = None
    return m
"""


def test_disk_full_while_writing_a_hard_linked_file_leaves_every_file_whole(
    tmp_path, capsys, monkeypatch
):
    """Room for the staged copies, none left when the hard-linked file (written in place to
    keep its links) grows past its old end."""
    tree = tmp_path / "tree"
    plain = write(tree / "a.py", GROWING)
    linked = write(tree / "b.py", GROWING)
    os.link(linked, tmp_path / "elsewhere.py")

    class Full:
        """An open file on a full disk: what would go past its size at opening fails."""

        def __init__(self, handle):
            self._handle, self._room = handle, os.fstat(handle.fileno()).st_size

        def write(self, data):
            fits = max(0, self._room - self._handle.tell())
            self._handle.write(data[:fits])
            if fits < len(data):
                self._handle.flush()
                raise OSError(errno.ENOSPC, "No space left on device", self._handle.name)
            return len(data)

        def __getattr__(self, name):
            return getattr(self._handle, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self._handle.close()

    def full_open(file, mode="r", *args, **kwargs):
        handle = open(file, mode, *args, **kwargs)  # noqa: SIM115 (closed by its caller)
        return Full(handle) if "+" in mode and os.fspath(file) == str(linked) else handle

    monkeypatch.setattr(writes, "open", full_open, raising=False)
    assert main(["--write", str(tree)]) == 2
    err = capsys.readouterr().err
    assert "No space left on device" in err and "Traceback" not in err
    assert linked.read_text() == GROWING, "the hard-linked file is torn"
    assert plain.read_text() == GROWING, "the run was half written"
    assert sorted(p.name for p in tree.iterdir()) == ["a.py", "b.py"], "leftovers"
    monkeypatch.delattr(writes, "open")
    assert main(["--write", str(tree)]) == 0, "once there is room, a rerun writes it all"
    migrated = (tmp_path / "elsewhere.py").read_text()
    assert migrated == plain.read_text() and "TODO(fsdp2-port)" in migrated


def test_a_read_only_common_parent_does_not_block_writable_files(tmp_path, capsys, monkeypatch):
    """Files in two writable directories under one where nothing can be created (as a
    read-only directory is for a user other than root)."""
    top = tmp_path / "top"
    first = write(top / "a" / "x.py", FSDP1_SOURCE)
    second = write(top / "b" / "y.py", FSDP1_SOURCE)
    real = os.open

    def no_new_files_in_top(path, flags, *args, **kwargs):
        if flags & os.O_CREAT and os.path.dirname(os.path.abspath(path)) == str(top):
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", no_new_files_in_top)
    assert main(["--write", str(first), str(second)]) == 0, capsys.readouterr().err
    assert first.read_text() == FSDP2_SOURCE and second.read_text() == FSDP2_SOURCE


class _Inline(Executor):
    """An executor that records how many workers it was asked for and runs in this process,
    as its one worker (its ``initializer`` runs here)."""

    asked: ClassVar[list[int]] = []

    def __init__(self, max_workers: int, initializer=None, initargs=()) -> None:
        self.asked.append(max_workers)
        self._max_workers = max_workers
        if initializer is not None:
            initializer(*initargs)

    def map(self, fn, *iterables, timeout=None, chunksize=1):
        return map(fn, *iterables)


def test_jobs_are_capped_by_the_files_and_the_cpus(tmp_path, capsys, monkeypatch):
    write(tmp_path / "a.py", FSDP1_SOURCE)
    write(tmp_path / "b.py", FSDP1_SOURCE)
    monkeypatch.setattr(engine, "ProcessPoolExecutor", _Inline)
    monkeypatch.setattr(engine, "_RUN_OF_WORKER", None)  # what the inline worker sets
    _Inline.asked = []
    assert main(["--check", "--jobs", "100000", str(tmp_path)]) == 1
    assert _Inline.asked and max(_Inline.asked) <= min(2, os.cpu_count() or 1)


def test_a_cr_only_file_that_needs_a_marker_keeps_its_line_ends(tmp_path, capsys):
    source = (
        "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\r\r"
        "def f(model):\r    m = FSDP(model)\r    m._handle.reshard(True)\r"
        "    m._handle.flat_param.grad = None\r    return m\r"
    )
    target = tmp_path / "cr.py"
    target.write_bytes(source.encode())
    assert main(["--check", str(target)]) == 1
    assert main(["--write", str(target)]) == 0
    written = target.read_bytes()
    assert b"\n" not in written and b"# TODO(fsdp2-port): F2P010" in written
    compile(written, str(target), "exec")


def test_a_closed_standard_output_exits_quietly(tmp_path):
    for index in range(3):
        write(tmp_path / f"t{index}.py", FSDP1_SOURCE)
    for args in (["migrate", str(tmp_path)], ["migrate", "--list-rules"]):
        process = subprocess.Popen(
            [sys.executable, "-m", "fsdp2_port", *args],
            env=env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert process.stdout is not None
        process.stdout.close()  # `| head -0`: the reader is gone before anything is written
        _, err = process.communicate(timeout=60)
        assert process.returncode == 141, err
        assert "Traceback" not in err and "BrokenPipe" not in err


def test_a_state_directory_others_can_write_is_not_used(tmp_path, capsys, monkeypatch):
    """Another user could plant a journal there: the run refuses to keep its own in it."""
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    monkeypatch.setenv("FSDP2_PORT_STATE_DIR", str(shared))
    target = write(tmp_path / "tree" / "train.py", FSDP1_SOURCE)
    assert main(["--write", str(target)]) == 2
    assert "no one else can write" in capsys.readouterr().err
    assert target.read_text() == FSDP1_SOURCE and list(shared.iterdir()) == []


def test_standard_output_appended_to_a_file_of_the_run_is_refused(tmp_path):
    target = write(tmp_path / "train.py", FSDP1_SOURCE)
    with target.open("a") as out:
        run = subprocess.run(
            [sys.executable, "-m", "fsdp2_port", "migrate", "--format", "json", str(tmp_path)],
            env=env(),
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    assert run.returncode == 2 and "standard output is" in run.stderr
    assert target.read_text() == FSDP1_SOURCE


def test_two_hard_links_to_one_file_in_the_run_are_written_once(tmp_path, capsys):
    first = write(tmp_path / "a.py", FSDP1_SOURCE)
    os.link(first, tmp_path / "b.py")
    assert main(["--write", str(tmp_path)]) == 0, capsys.readouterr().err
    assert first.read_text() == FSDP2_SOURCE and (tmp_path / "b.py").stat().st_nlink == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.py", "b.py"]


def test_a_journal_naming_a_path_outside_its_tree_is_never_replayed(sandbox, capsys):
    """Even in the state directory (only this user can write there), a journal is checked
    when read: an entry that leaves its tree makes it unreadable, and nothing is replayed."""
    tree, outside = sandbox
    before = snapshot(outside)
    (tree / ".victim.py.0123456789abcdef.fsdp2-port.tmp").write_text("owned = True\n")
    entry = {
        "path": "../outside/victim.py",
        "staged": ".victim.py.0123456789abcdef.fsdp2-port.tmp",
        "backup": ".victim.py.0123456789abcdef.old.fsdp2-port.tmp",
        "old": _sha("precious = 1\n"),
        "new": _sha("owned = True\n"),
        "in_place": False,
    }
    record = {
        "fsdp2-port-journal": 2,
        "root": str(tree.resolve()),
        "token": "0123456789abcdef",
        "phase": "replacing",
        "pid": 0,
        "host": "",
        "files": [entry],
    }
    state = Path(os.environ["FSDP2_PORT_STATE_DIR"])
    (state / "0123456789abcdef.json").write_text(json.dumps(record))
    assert main(["--write", str(tree)]) == 0
    assert "unreadable journal of a run, ignored" in capsys.readouterr().err
    assert snapshot(outside) == before
