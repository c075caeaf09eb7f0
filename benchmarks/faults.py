"""Faults and bad input against the real ``fsdp2-port migrate`` CLI, each in a temp dir, and
against the runtime: the optimizers, their loads, ``convert-checkpoint``, ``compare`` and
``verify``.

    python benchmarks/faults.py [--seed N] [--kills N]

Prints one line per case (``ok`` or ``FAIL``, its name, what was seen) and then
``N faults and bad inputs tried, M handled``, and writes the ``faults`` block of
``benchmarks/RESULTS.md``. A codemod case is handled when the tree ends as
the original or the clean migration (never between) once the next ``--write`` has run,
``--check`` in between changed nothing, no staged copy or journal is left, and the error, if
any, is named with exit code 2; a hostile input (a planted journal, links named like staged
copies, a FIFO) changes nothing outside the tree; a file the user changes while a run reads or
writes it keeps the user's bytes, and the run writes nothing; a full disk leaves every file
whole. A runtime case (``Runtime``) is handled when the bad value is refused with a ValueError
naming it, a refused load leaves the optimizer bitwise as it was, a CLI exits with its
documented code, one line on standard error and one JSON object, a signal leaves no process
of the run in /proc, a checkpoint's pickle runs no code, an output never lands on an input,
and ``compare`` reads any amount of output in bounded memory.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import pickle
import random
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from io import StringIO
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import results_md

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "tests" / "codemods" / "fixtures" / "whole_models" / "untied.in"
FSDP1 = (
    "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n\n\n"
    "def wrap(model):\n    return FSDP(model)\n"
)
ENV = dict(os.environ, PYTHONPATH=str(ROOT))
#: where ``migrate --write`` keeps its journals: a fresh directory per case (``main``)
STATE = "FSDP2_PORT_STATE_DIR"
USER_EDIT = "# the user's edit, saved meanwhile\n"
# The real CLI, with faults injected by environment variables: MARK: writes slowed (so that a
# signal lands inside the write phase), MARK touched when the write phase starts; DENY: a
# directory whose listing fails; KILL_AT: SIGKILL as the KILL_AT-th file is about to be
# replaced by rename; PID_AS: the pid the run believes it has; EDIT / DELETE: the user
# appends $USER_EDIT to / deletes that file once the run has read everything; SAVE: the user
# saves that file (atomically) while the run replaces another; FULL: the disk is full past
# that file's size when it is opened for an in-place write; NO_CREATE_IN: no file can be
# created in that directory (as in a read-only one); KILL_STAGED: SIGKILL once the first copy
# is staged; PAUSE: a pause of 1.5 s after the first copy is staged, PAUSE touched then.
WRAPPED = """\
import errno, os, signal, sys, time
from fsdp2_port.codemods import engine, writes
env, me = os.environ.get, os.getpid()
real_stage, real_replace, real_open, real_os_open = writes._stage, os.replace, open, os.open
if env("MARK"):
    def stage(*args):
        open(env("MARK"), "a").close()
        time.sleep(0.01)
        return real_stage(*args)
    def replace(*args):
        time.sleep(0.02)
        return real_replace(*args)
    writes._stage, os.replace = stage, replace
if env("DENY"):
    real_scandir = os.scandir
    def scandir(path="."):
        if os.fspath(path) == env("DENY"):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_scandir(path)
    os.scandir = scandir
if env("KILL_AT") or env("SAVE"):
    count = [0]
    def rename(source, target):
        if str(target).endswith(".py"):
            count[0] += 1
            if str(count[0]) == env("KILL_AT"):
                os.kill(me, signal.SIGKILL)
            if count[0] == 1 and env("SAVE"):
                with real_open(env("SAVE") + ".swp", "w") as f:
                    f.write(real_open(env("SAVE")).read() + env("USER_EDIT"))
                real_replace(env("SAVE") + ".swp", env("SAVE"))
        return real_replace(source, target)
    os.replace = rename
if env("PID_AS"):
    os.getpid = lambda: int(env("PID_AS"))
if env("EDIT") or env("DELETE"):
    real_decide = engine.decide
    def decide(*args, **kwargs):
        if env("EDIT"):
            with open(env("EDIT"), "a") as f:
                f.write(env("USER_EDIT"))
        else:
            os.unlink(env("DELETE"))
        return real_decide(*args, **kwargs)
    engine.decide = decide
if env("FULL"):
    class Full:
        def __init__(self, handle):
            self.handle, self.room = handle, os.fstat(handle.fileno()).st_size
        def write(self, data):
            fits = max(0, self.room - self.handle.tell())
            self.handle.write(data[:fits])
            if fits < len(data):
                self.handle.flush()
                raise OSError(errno.ENOSPC, "No space left on device", self.handle.name)
            return len(data)
        def __getattr__(self, name):
            return getattr(self.handle, name)
        def __enter__(self):
            return self
        def __exit__(self, *exc):
            self.handle.close()
    def full_open(file, mode="r", *args, **kwargs):
        handle = real_open(file, mode, *args, **kwargs)
        return Full(handle) if "+" in mode and os.fspath(file) == env("FULL") else handle
    writes.open = full_open
if env("NO_CREATE_IN"):
    def guarded(path, flags, *args, **kwargs):
        if flags & os.O_CREAT and os.path.dirname(os.path.abspath(path)) == env("NO_CREATE_IN"):
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real_os_open(path, flags, *args, **kwargs)
    os.open = guarded
if env("KILL_STAGED"):
    def killed(*args):
        real_stage(*args)
        os.kill(me, signal.SIGKILL)
    writes._stage = killed
if env("PAUSE"):
    def paused(*args):
        staged = real_stage(*args)
        if not os.path.exists(env("PAUSE")):
            open(env("PAUSE"), "w").close()
            time.sleep(1.5)
        return staged
    writes._stage = paused
from fsdp2_port.codemods.cli import main
sys.exit(main(sys.argv[1:]))
"""
# Its migration is longer than itself (markers): an in-place write of it needs more room.
GROWING = (
    "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n\n\n"
    "def wrap(model):\n    m = FSDP(model)\n    m._handle.flat_param.grad = None\n    return m\n"
)


def wrapped(*args: str, **faults: str) -> subprocess.CompletedProcess[str]:
    """The CLI under ``WRAPPED`` with ``faults`` (see there)."""
    return subprocess.run(
        [sys.executable, "-c", WRAPPED, *args],
        env={**ENV, "USER_EDIT": USER_EDIT, **faults},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _replacing() -> bool:
    """Whether a run of this case has a journal that is replacing files."""
    for journal in Path(ENV[STATE]).glob("*.json"):
        with contextlib.suppress(OSError, ValueError):
            if json.loads(journal.read_text())["phase"] == "replacing":
                return True
    return False


def cli(*args: str, cwd: Path | None = None, **kwargs) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "fsdp2_port", "migrate", *args]
    env = kwargs.pop("env", ENV)
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, **kwargs)


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


class Cases:
    """Each case returns ``(handled, what was seen)``; ``self.work`` is a fresh temp dir."""

    def __init__(self, seed: int, kills: int) -> None:
        self.random = random.Random(seed)
        self.kills = kills
        reference = Path(tempfile.mkdtemp(prefix="faults-ref-"))
        shutil.copytree(PACKAGE, reference / "tree")
        self.original = snapshot(reference / "tree")
        cli("--write", str(reference / "tree"), check=True)
        self.migrated = snapshot(reference / "tree")
        shutil.rmtree(reference)
        self.work = Path()

    def all(self) -> list[tuple[str, Callable[[], tuple[bool, str]]]]:
        cases: list[tuple[str, Callable[[], tuple[bool, str]]]] = []
        for _ in range(self.kills):
            delay = self.random.uniform(0.0, 0.2)
            cases.append(
                (
                    f"SIGKILL {delay * 1000:.0f} ms into --write (package, one file hard-linked)",
                    lambda delay=delay: self.interrupted(signal.SIGKILL, delay),
                )
            )
        cases += [
            ("SIGINT (Ctrl-C) once the journal exists", lambda: self.interrupted(signal.SIGINT)),
            ("SIGTERM once the journal exists", lambda: self.interrupted(signal.SIGTERM)),
            ("SIGINT while staging", lambda: self.interrupted(signal.SIGINT, 0.0)),
            ("staged copy left by a run killed while staging", self.stale_copy),
            ("journal whose staged copy was deleted", self.broken_journal),
            ("file size limit hit while staging (EFBIG)", self.file_too_big),
            ("owner, group and mode 0640 of a file", self.owner),
            ("hard-linked file", self.hard_link),
            ("read-only file without, then with --force", self.read_only),
            ("symlinked directory named on the command line", self.symlinked_dir),
            ("unreadable subdirectory (EACCES injected)", self.unreadable_dir),
            ("same file given relative, absolute and by its directory", self.duplicates),
            ("--format json with an unparseable file", lambda: self.json_error("json")),
            ("--format jsonl with an unparseable file", lambda: self.json_error("jsonl")),
            ("missing path", self.missing),
            ("NUL byte in a file", self.nul),
            ("Python 3.12 syntax (type alias)", self.newer_syntax),
            ("undecodable bytes", self.undecodable),
            ("rerun over a half-written tree with no journal", self.half_written),
            # hostile inputs
            *[
                (f"journal planted in the tree, then {m or 'a diff'}", lambda m=m: self.planted(m))
                for m in ("--check", "", "--write")
            ],
            ("symlinks named like staged copies, pointing outside", self.staged_lookalikes),
            ("symlink in the tree to a file outside it", self.link_out),
            ("symlinked file named on the command line", self.symlinked_file),
            ("FIFO named x.py in the tree", self.fifo),
            ("character device named on the command line", self.device),
            ("CR-only line ends where a marker goes", self.cr_only),
            ("state directory others can write", self.shared_state),
            # races with the user
            ("edit saved while the run analyses", self.edited),
            ("file deleted while the run analyses", self.deleted),
            ("edit saved while the run replaces another file", self.saved_meanwhile),
            ("crash, then the user edits the hard-linked file, then --write", self.crash_edit),
            ("crash, then --check and a diff", self.crash_check),
            ("--check while a --write stages", self.check_during_write),
            ("dead run's journal, its pid now another live process's", self.pid_reused),
            ("standard output appended to a file of the run", self.stdout_onto_input),
            # resource exhaustion
            ("disk full during the in-place write of a hard-linked file", self.disk_full),
            ("common parent where nothing can be created", self.read_only_parent),
            ("--jobs 100000 over 2 files", self.many_jobs),
            ("standard output closed at once (| head -0)", self.closed_pipe),
        ]
        return cases

    def sandbox(self) -> tuple[Path, Path, dict[str, bytes]]:
        """``(tree, outside, outside's snapshot)``: a tree with one FSDP1 file, and files
        beside it an attacker would like changed, created or deleted."""
        tree, outside = self.work / "tree", self.work / "outside"
        tree.mkdir()
        outside.mkdir()
        (tree / "train.py").write_text(FSDP1)
        (outside / "victim.py").write_text("precious = 1\n")
        (outside / "third.txt").write_text("also precious\n")
        return tree, outside, snapshot(outside)

    def planted(self, mode: str) -> tuple[bool, str]:
        tree, outside, before = self.sandbox()
        (tree / ".evil").write_text("owned = True\n")
        (tree / "evil2").write_text("created = True\n")

        def sha(text: str) -> str:
            return hashlib.sha256(text.encode()).hexdigest()

        entries = [
            ("../outside/victim.py", ".evil", "0", sha("owned = True\n"), True),
            (str(outside / "created.py"), "evil2", None, sha("created = True\n"), False),
            ("train.py", "../outside/third.txt", "0", sha(FSDP1), False),
        ]
        files = [dict(zip(("path", "staged", "old", "new", "in_place"), e)) for e in entries]
        record = {"fsdp2-port-journal": 1, "pid": 0, "host": "", "files": files}
        (tree / ".fsdp2-port-journal.json").write_text(json.dumps(record))
        run = cli(*[m for m in (mode,) if m], str(tree))
        return snapshot(outside) == before, f"exit {run.returncode}, nothing outside changed"

    def staged_lookalikes(self) -> tuple[bool, str]:
        tree, outside, before = self.sandbox()
        (tree / ".train.py.abc123.fsdp2-port.tmp").symlink_to(outside / "victim.py")
        (tree / ".x.py.def456.fsdp2-port.tmp").symlink_to(outside)
        codes = [cli(mode, str(tree)).returncode for mode in ("--check", "--write")]
        ok = snapshot(outside) == before and (tree / ".train.py.abc123.fsdp2-port.tmp").is_symlink()
        return ok, f"exits {codes}, links and their targets untouched"

    def link_out(self) -> tuple[bool, str]:
        tree, outside, _ = self.sandbox()
        (outside / "victim.py").write_text(FSDP1)
        before = snapshot(outside)
        (tree / "inside.py").symlink_to(outside / "victim.py")
        run = cli("--write", str(tree))
        ok = run.returncode == 0 and snapshot(outside) == before
        return ok and "fully_shard" in (tree / "train.py").read_text(), "the link is not followed"

    def symlinked_file(self) -> tuple[bool, str]:
        (self.work / "real").mkdir()
        real, link = self.work / "real" / "train.py", self.work / "link.py"
        real.write_text(FSDP1)
        link.symlink_to(real)
        run = cli("--write", str(link))
        ok = run.returncode == 0 and link.is_symlink() and "fully_shard" in real.read_text()
        return ok, "the link kept, its target written"

    def fifo(self) -> tuple[bool, str]:
        (self.work / "train.py").write_text(FSDP1)
        os.mkfifo(self.work / "x.py")
        run = cli("--check", str(self.work), timeout=60)
        ok = run.returncode == 2 and "x.py: not a regular file (a FIFO): skipped" in run.stderr
        return ok and "1 would change" in run.stderr, run.stderr.splitlines()[0][-50:]

    def device(self) -> tuple[bool, str]:
        (self.work / "zero.py").symlink_to("/dev/zero")
        run = cli("--check", str(self.work / "zero.py"), timeout=60)
        ok = run.returncode == 2 and "(a character device): skipped" in run.stderr
        return ok, run.stderr.splitlines()[0][-50:]

    def cr_only(self) -> tuple[bool, str]:
        target = self.work / "cr.py"
        target.write_bytes(GROWING.replace("\n", "\r").encode())
        run = cli("--write", str(target))
        data = target.read_bytes()
        ok = run.returncode == 0 and b"\n" not in data and b"# TODO(fsdp2-port)" in data
        return ok, f"exit {run.returncode}, markers end in CR"

    def shared_state(self) -> tuple[bool, str]:
        shared = self.work / "shared"
        shared.mkdir()
        shared.chmod(0o777)
        (self.work / "train.py").write_text(FSDP1)
        run = cli("--write", str(self.work / "train.py"), env={**ENV, STATE: str(shared)})
        ok = run.returncode == 2 and "no one else can write" in run.stderr
        return ok and not list(shared.iterdir()), f"exit {run.returncode}, nothing kept there"

    def _two(self) -> tuple[Path, Path]:
        (self.work / "tree").mkdir()
        first, second = self.work / "tree" / "a.py", self.work / "tree" / "b.py"
        first.write_text(FSDP1)
        second.write_text(FSDP1)
        return first, second

    def edited(self) -> tuple[bool, str]:
        first, second = self._two()
        run = wrapped("--write", str(first.parent), EDIT=str(first))
        ok = run.returncode == 2 and "changed since the run read it" in run.stderr
        ok = ok and first.read_text() == FSDP1 + USER_EDIT and second.read_text() == FSDP1
        return ok, f"exit {run.returncode}, the edit kept, nothing written"

    def deleted(self) -> tuple[bool, str]:
        first, second = self._two()
        run = wrapped("--write", str(first.parent), DELETE=str(first))
        ok = run.returncode == 2 and not first.exists() and second.read_text() == FSDP1
        return ok, f"exit {run.returncode}, the file not written back, nothing written"

    def saved_meanwhile(self) -> tuple[bool, str]:
        first, second = self._two()
        run = wrapped("--write", str(first.parent), SAVE=str(second))
        ok = run.returncode == 2 and second.read_text() == FSDP1 + USER_EDIT
        ok = ok and first.read_text() == FSDP1
        return ok, f"exit {run.returncode}, the save kept, the replaced file put back"

    def crash_edit(self) -> tuple[bool, str]:
        first, second = self._two()
        os.link(second, self.work / "elsewhere.py")
        wrapped("--write", str(first.parent), KILL_AT="1")
        edited = second.read_text() + USER_EDIT
        second.write_text(edited)
        run = cli("--write", str(first.parent))
        ok = run.returncode == 2 and "was edited since" in run.stderr
        ok = ok and (self.work / "elsewhere.py").read_text() == edited
        return ok, f"exit {run.returncode}, the edit kept, the journal too"

    def crash_check(self) -> tuple[bool, str]:
        first, _ = self._two()
        wrapped("--write", str(first.parent), KILL_AT="1")
        before = snapshot(self.work)
        codes = [cli(*m, str(first.parent)).returncode for m in (["--check"], [])]
        ok = codes == [2, 2] and snapshot(self.work) == before
        return ok, f"exits {codes}, nothing written"

    def check_during_write(self) -> tuple[bool, str]:
        first, second = self._two()
        pause = self.work / "paused"
        writer = subprocess.Popen(
            [sys.executable, "-c", WRAPPED, "--write", str(first.parent)],
            env={**ENV, "PAUSE": str(pause)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 60
        while not pause.exists() and writer.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        check = cli("--check", str(first.parent))
        writer.communicate(timeout=60)
        ok = writer.returncode == 0 and check.returncode in (1, 2)
        ok = ok and "fully_shard" in first.read_text() + second.read_text()
        return ok, f"--check exit {check.returncode}, the writer finished"

    def pid_reused(self) -> tuple[bool, str]:
        first, _ = self._two()
        other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        try:
            wrapped("--write", str(first.parent), KILL_AT="2", PID_AS=str(other.pid))
            run = cli("--write", str(first.parent))
        finally:
            other.kill()
            other.wait()
        return run.returncode == 0, f"exit {run.returncode}: {run.stderr.splitlines()[0][-60:]}"

    def stdout_onto_input(self) -> tuple[bool, str]:
        target = self.work / "train.py"
        target.write_text(FSDP1)
        with target.open("a") as out:
            run = subprocess.run(
                [sys.executable, "-m", "fsdp2_port", "migrate", "--format", "json", str(target)],
                env=ENV,
                stdout=out,
                stderr=subprocess.PIPE,
                text=True,
            )
        ok = run.returncode == 2 and target.read_text() == FSDP1
        return ok, run.stderr.strip()[-60:]

    def disk_full(self) -> tuple[bool, str]:
        tree = self.work / "tree"
        tree.mkdir()
        for name in ("a.py", "b.py"):
            (tree / name).write_text(GROWING)
        os.link(tree / "b.py", self.work / "elsewhere.py")
        run = wrapped("--write", str(tree), FULL=str(tree / "b.py"))
        whole = all((tree / n).read_text() == GROWING for n in ("a.py", "b.py"))
        left = sorted(p.name for p in tree.iterdir())
        ok = run.returncode == 2 and whole and left == ["a.py", "b.py"]
        ok = ok and "No space left" in run.stderr and "Traceback" not in run.stderr
        rerun = cli("--write", str(tree))
        ok = ok and rerun.returncode == 0 and "TODO" in (self.work / "elsewhere.py").read_text()
        return ok, f"exit {run.returncode}, every file whole; with room, exit {rerun.returncode}"

    def read_only_parent(self) -> tuple[bool, str]:
        top = self.work / "top"
        for sub in ("a", "b"):
            (top / sub).mkdir(parents=True)
            (top / sub / "x.py").write_text(FSDP1)
        files = [str(top / "a" / "x.py"), str(top / "b" / "x.py")]
        run = wrapped("--write", *files, NO_CREATE_IN=str(top))
        ok = run.returncode == 0 and all("fully_shard" in Path(f).read_text() for f in files)
        return ok, f"exit {run.returncode}"

    def many_jobs(self) -> tuple[bool, str]:
        self._two()
        start = time.monotonic()
        run = cli("--check", "--jobs", "100000", str(self.work / "tree"), timeout=60)
        took = time.monotonic() - start
        return run.returncode == 1 and took < 30, f"exit {run.returncode} in {took:.1f} s"

    def closed_pipe(self) -> tuple[bool, str]:
        self._two()
        process = subprocess.Popen(
            [sys.executable, "-m", "fsdp2_port", "migrate", str(self.work / "tree")],
            env=ENV,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert process.stdout is not None
        process.stdout.close()
        _, err = process.communicate(timeout=60)
        ok = process.returncode == 141 and "Traceback" not in err
        return ok, f"exit {process.returncode}, {len(err.splitlines())} lines on stderr"

    def package(self) -> Path:
        tree = self.work / "tree"
        shutil.copytree(PACKAGE, tree)
        return tree

    def consistent(self, tree: Path) -> str | None:
        """Why the tree is not the original or the clean migration with no leftovers."""
        state = snapshot(tree)
        if state == self.migrated:
            return None
        if state == self.original:
            return None
        return "between: " + ", ".join(k for k in state if state[k] != self.migrated.get(k))

    def interrupted(self, sig: int, delay: float | None = None) -> tuple[bool, str]:
        tree, mark = self.package(), self.work / "mark"
        outside = self.work / "link.py"
        os.link(tree / "pkg" / "base.py", outside)
        env = dict(ENV, MARK=str(mark))
        process = subprocess.Popen(
            [sys.executable, "-c", WRAPPED, "--write", str(tree)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while process.poll() is None and time.monotonic() < deadline:
            if (mark.exists() and delay is not None) or _replacing():
                break
            time.sleep(0.001)
        time.sleep(delay or 0.0)
        process.send_signal(sig)
        process.wait(timeout=60)
        after = snapshot(tree)
        torn = [
            k
            for k, v in after.items()
            if k.endswith(".py") and v not in (self.original[k], self.migrated[k])
        ]
        if torn:
            return False, f"torn files {torn}"
        seen = (
            "mixed"
            if {k: v for k, v in after.items() if k.endswith(".py")}
            not in (self.original, self.migrated)
            else "whole"
        )
        check = cli("--check", str(tree))
        if snapshot(tree) != after:
            return False, "--check changed the interrupted tree"
        if seen == "mixed" and check.returncode != 2:
            return False, f"--check on a half-written tree: exit {check.returncode}"
        rerun = cli("--write", str(tree))
        if rerun.returncode != 0 or snapshot(tree) != self.migrated:
            return False, f"rerun exit {rerun.returncode}: {rerun.stderr[-200:]}"
        if outside.read_bytes() != self.migrated["pkg/base.py"]:
            return False, "hard link broken"
        repaired = (
            "finished by the next --write"
            if "interrupted --write" in rerun.stderr
            else "nothing to finish"
        )
        return True, f"exit {process.returncode}, tree {seen} after the signal, {repaired}"

    def stale_copy(self) -> tuple[bool, str]:
        target = self.work / "train.py"
        target.write_text(FSDP1)
        killed = wrapped("--write", str(self.work), KILL_STAGED="1")
        staged = [p for p in self.work.iterdir() if p.name.endswith(".fsdp2-port.tmp")]
        check = cli("--check", str(self.work))
        kept = bool(staged) and all(p.exists() for p in staged)
        rerun = cli("--write", str(self.work))
        gone = not any(p.exists() for p in staged)
        ok = killed.returncode == -signal.SIGKILL and check.returncode == 1 and kept and gone
        ok = ok and rerun.returncode == 0 and "fully_shard" in target.read_text()
        return ok, f"--check exit {check.returncode} kept them, the next --write removed them"

    def broken_journal(self) -> tuple[bool, str]:
        target = self.work / "train.py"
        target.write_text(FSDP1)
        wrapped("--write", str(self.work), KILL_AT="1")
        for staged in self.work.glob(".*.fsdp2-port.tmp"):
            staged.unlink()
        run = cli("--write", str(self.work))
        ok = run.returncode == 2 and "missing or damaged" in run.stderr
        ok = ok and target.read_text() == FSDP1
        return ok, f"exit {run.returncode}, file untouched, journal kept for a person to look at"

    def file_too_big(self) -> tuple[bool, str]:
        for name in "ab":
            (self.work / f"{name}.py").write_text(FSDP1 + "#" * 2000 * (name == "b") + "\n")

        def limit() -> None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (1500, 1500))

        run = subprocess.run(
            [sys.executable, "-m", "fsdp2_port", "migrate", "--write", str(self.work)],
            env=ENV,
            capture_output=True,
            text=True,
            preexec_fn=limit,
        )
        untouched = all(FSDP1 in (self.work / f"{n}.py").read_text() for n in "ab")
        leftovers = [p.name for p in self.work.iterdir() if p.name.startswith(".")]
        ok = run.returncode == 2 and untouched and not leftovers and "0 changed" in run.stderr
        return ok, f"exit {run.returncode}, {run.stderr.splitlines()[-1]}"

    def owner(self) -> tuple[bool, str]:
        if os.geteuid() != 0:
            return True, "skipped (needs root to give a file away)"
        target = self.work / "train.py"
        target.write_text(FSDP1)
        os.chown(target, 12345, 23456)
        target.chmod(0o640)
        cli("--write", str(target))
        status = target.stat()
        seen = (status.st_uid, status.st_gid, oct(stat.S_IMODE(status.st_mode)))
        return seen == (12345, 23456, "0o640") and "fully_shard" in target.read_text(), str(seen)

    def hard_link(self) -> tuple[bool, str]:
        (self.work / "src").mkdir()
        target, other = self.work / "src" / "train.py", self.work / "other.py"
        target.write_text(FSDP1)
        os.link(target, other)
        cli("--write", str(target))
        ok = target.stat().st_nlink == 2 and "fully_shard" in other.read_text()
        return ok, f"links {target.stat().st_nlink}"

    def read_only(self) -> tuple[bool, str]:
        target = self.work / "train.py"
        target.write_text(FSDP1)
        target.chmod(0o444)
        refused = cli("--write", str(target))
        kept = target.read_text() == FSDP1
        forced = cli("--write", "--force", str(target))
        ok = (
            refused.returncode == 2
            and kept
            and forced.returncode == 0
            and "fully_shard" in target.read_text()
        )
        return ok and stat.S_IMODE(
            target.stat().st_mode
        ) == 0o444, f"exit {refused.returncode}, then {forced.returncode} with --force"

    def symlinked_dir(self) -> tuple[bool, str]:
        (self.work / "real").mkdir()
        (self.work / "real" / "train.py").write_text(FSDP1)
        (self.work / "link").symlink_to(self.work / "real")
        run = cli("--check", str(self.work / "link"))
        return run.returncode == 1, run.stderr.splitlines()[-1]

    def unreadable_dir(self) -> tuple[bool, str]:
        (self.work / "secret").mkdir()
        (self.work / "secret" / "train.py").write_text(FSDP1)
        env = dict(ENV, DENY=str(self.work / "secret"))
        run = subprocess.run(
            [sys.executable, "-c", WRAPPED, "--check", str(self.work)],
            env=env,
            capture_output=True,
            text=True,
        )
        return (
            run.returncode == 2 and "secret: cannot read directory" in run.stderr,
            f"exit {run.returncode}",
        )

    def duplicates(self) -> tuple[bool, str]:
        (self.work / "train.py").write_text(FSDP1)
        run = cli("--check", "train.py", str(self.work / "train.py"), ".", cwd=self.work)
        return "1 file scanned" in run.stderr, run.stderr.splitlines()[-1]

    def json_error(self, fmt: str) -> tuple[bool, str]:
        (self.work / "bad.py").write_text(
            "from torch.distributed.fsdp import (FullyShardedDataParallel,\n"
        )
        run = cli("--format", fmt, str(self.work))
        records = (
            json.loads(run.stdout)
            if fmt == "json"
            else [json.loads(x) for x in run.stdout.splitlines()]
        )
        return run.returncode == 2 and any("error" in r for r in records), " ".join(
            run.stdout.split()
        )[:80]

    def missing(self) -> tuple[bool, str]:
        run = cli("--check", str(self.work / "nope"))
        return run.returncode == 2 and "no such file" in run.stderr, f"exit {run.returncode}"

    def nul(self) -> tuple[bool, str]:
        (self.work / "nul.py").write_bytes(FSDP1.encode() + b"x = 1\0\n")
        run = cli(str(self.work))
        return run.returncode == 2 and "NUL byte (line" in run.stderr, run.stderr.splitlines()[0][
            -60:
        ]

    def newer_syntax(self) -> tuple[bool, str]:
        (self.work / "new.py").write_text(FSDP1 + "type Wrapped = FSDP\n")
        run = cli(str(self.work))
        ok = run.returncode == 2 and (
            "needs a newer Python" in run.stderr or sys.version_info >= (3, 12)
        )
        return ok, run.stderr.splitlines()[0][-70:]

    def undecodable(self) -> tuple[bool, str]:
        data = FSDP1.encode() + b"x = '\xff\xfe'\n"
        (self.work / "bad.py").write_bytes(data)
        run = cli("--write", str(self.work))
        return run.returncode == 2 and (
            self.work / "bad.py"
        ).read_bytes() == data, f"exit {run.returncode}"

    def half_written(self) -> tuple[bool, str]:
        """Files copied half-migrated by hand (no journal): both constructors migrated, the
        files that only use the models not. The rerun finishes them as a clean migration
        would, except ``m.state_dict()`` calls: FSDP2 models a program already has cannot be
        told from migrated ones, and FSDP2 code wants its own answer there, so those stay."""
        tree = self.package()
        for name in ("pkg/runner.py", "pkg/trainer.py"):
            (tree / name).write_bytes(self.migrated[name])
        cli("--write", str(tree))
        state = snapshot(tree)
        behind = [
            k
            for k in state
            if state[k] != self.migrated[k]
            and _plain_state_dicts(state[k]) != _plain_state_dicts(self.migrated[k])
        ]
        return (
            not behind,
            f"still different from a clean migration: {behind}" if behind else "clean",
        )


def _plain_state_dicts(text: bytes) -> bytes:
    """``fsdp2_port.module_state_dict(x)`` written back as ``x.state_dict()``."""
    head = b"fsdp2_port.module_state_dict("
    while (start := text.find(head)) >= 0:
        depth, end = 1, start + len(head)
        while depth:
            depth += {ord("("): 1, ord(")"): -1}.get(text[end], 0)
            end += 1
        text = text[:start] + text[start + len(head) : end - 1] + b".state_dict()" + text[end:]
    return text


# -- runtime faults: optimizers, loads, compare, verify ------------------------------------

TAG_VAR = "FSDP2_PORT_FAULTS_TAG"
# compare's and verify's bound after a signal: SIGTERM, 5 s grace, SIGKILL, reading output.
SIGNAL_BOUND_S = 15
# A run that is hard to stop: it ignores SIGTERM and starts a child in a session of its own
# that does too; each writes its pid to $PIDS. A compare script, and verify's batch function.
STUBBORN = """\
import os, signal, subprocess, sys, time
def sleeper():
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    open(os.environ["PIDS"], "a").write(f"{os.getpid()}\\n")
    time.sleep(120)
def stubborn():
    from torch import nn
    def batch(step, size):
        here = os.path.dirname(os.path.abspath(__file__))
        code = f"import sys; sys.path.insert(0, {here!r}); import stubborn; stubborn.sleeper()"
        subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
        sleeper()
    return nn.Linear(4, 4), batch
def exits():
    sys.exit(3)
def frozen():
    from torch import nn
    model = nn.Linear(4, 4)
    model.requires_grad_(False)
    return model
if __name__ == "__main__":
    subprocess.Popen([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                      "import stubborn; stubborn.sleeper()", os.path.dirname(__file__)],
                     start_new_session=True)
    print("step 0 loss 1.0", flush=True)
    sleeper()
"""


def tagged(tag: str, var: str = TAG_VAR) -> list[int]:
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


def one_json(out: str) -> dict | None:
    try:
        report = json.loads(out)
    except ValueError:
        return None
    return report if isinstance(report, dict) else None


class Payload:
    """Unpickled, it makes the directory ``target``: code a checkpoint should never run."""

    def __init__(self, target: Path) -> None:
        self.target = str(target)

    def __reduce__(self):
        return (os.makedirs, (self.target, 0o777, True))


# A script printing MIB MiB of lines nobody reads, one metric line, then 8 MiB with no end.
LOUD = """\
import sys
block = ("x" * 1023 + "\\n") * 1024
for _ in range(int(sys.argv[1])):
    sys.stdout.write(block)
print("step 0 loss 1.0 grad_norm 2.0")
sys.stdout.write("y" * (8 << 20))
"""
# fsdp2-port's CLI, saying at its end its peak resident memory (VmHWM, counted from its exec).
MEASURED_CLI = """\
import sys
from fsdp2_port.cli import main
code = main(sys.argv[1:])
sys.stderr.write(next(line for line in open("/proc/self/status") if line.startswith("VmHWM")))
sys.exit(code)
"""


class Runtime:
    """Faults of the runtime, each run for real: in this process (torch imported once) or in
    a subprocess for the CLI under signals. ``self.work`` is a fresh temp dir."""

    def __init__(self) -> None:
        self.work = Path()

    def all(self) -> list[tuple[str, Callable[[], tuple[bool, str]]]]:
        cases: list[tuple[str, Callable[[], tuple[bool, str]]]] = []
        for cls in ("compat", "fsdp2_port"):
            for value in (-1.0, 0.0, math.nan):
                cases.append(
                    (
                        f"{cls}.BF16Optimizer max_grad_norm={value}",
                        lambda cls=cls, value=value: self.bad_max_norm(cls, value),
                    )
                )
            cases.append(
                (f"{cls}.BF16Optimizer max_grad_norm=None (no clip)", lambda c=cls: self.no_clip(c))
            )
            for what in ("late master shape", "scheduler value"):
                cases.append(
                    (
                        f"{cls} load_state_dict refused ({what}): state bitwise unchanged",
                        lambda c=cls, w=what: self.refused_load(c, w),
                    )
                )
        cases.append(("DCP load with an extra parameter: refused, unchanged", self.refused_dcp))
        for args, named in (
            (("--rtol", "loss=-1"), "--rtol"),
            (("--rtol", "nosuch=1"), "--rtol"),
            (("--nproc-per-node", "0"), "--nproc-per-node"),
            (("--timeout", "0"), "--timeout"),
        ):
            cases.append(
                (
                    f"compare {' '.join(args)}",
                    lambda args=args, named=named: self.compare_usage(args, named),
                )
            )
        cases.append(("compare: both runs all NaN", lambda: self.compare_nan("nan", "nan")))
        cases.append(("compare: NaN in the new run only", lambda: self.compare_nan("1.0", "nan")))
        cases.append(("compare under SIGTERM (stubborn run)", self.compare_signal))
        cases.append(("verify under SIGTERM (stubborn ranks)", self.verify_signal))
        for args in (
            ("--world-size", "0"),
            ("--world-size", "1000"),
            ("--steps", "0"),
            ("--max-grad-norm", "nan"),
            ("--lr", "-1"),
            ("--timeout", "inf"),
        ):
            cases.append((f"verify {' '.join(args)}", lambda args=args: self.verify_number(args)))
        cases.append(("verify: factory calls sys.exit(3)", self.verify_sys_exit))
        cases.append(("verify: model with no trainable parameter", self.verify_frozen))
        cases.append(("fully_shard_like_fsdp1 on an FSDP1-wrapped module", self.like_on_fsdp1))
        cases.append(("fully_shard_like_fsdp1 device_id=1 without a GPU", self.device_id_one))
        for form in ("file", "legacy file", "rank files", "dcp item", "dcp metadata"):
            cases.append(
                (
                    f"convert-checkpoint of a pickle that runs code ({form})",
                    lambda form=form: self.hostile_checkpoint(form),
                )
            )
        for onto in ("its source, spelled otherwise", "a hard link of its source", "a rank file"):
            cases.append(
                (f"convert-checkpoint onto {onto}", lambda onto=onto: self.convert_onto(onto))
            )
        for where in ("into the DCP checkpoint read", "to a directory", "to a missing directory"):
            cases.append(
                (f"convert-checkpoint {where}", lambda where=where: self.convert_where(where))
            )
        cases.append(("convert-checkpoint with a link planted at DST.tmp", self.planted_tmp))
        for onto in ("NEW", "OLD through a link", "a directory"):
            cases.append((f"compare --html {onto}", lambda onto=onto: self.compare_html(onto)))
        cases.append(("compare with standard output appended to NEW", self.compare_stdout))
        cases.append(("compare of two runs printing 64 MiB and an 8 MiB line", self.loud))
        return cases

    # -- checkpoints and outputs from someone else

    def _cli(self, *args: str) -> tuple[int, list[str]]:
        """``fsdp2-port ARGS`` in this process: (exit code, standard error's lines)."""
        from fsdp2_port.cli import main as cli_main

        out, err = StringIO(), StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            code = cli_main(list(args))
        return code, err.getvalue().strip().splitlines()

    @staticmethod
    def _state(payload: Payload | None = None) -> dict:
        import torch

        state = {"model": {"w": torch.arange(4.0)}, "optim": {"state": {}, "param_groups": []}}
        return {**state, "step": payload} if payload is not None else state

    def hostile_checkpoint(self, form: str) -> tuple[bool, str]:
        import warnings

        import torch
        import torch.distributed.checkpoint as dcp

        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        outside = self.work / "outside"
        outside.mkdir()
        payload = Payload(outside / "PWNED")
        src = str(self.work / "ckpt.pt")
        if form in ("file", "legacy file"):
            torch.save(self._state(payload), src, _use_new_zipfile_serialization=form == "file")
        elif form == "rank files":
            for rank in range(2):
                torch.save(self._state(payload if rank else None), self.work / f"c_{rank}.pt")
            src = str(self.work / "c_{rank}.pt")
        else:
            src = str(self.work / "dcp")
            dcp.save(self._state(payload if form == "dcp item" else None), checkpoint_id=src)
            if form == "dcp metadata":
                (self.work / "dcp" / ".metadata").write_bytes(pickle.dumps(payload))
        code, lines = self._cli("convert-checkpoint", src, str(self.work / "out.pt"))
        ok = code == 2 and len(lines) == 1 and "--trust-pickle" in lines[0]
        ok = ok and not list(outside.iterdir()) and not (self.work / "out.pt").exists()
        return ok, f"exit {code}: {lines[-1][-70:] if lines else ''}"

    def convert_onto(self, onto: str) -> tuple[bool, str]:
        import torch

        source = self.work / "c_0.pt"
        torch.save(self._state(), source)
        data = source.read_bytes()
        src, dst = str(source), str(self.work / "." / "c_0.pt")
        if onto == "a hard link of its source":
            os.link(source, self.work / "link.pt")
            dst = str(self.work / "link.pt")
        elif onto == "a rank file":
            src = str(self.work / "c_{rank}.pt")
        code, lines = self._cli("convert-checkpoint", src, dst)
        ok = code == 2 and len(lines) == 1 and source.read_bytes() == data
        return ok, f"exit {code}: {lines[-1][-60:] if lines else ''}"

    def convert_where(self, where: str) -> tuple[bool, str]:
        import torch
        import torch.distributed.checkpoint as dcp

        torch.save(self._state(), self.work / "c.pt")
        (self.work / "dir").mkdir()
        src, dst = str(self.work / "c.pt"), str(self.work / "dir")
        if where == "into the DCP checkpoint read":
            dcp.save(self._state(), checkpoint_id=self.work / "dcp")
            src, dst = str(self.work / "dcp"), str(self.work / "dcp" / "out.pt")
        elif where == "to a missing directory":
            dst = str(self.work / "missing" / "out.pt")
        code, lines = self._cli("convert-checkpoint", src, dst)
        ok = code == 2 and len(lines) == 1 and not Path(dst).is_file()
        return ok, f"exit {code}: {lines[-1][-60:] if lines else ''}"

    def planted_tmp(self) -> tuple[bool, str]:
        import torch

        torch.save(self._state(), self.work / "c.pt")
        victim = self.work / "victim.txt"
        victim.write_text("precious\n")
        (self.work / "out.pt.tmp").symlink_to(victim)
        code, _ = self._cli(
            "convert-checkpoint", str(self.work / "c.pt"), str(self.work / "out.pt")
        )
        ok = code == 0 and victim.read_text() == "precious\n"
        return ok, f"exit {code}, the link's target untouched"

    def compare_html(self, onto: str) -> tuple[bool, str]:
        old, new = self.work / "old.py", self.work / "new.py"
        for script in (old, new):
            script.write_text("print('step 0 loss 1.0')\n")
        html = {"NEW": new, "a directory": self.work}.get(onto, self.work / "link.html")
        if onto == "OLD through a link":
            html.symlink_to(old)
        args = ["compare", str(old), str(new), "--launcher", "none", "--html", str(html)]
        code, lines = self._cli(*args)
        ok = code == 2 and len(lines) == 1 and "--html" in lines[0]
        ok = ok and old.read_text() == new.read_text() == "print('step 0 loss 1.0')\n"
        return ok, f"exit {code}: {lines[-1][-60:] if lines else ''}"

    def compare_stdout(self) -> tuple[bool, str]:
        new = self.work / "new.py"
        new.write_text("print('step 0 loss 1.0')\n")
        compare = ["compare", str(new), str(new), "--launcher", "none", "--format", "json"]
        with new.open("a") as out:
            proc = subprocess.run(
                [sys.executable, "-m", "fsdp2_port", *compare],
                env=ENV,
                stdout=out,
                stderr=subprocess.PIPE,
                text=True,
                timeout=120,
            )
        ok = proc.returncode == 2 and new.read_text() == "print('step 0 loss 1.0')\n"
        return ok, f"exit {proc.returncode}: {proc.stderr.strip()[-60:]}"

    def loud(self) -> tuple[bool, str]:
        script = self.work / "loud.py"
        script.write_text(LOUD)
        compare = ["compare", str(script), str(script), "--launcher", "none", "--format", "json"]
        proc = subprocess.run(
            [sys.executable, "-c", MEASURED_CLI, *compare, "--", "64"],
            env=ENV,
            capture_output=True,
            text=True,
            timeout=120,
        )
        report = one_json(proc.stdout)
        peak_mib = int(proc.stderr.strip().splitlines()[-1].split()[1]) / 1024
        ok = proc.returncode == 0 and report is not None and report["verdict"] == "same"
        return ok and peak_mib < 48, f"exit {proc.returncode}, peak {peak_mib:.0f} MiB"

    # -- the optimizers and their loads

    @staticmethod
    def _optimizer(cls: str, seed: int = 0, wider: bool = False, **kwargs):
        import torch
        from torch import nn

        import fsdp2_port
        from fsdp2_port import compat

        torch.manual_seed(seed)
        layers = [nn.Linear(4, 8), nn.Linear(8, 8), nn.Linear(8, 2)]
        if wider:
            layers.append(nn.Linear(2, 2))
        model = nn.Sequential(*layers).to(torch.bfloat16)
        kind = compat.BF16Optimizer if cls == "compat" else fsdp2_port.BF16Optimizer
        kw = dict(max_grad_norm=1.0, total_steps=20, warmup_ratio=0.1)
        return model, kind(model, 1e-2, **{**kw, **kwargs})

    @staticmethod
    def _train(model, opt, steps: int = 2) -> None:
        import torch

        for step in range(steps):
            g = torch.Generator().manual_seed(step)
            x = torch.randn(8, 4, generator=g).to(torch.bfloat16)
            model(x).float().pow(2).mean().backward()
            opt.step()

    def bad_max_norm(self, cls: str, value: float) -> tuple[bool, str]:
        try:
            self._optimizer(cls, max_grad_norm=value)
        except ValueError as e:
            return "max_grad_norm" in str(e), f"ValueError: {e}"
        return False, "accepted"

    def no_clip(self, cls: str) -> tuple[bool, str]:
        model, opt = self._optimizer(cls, max_grad_norm=None)
        self._train(model, opt, 1)
        return True, "trains unclipped"

    @staticmethod
    def _snapshot(opt) -> list:
        import copy

        out = [m.detach().clone() for m in opt.fp32_params]
        out += [p.detach().clone() for p in opt.model_params]
        out += [v.clone() for m in opt.fp32_params for v in opt.optimizer.state[m].values()]
        return [out, copy.deepcopy(opt.scheduler.state_dict())]

    @staticmethod
    def _same(a: list, b: list) -> bool:
        import torch

        tensors = all(x.dtype == y.dtype and torch.equal(x, y) for x, y in zip(a[0], b[0]))
        return len(a[0]) == len(b[0]) and tensors and a[1] == b[1]

    def refused_load(self, cls: str, what: str) -> tuple[bool, str]:
        import torch

        model, opt = self._optimizer(cls, seed=0)
        self._train(model, opt, 3)
        saved = opt.state_dict()
        model, opt = self._optimizer(cls, seed=1)
        self._train(model, opt, 2)
        if what == "scheduler value":
            bad = {**saved["scheduler_state_dict"], "last_epoch": "7"}
            saved = {**saved, "scheduler_state_dict": bad}
        else:
            masters = saved["fp32_params"]
            if isinstance(masters, dict):
                last = list(masters)[-1]
                masters = {**masters, last: torch.zeros(3, 3)}
            else:
                masters = [*masters[:-1], torch.zeros(3, 3)]
            saved = {**saved, "fp32_params": masters}
        before = self._snapshot(opt)
        try:
            opt.load_state_dict(saved)
        except (ValueError, KeyError) as e:
            same = self._same(before, self._snapshot(opt))
            return same, f"{type(e).__name__}; state {'unchanged' if same else 'CHANGED'}"
        return False, "loaded"

    def refused_dcp(self) -> tuple[bool, str]:
        import warnings

        import torch.distributed.checkpoint as dcp

        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        model, wider = self._optimizer("fsdp2_port", wider=True)
        self._train(model, wider, 2)
        dcp.save({"optim": wider}, checkpoint_id=str(self.work / "extra"))
        model, opt = self._optimizer("fsdp2_port", seed=1)
        self._train(model, opt, 2)
        before = self._snapshot(opt)
        try:
            dcp.load({"optim": opt}, checkpoint_id=str(self.work / "extra"))
        except Exception as e:  # DCP wraps what load_state_dict raised
            same = self._same(before, self._snapshot(opt))
            return same, f"{type(e).__name__}; state {'unchanged' if same else 'CHANGED'}"
        return False, "loaded"

    # -- compare

    def _compare(self, old: Path, new: Path, *args: str, **kwargs):
        command = [sys.executable, "-m", "fsdp2_port", "compare", str(old), str(new), *args]
        return subprocess.Popen(
            command,
            cwd=self.work,
            env={**ENV, **kwargs.pop("env", {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def compare_usage(self, args: tuple[str, ...], named: str) -> tuple[bool, str]:
        script = self.work / "ok.py"
        script.write_text("print('step 0 loss 1.0')\n")
        html = self.work / "report.html"
        proc = self._compare(script, script, *args, "--format", "json", "--html", str(html))
        out, err = proc.communicate(timeout=60)
        report, lines = one_json(out), err.strip().splitlines()
        ok = proc.returncode == 2 and report is not None and report["exit_code"] == 2
        ok = ok and len(lines) == 1 and named in lines[0]
        return ok, f"exit {proc.returncode}: {lines[-1] if lines else ''}"

    def compare_nan(self, old: str, new: str) -> tuple[bool, str]:
        scripts = []
        for label, value in (("old", old), ("new", new)):
            scripts.append(self.work / f"{label}.py")
            scripts[-1].write_text(f"print('step 0 loss {value} grad_norm 1.0')\n")
        proc = self._compare(*scripts, "--launcher", "none", "--format", "json")
        out, _ = proc.communicate(timeout=60)
        report = one_json(out)
        verdict = report and report["verdict"]
        return proc.returncode == 1 and verdict == "different", f"exit {proc.returncode}, {verdict}"

    def _signalled(self, proc: subprocess.Popen, pids: Path, n: int, tag: str) -> tuple[bool, str]:
        """Once the run has its ``n`` processes: SIGTERM, then exit 143, one JSON object and
        nothing of the run left in /proc."""
        deadline = time.monotonic() + 90
        while not (pids.exists() and len(pids.read_text().split()) >= n):
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                return False, f"never started its {n} processes: {proc.communicate()[1][-300:]}"
            time.sleep(0.05)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=SIGNAL_BOUND_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            return False, f"still running {SIGNAL_BOUND_S} s after SIGTERM"
        took = time.monotonic() - sent
        deadline = time.monotonic() + 2  # its resource tracker, if any, ends after it
        while tagged(tag) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = tagged(tag)
        report = one_json(out)
        ok = proc.returncode == 143 and report is not None and report["exit_code"] == 143
        return ok and not left, f"exit {proc.returncode} in {took:.1f} s, left {left or 'none'}"

    def compare_signal(self) -> tuple[bool, str]:
        script = self.work / "stubborn.py"
        script.write_text(STUBBORN)
        tag, pids = uuid.uuid4().hex, self.work / "pids"
        env = {TAG_VAR: tag, "PIDS": str(pids)}
        proc = self._compare(script, script, "--launcher", "none", "--format", "json", env=env)
        return self._signalled(proc, pids, 2, tag)

    # -- verify

    def verify_signal(self) -> tuple[bool, str]:
        (self.work / "stubborn.py").write_text(STUBBORN)
        tag, pids = uuid.uuid4().hex, self.work / "pids"
        env = {**ENV, TAG_VAR: tag, "PIDS": str(pids)}
        env["PYTHONPATH"] = os.pathsep.join([str(self.work), str(ROOT)])
        args = ["--model", "stubborn:stubborn", "--world-size", "2", "--format", "json"]
        proc = subprocess.Popen(
            [sys.executable, "-m", "fsdp2_port", "verify", *args],
            cwd=self.work,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        return self._signalled(proc, pids, 4, tag)

    def _verify(self, *args: str) -> tuple[int | None, dict | None, list[str]]:
        """``fsdp2-port verify ARGS --format json`` in this process, spawning refused: (exit
        code, the JSON object, standard error's lines)."""
        from fsdp2_port.cli import main as cli_main
        from fsdp2_port.prove import verify

        def refuse(config):
            raise AssertionError("ranks were spawned")

        out, err, spawned = StringIO(), StringIO(), verify._spawned
        verify._spawned = refuse
        try:
            with redirect_stdout(out), redirect_stderr(err):
                code: int | None = cli_main(["verify", *args, "--format", "json"])
        except BaseException as e:  # what escapes is the defect
            code = None
            err.write(f"{type(e).__name__} escaped: {e}")
        finally:
            verify._spawned = spawned
        return code, one_json(out.getvalue()), err.getvalue().strip().splitlines()

    def verify_number(self, args: tuple[str, ...]) -> tuple[bool, str]:
        code, report, lines = self._verify(*args)
        ok = code == 2 and report is not None and report["exit_code"] == 2
        ok = ok and len(lines) == 1 and args[0] in lines[0]
        return ok, f"exit {code}: {lines[-1] if lines else ''}"

    def _verify_factory(self, name: str, says: str) -> tuple[bool, str]:
        (self.work / "stubborn.py").write_text(STUBBORN)
        sys.path.insert(0, str(self.work))
        sys.modules.pop("stubborn", None)
        try:
            code, report, lines = self._verify("--model", f"stubborn:{name}")
        finally:
            sys.path.remove(str(self.work))
            sys.modules.pop("stubborn", None)
        ok = code == 2 and report is not None and report["exit_code"] == 2
        ok = ok and bool(lines) and says in lines[-1]
        return ok, f"exit {code}: {lines[-1] if lines else ''}"

    def verify_sys_exit(self) -> tuple[bool, str]:
        return self._verify_factory("exits", "SystemExit: 3")

    def verify_frozen(self) -> tuple[bool, str]:
        return self._verify_factory("frozen", "no trainable parameter")

    # -- fully_shard_like_fsdp1

    def like_on_fsdp1(self) -> tuple[bool, str]:
        import warnings

        import torch
        import torch.distributed as dist
        from torch import nn
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

        from fsdp2_port import fully_shard_like_fsdp1

        warnings.filterwarnings("ignore", message="FSDP is switching to use `NO_SHARD`")
        store = f"file://{self.work / 'store'}"
        dist.init_process_group("gloo", init_method=store, rank=0, world_size=1)
        try:
            wrapped = FSDP(nn.Sequential(nn.Linear(4, 4)), device_id=torch.device("cpu"))
            fully_shard_like_fsdp1(wrapped)
        except ValueError as e:
            return "already" in str(e), f"ValueError: {e}"
        finally:
            dist.destroy_process_group()
        return False, "accepted"

    def device_id_one(self) -> tuple[bool, str]:
        import torch
        from torch import nn

        from fsdp2_port import fully_shard_like_fsdp1

        if torch.accelerator.is_available():
            return True, "not applicable: this machine has an accelerator"
        try:
            fully_shard_like_fsdp1(nn.Linear(2, 2), device_id=1)
        except ValueError as e:
            return "device_id=1" in str(e), f"ValueError: {e}"
        except Exception as e:
            return False, f"{type(e).__name__}: {e}"
        return False, "accepted"


def results_block(outcomes: list[tuple[str, bool, str]], seconds: float, args) -> str:
    """The ``faults`` block of RESULTS.md: cases tried and handled per side, and any failure
    by name."""
    rows = []
    for side in ("codemod", "runtime"):
        mine = [ok for owner, ok, _ in outcomes if owner == side]
        rows.append([side, len(mine), sum(mine)])
    rows.append(["all", len(outcomes), sum(ok for _, ok, _ in outcomes)])
    handled = sum(ok for _, ok, _ in outcomes)
    intro = (
        f"{results_md.machine()} `python benchmarks/faults.py --seed {args.seed} --kills "
        f"{args.kills}`, {seconds:.0f} s: {handled} of {len(outcomes)} handled."
    )
    failed = [f"- FAIL {name}" for _, ok, name in outcomes if not ok]
    body = results_md.table(["against", "tried", "handled"], rows)
    return "\n\n".join([intro, body, *(["\n".join(failed)] if failed else [])])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=21)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument(
        "--no-results-md", action="store_true", help="leave benchmarks/RESULTS.md as it is"
    )
    args = parser.parse_args()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="faults-state-") as state:
        ENV[STATE] = os.environ[STATE] = state
        cases = Cases(args.seed, args.kills)
    runtime = Runtime()
    outcomes: list[tuple[str, bool, str]] = []
    listed: list[tuple[str, Callable[[], tuple[bool, str]], Cases | Runtime]]
    listed = [(name, case, cases) for name, case in cases.all()]
    listed += [(name, case, runtime) for name, case in runtime.all()]
    for name, case, owner in listed:
        with (
            tempfile.TemporaryDirectory(prefix="faults-") as work,
            tempfile.TemporaryDirectory(prefix="faults-state-") as state,
        ):
            owner.work = Path(work)
            ENV[STATE] = os.environ[STATE] = state
            try:
                ok, seen = case()
            except Exception as error:  # a crash of the case is a failure, not a stop
                ok, seen = False, f"{type(error).__name__}: {error}"
        outcomes.append(("runtime" if owner is runtime else "codemod", ok, name))
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {seen}")
    handled = sum(ok for _, ok, _ in outcomes)
    print(f"{len(listed)} faults and bad inputs tried, {handled} handled")
    if not args.no_results_md:
        seconds = time.perf_counter() - started
        results_md.write_block("faults", results_block(outcomes, seconds, args))
    return 0 if handled == len(listed) else 1


if __name__ == "__main__":
    sys.exit(main())
