"""``compare --resume-at K``: the protocol between compare and a training script that saves
and resumes, the conversion of OLD's checkpoint, and the judgement of continued runs.

A script takes part by reading four environment variables (each absent unless compare sets
it); its own save and load code does the work:

- ``FSDP2_PORT_SAVE_AT=K`` and ``FSDP2_PORT_CHECKPOINT=DIR``: right after the step it logs as
  ``step K``, save a checkpoint into the folder ``DIR`` (it exists, empty, the same path on
  every rank; write any files, from any ranks), then train on as if nothing happened;
- ``FSDP2_PORT_RESUME_FROM=DIR`` and ``FSDP2_PORT_RESUME_AT=K``: instead of starting afresh,
  load the checkpoint in ``DIR`` (its own, or OLD's converted) and continue with the step
  after ``K``, numbering steps as before.

Compare then runs OLD and NEW, each saving after step K and going on (the uninterrupted runs
judged as always); NEW again, resumed from its own checkpoint; and, asked to, NEW resumed from
OLD's checkpoint after ``fsdp2-port convert-checkpoint`` (files named by ``--convert``,
every other file copied as it is). Each continued run must log every step after K that OLD
logged, none before, within the same tolerances against OLD's uninterrupted run.

Imports no torch.
"""

from __future__ import annotations

import glob
import os
import shlex
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from fsdp2_port.prove.judge import departures_at
from fsdp2_port.prove.launch import CommandRun, run_command

SAVE_AT, CHECKPOINT = "FSDP2_PORT_SAVE_AT", "FSDP2_PORT_CHECKPOINT"
RESUME_FROM, RESUME_AT = "FSDP2_PORT_RESUME_FROM", "FSDP2_PORT_RESUME_AT"
#: The continued runs: NEW from its own checkpoint, NEW from OLD's (converted).
OWN, FROM_OLD = "new-resumed", "new-from-old"
#: In ``--convert-args``: the folder OLD saved its checkpoint into.
OLD_FOLDER = "{old}"


def save_env(step: int, folder: Path) -> dict[str, str]:
    return {SAVE_AT: str(step), CHECKPOINT: str(folder)}


def resume_env(step: int, folder: Path) -> dict[str, str]:
    return {RESUME_FROM: str(folder), RESUME_AT: str(step)}


@dataclass(frozen=True)
class Conversion:
    """``--convert SRC[=DST]``: convert ``SRC`` (in OLD's folder; ``{rank}`` for one file per
    rank) into ``DST`` (default ``SRC``; with ``{rank}``: the one converted file, full tensors
    by name, placed once for each rank OLD wrote a file for)."""

    src: str
    dst: str

    @classmethod
    def parse(cls, spec: str) -> Conversion:
        src, _, dst = spec.partition("=")
        return cls(src, dst or src)


def check(
    resume_at: int | None,
    from_old: bool,
    conversions: tuple[str, ...],
    convert_args: str | None,
    error: type[Exception],
) -> None:
    """Refuse, in one line, a ``--resume-at`` request that cannot run."""
    if resume_at is None:
        given = [
            name
            for name, value in (
                ("--resume-from-old", from_old),
                ("--convert", conversions),
                ("--convert-args", convert_args),
            )
            if value
        ]
        if given:
            raise error(f"{', '.join(given)}: only with --resume-at K")
        return
    if resume_at < 0:
        raise error(f"--resume-at must be a step number >= 0, got {resume_at}")
    if (conversions or convert_args) and not from_old:
        raise error("--convert and --convert-args: only with --resume-from-old")
    for spec in conversions:
        c = Conversion.parse(spec)
        if not c.src or os.path.isabs(c.src) or ".." in Path(c.src).parts:
            raise error(f"--convert {spec!r}: SRC is a path inside OLD's checkpoint folder")
        if os.path.isabs(c.dst) or ".." in Path(c.dst).parts:
            raise error(f"--convert {spec!r}: DST is a path inside the converted folder")
        if "{rank}" in c.dst and "{rank}" not in c.src:
            raise error(f"--convert {spec!r}: DST names {{rank}} files, SRC one file")
    if convert_args:
        try:
            shlex.split(convert_args)
        except ValueError as e:
            raise error(f"--convert-args: {e}") from None


def saved_anything(folder: Path) -> bool:
    return folder.is_dir() and any(folder.iterdir())


def nothing_saved(label: str, step: int) -> str:
    return (
        f"{label} saved nothing into ${CHECKPOINT} after step {step}: the script does not "
        f"take part in --resume-at (it must read ${SAVE_AT}; see docs/compare.md)"
    )


def convert_old(
    old: Path,
    out: Path,
    conversions: tuple[str, ...],
    convert_args: str | None,
    timeout: float,
) -> tuple[list[CommandRun], list[list[str]], str | None]:
    """OLD's checkpoint folder as NEW loads it, in ``out``: every ``--convert`` through
    ``fsdp2-port convert-checkpoint``, every other file copied. Returns the conversion runs,
    their commands, and the error that stopped them (None: done)."""
    specs = [Conversion.parse(s) for s in conversions]
    converted = {
        os.path.relpath(f, old)
        for c in specs
        for f in glob.glob(str(old / c.src.replace("{rank}", "[0-9]*")))
    }
    for path in sorted(old.rglob("*")):
        relative = str(path.relative_to(old))
        if path.is_file() and relative not in converted:
            (out / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, out / relative)
    extra = shlex.split((convert_args or "").replace(OLD_FOLDER, str(old)))
    runs: list[CommandRun] = []
    commands: list[list[str]] = []
    for c in specs:
        ranks = len(glob.glob(str(old / c.src.replace("{rank}", "[0-9]*"))))
        if ranks == 0:
            return runs, commands, f"--convert {c.src}: OLD saved no such file in its checkpoint"
        target = out / c.dst.replace("{rank}", "all")
        target.parent.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "fsdp2_port", "convert-checkpoint"]
        command += [str(old / c.src), str(target), *extra]
        ended = run_command(command, timeout)
        runs.append(ended)
        commands.append(command)
        if ended.returncode != 0:
            return runs, commands, f"convert-checkpoint of OLD's {c.src} failed"
        if "{rank}" in c.dst:
            for rank in range(ranks):
                shutil.copy2(target, out / c.dst.replace("{rank}", str(rank)))
            target.unlink()
    return runs, commands, None


def judge_continued(
    old: Mapping[int, Mapping[str, float]],
    continued: Mapping[int, Mapping[str, float]],
    step: int,
    tolerance: Mapping[str, float],
    label: str,
) -> list[str]:
    """How a run resumed after ``step`` departs from OLD's uninterrupted run, one line each:
    steps up to ``step`` logged (it did not resume), steps after it missing or extra, metrics
    beyond tolerance."""
    failures = []
    early = sorted(s for s in continued if s <= step)
    if early:
        failures.append(
            f"{label}: logged steps {early[0]}-{early[-1]}, at or before {step}: it started "
            f"afresh instead of resuming (it must read ${RESUME_FROM})"
        )
    want = {s: v for s, v in old.items() if s > step}
    got = {s: v for s, v in continued.items() if s > step}
    if not want:
        failures.append(f"{label}: old logged no step after {step}: choose a smaller --resume-at")
    for s in sorted(set(want) - set(got)):
        failures.append(f"{label}: step {s} not logged")
    for s in sorted(set(got) - set(want)):
        failures.append(f"{label}: step {s} logged, old has no such step")
    for s in sorted(set(want) & set(got)):
        for d in departures_at(s, want[s], got[s], tolerance):
            if d.baseline is None or d.value is None:
                failures.append(f"{label}: step {s}: {d.metric} logged by one run only")
            elif d.not_comparable:
                failures.append(f"{label}: step {s}: {d.metric} is NaN in both runs")
            else:
                failures.append(
                    f"{label}: step {s}: {d.metric} {d.value!r} vs old {d.baseline!r}, "
                    f"relative difference {d.difference:.2e} > {d.rtol:g}"
                )
    return failures
