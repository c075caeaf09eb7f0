"""Faults and bad input against the real ``fsdp2-port migrate`` CLI, each in a temp dir.

    python benchmarks/faults.py [--seed N] [--kills N]

Prints one line per case (``ok`` or ``FAIL``, its name, what was seen) and then
``N faults and bad inputs tried, M handled``. A case is handled when the tree ends as the
original or the clean migration (never between), no staged copy or journal is left once the
next run has started, and the error, if any, is named with exit code 2.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "tests" / "codemods" / "fixtures" / "whole_models" / "untied.in"
JOURNAL = ".fsdp2-port-journal.json"
FSDP1 = (
    "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n\n\n"
    "def wrap(model):\n    return FSDP(model)\n"
)
ENV = dict(os.environ, PYTHONPATH=str(ROOT))
# The real CLI with its writes slowed (so that a signal lands inside the write phase); it
# touches $MARK when the write phase starts. $DENY names a directory whose listing fails.
WRAPPED = """\
import os, sys, time
from codemods import sources
mark, deny = os.environ.get("MARK"), os.environ.get("DENY")
if mark:
    real_stage, real_replace = sources._stage, os.replace
    def stage(path, data):
        open(mark, "a").close()
        time.sleep(0.01)
        return real_stage(path, data)
    def replace(*args):
        time.sleep(0.02)
        return real_replace(*args)
    sources._stage, os.replace = stage, replace
if deny:
    real_scandir = os.scandir
    def scandir(path="."):
        if os.fspath(path) == deny:
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_scandir(path)
    os.scandir = scandir
from codemods.cli import main
sys.exit(main(sys.argv[1:]))
"""


def cli(*args: str, cwd: Path | None = None, **kwargs) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "fsdp2_port", "migrate", *args]
    return subprocess.run(command, cwd=cwd, env=ENV, capture_output=True, text=True, **kwargs)


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
        ]
        return cases

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
        journal = tree / "pkg" / JOURNAL
        while process.poll() is None and time.monotonic() < deadline:
            if (mark.exists() and delay is not None) or journal.exists():
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
        why = self.consistent(tree)
        if why:
            return False, f"after the next start: {why}"
        rerun = cli("--write", str(tree))
        if rerun.returncode != 0 or snapshot(tree) != self.migrated:
            return False, f"rerun exit {rerun.returncode}: {rerun.stderr[-200:]}"
        if outside.read_bytes() != self.migrated["pkg/base.py"]:
            return False, "hard link broken"
        repaired = (
            "repaired by the next start" if "interrupted" in check.stderr else "nothing to repair"
        )
        return True, f"exit {process.returncode}, tree {seen} after the signal, {repaired}"

    def stale_copy(self) -> tuple[bool, str]:
        (self.work / "train.py").write_text(FSDP1)
        stale = self.work / ".train.py.x1y2.fsdp2-port.tmp"
        stale.write_text("half")
        run = cli("--check", str(self.work))
        return (not stale.exists() and run.returncode == 1), run.stderr.splitlines()[0]

    def broken_journal(self) -> tuple[bool, str]:
        target = self.work / "train.py"
        target.write_text(FSDP1)
        record = {
            "fsdp2-port-journal": 1,
            "pid": 0,
            "host": "",
            "files": [
                {
                    "path": "train.py",
                    "staged": ".train.py.gone.fsdp2-port.tmp",
                    "old": "0",
                    "new": "1",
                    "in_place": False,
                }
            ],
        }
        (self.work / JOURNAL).write_text(json.dumps(record))
        run = cli("--write", str(self.work))
        ok = run.returncode == 2 and "cannot finish" in run.stderr and target.read_text() == FSDP1
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
        return "1 files scanned" in run.stderr, run.stderr.splitlines()[-1]

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
        files that only use the models not."""
        tree = self.package()
        for name in ("pkg/runner.py", "pkg/trainer.py"):
            (tree / name).write_bytes(self.migrated[name])
        cli("--write", str(tree))
        state = snapshot(tree)
        behind = [k for k in state if state[k] != self.migrated[k]]
        return (
            not behind,
            f"still different from a clean migration: {behind}" if behind else "clean",
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=21)
    parser.add_argument("--kills", type=int, default=20)
    args = parser.parse_args()
    cases = Cases(args.seed, args.kills)
    handled = 0
    listed = cases.all()
    for name, case in listed:
        with tempfile.TemporaryDirectory(prefix="faults-") as work:
            cases.work = Path(work)
            try:
                ok, seen = case()
            except Exception as error:  # a crash of the case is a failure, not a stop
                ok, seen = False, f"{type(error).__name__}: {error}"
        handled += ok
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {seen}")
    print(f"{len(listed)} faults and bad inputs tried, {handled} handled")
    return 0 if handled == len(listed) else 1


if __name__ == "__main__":
    sys.exit(main())
