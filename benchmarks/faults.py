"""Faults and bad input against the real ``fsdp2-port migrate`` CLI, each in a temp dir, and
against the runtime: the optimizers, their loads, ``compare`` and ``verify``.

    python benchmarks/faults.py [--seed N] [--kills N]

Prints one line per case (``ok`` or ``FAIL``, its name, what was seen) and then
``N faults and bad inputs tried, M handled``. A codemod case is handled when the tree ends as
the original or the clean migration (never between), no staged copy or journal is left once
the next run has started, and the error, if any, is named with exit code 2. A runtime case
(``Runtime``) is handled when the bad value is refused with a ValueError naming it, a refused
load leaves the optimizer bitwise as it was, a CLI exits with its documented code, one line
on standard error and one JSON object, and a signal leaves no process of the run in /proc.
"""

from __future__ import annotations

import argparse
import json
import math
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
import uuid
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from io import StringIO
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
        return cases

    # -- the optimizers and their loads

    @staticmethod
    def _optimizer(cls: str, seed: int = 0, wider: bool = False, **kwargs):
        import torch
        from torch import nn

        import compat
        import fsdp2_port

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=21)
    parser.add_argument("--kills", type=int, default=20)
    args = parser.parse_args()
    cases = Cases(args.seed, args.kills)
    runtime = Runtime()
    handled = 0
    listed: list[tuple[str, Callable[[], tuple[bool, str]], Cases | Runtime]]
    listed = [(name, case, cases) for name, case in cases.all()]
    listed += [(name, case, runtime) for name, case in runtime.all()]
    for name, case, owner in listed:
        with tempfile.TemporaryDirectory(prefix="faults-") as work:
            owner.work = Path(work)
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
