"""Do two training scripts train the same? Run both the same way and read what each logs.

``fsdp2-port compare OLD NEW -- ARGS`` runs OLD, then NEW, with the same arguments (through
torchrun by default, or directly for scripts that start their own ranks), reads the per-step
metrics each prints on its standard output, and judges NEW against OLD step by step
(``judge``: one relative tolerance per metric). Invariants:

- a metric belongs to the step named on the same line (``step N``); lines without a step
  are not read; for each step and metric the last value logged wins;
- a step or metric logged by one run only, or a departure by ``judge``'s rules (NaN is never
  the same) makes the runs *different*;
- a run that fails, times out, or logs no step both runs can be compared at is an *error*,
  reported with that run's exit status and the tail of its output;
- a run's output is read as it comes, and only its lines that name a step and its last lines
  are kept (``launch.run_command``): memory is bounded whatever else it prints;
- nothing of a run outlives it (``launch.run_command``), nor torchrun's log folders (in a
  temporary folder of compare's, not one ``/tmp/torchelastic_*`` per run);
- ``--resume-at K`` (``resume``): both runs save after step K into folders of compare's, NEW
  resumes from its own checkpoint (and from OLD's, converted), and every continued run is
  judged against OLD's uninterrupted steps after K by the same tolerances;
- each run's time and peak memory are measured and reported beside the verdict, never in it:
  a step's time is the time between the arrival of its line and of the previous step's
  (``StepClock``), the peak RSS that of the run's largest process (``launch.run_command``),
  the CUDA peak what the processes themselves report (``measure``);
- a report names no folder of compare's: each run's command is shown as the user would type
  it (no ``--log-dir``, no ``measure``), a path in compare's temporary folder as ``<tmp>/...``.

Imports no torch: it launches the runs and reads their output.
"""

from __future__ import annotations

import itertools
import math
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fsdp2_port.prove import report_html, resume
from fsdp2_port.prove.judge import (
    TOLERANCE,
    check_dtype,
    check_timeout,
    departures_at,
    error_payload,
    exit_code,
    outcome,
    relative_difference,
    relative_differences,
)
from fsdp2_port.prove.launch import run_command, signals_interrupt
from fsdp2_port.prove.measure import MEASURE_DIR_VAR, read_records

NUMBER = r"[-+]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf)"
STEP = r"(?i)\bstep\b\s*[:=]?\s*(\d+)"
DEFAULT_METRICS = {
    "loss": rf"(?i)\bloss\b\s*[:=]?\s*({NUMBER})",
    "grad_norm": rf"(?i)\b(?:grad[ _-]?norm|gnorm|norm)\b\s*[:=]?\s*({NUMBER})",
}
LAUNCHERS = ("torchrun", "none")
RUNS = ("old", "new")
TAIL_LINES = 40  # torchrun alone prints ~25 lines after a worker's own error


class CompareError(ValueError):
    """A bad request (pattern, tolerance, launcher options): one line, before any run."""


#: The module NEW runs under with ``forbid_fsdp1``.
GUARD = "fsdp2_port.prove.no_fsdp1"
#: The module every run starts under: its processes report their CUDA peak.
MEASURE = "fsdp2_port.prove.measure"
#: How a report shows compare's temporary folder, which is gone once it is read.
TMP_SHOWN = "<tmp>"
#: What the reports say of time and memory.
NOT_JUDGED = "not judged: the verdict reads the logged metrics only; times vary with the load"
FORBID_COST = "new ran under --forbid-fsdp1, whose profiling of every Python call is in its times"


@dataclass(frozen=True)
class Config:
    old: str = ""
    new: str = ""
    script_args: tuple[str, ...] = ()
    launcher: str = "torchrun"
    nproc_per_node: int | None = None  # torchrun only; None: 2
    nnodes: str | None = None  # torchrun only; None: one node (--standalone)
    node_rank: int | None = None
    rdzv_endpoint: str | None = None
    rdzv_id: str | None = None
    metrics: Mapping[str, str] = field(default_factory=dict)  # NAME -> REGEX, added or replaced
    rtol: Mapping[str, float] = field(default_factory=dict)  # NAME -> rtol, overrides
    dtype: str = "bf16"
    timeout: float = 3600.0
    #: NEW runs under ``fsdp2_port.prove.no_fsdp1``: a call of FSDP1's implementation from
    #: its code (or fsdp2_port's) fails it (on every rank, each checking itself)
    forbid_fsdp1: bool = False
    #: ``--resume-at K`` (``resume``: the protocol): both runs save after step K, NEW resumes
    #: from its own checkpoint (and, ``resume_from_old``, from OLD's, converted)
    resume_at: int | None = None
    resume_from_old: bool = False
    convert: tuple[str, ...] = ()  # SRC[=DST] in OLD's checkpoint folder
    convert_args: str | None = None  # convert-checkpoint's options, one string


@dataclass
class Run:
    script: str
    command: list[str]  # as the user would type it (see the module)
    returncode: int | None = None  # None: timed out (killed)
    seconds: float = 0.0
    stdout: str = ""
    stderr: str = ""
    peak_rss_bytes: int | None = None  # the largest process's (launch.run_command)
    cuda_max_allocated_bytes: int | None = None  # the largest its processes reported
    #: step -> seconds from the run's start to the first line that logged it
    step_times: dict[int, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.returncode == 0


@dataclass
class Result:
    verdict: str  # "same", "different", "error", or "elsewhere" (see ``judge_runs``)
    config: dict[str, Any]
    tolerance: dict[str, float]
    runs: dict[str, Run]
    metrics: list[str] = field(default_factory=list)
    # step -> run -> metric -> value, for every step either run logged
    steps: dict[int, dict[str, dict[str, float]]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    error: str | None = None
    #: ``--resume-at``: continued run -> step -> metric -> value (steps after K)
    continued: dict[str, dict[int, dict[str, float]]] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        return exit_code(self.verdict)


# -- the request ------------------------------------------------------------------------------


def patterns(extra: Mapping[str, str]) -> tuple[re.Pattern[str], dict[str, re.Pattern[str]]]:
    """(step pattern, metric name -> pattern): the defaults, with ``extra`` added or replacing
    them (``step`` replaces the step pattern). Each pattern's first group is the number."""
    sources = {"step": STEP, **DEFAULT_METRICS, **extra}
    compiled = {}
    for name, source in sources.items():
        try:
            compiled[name] = re.compile(source)
        except re.error as e:
            raise CompareError(f"--metric {name}: not a regular expression: {e}") from None
        if compiled[name].groups < 1:
            raise CompareError(f"--metric {name}: the pattern needs a group around the number")
    step = compiled.pop("step")
    return step, compiled


def tolerances(
    dtype: str, metrics: Sequence[str], overrides: Mapping[str, float]
) -> dict[str, float]:
    """One relative tolerance per metric: ``TOLERANCE["metric"][dtype]`` unless overridden."""
    check_dtype(dtype, CompareError)
    unknown = sorted(set(overrides) - set(metrics))
    if unknown:
        raise CompareError(f"--rtol names no metric: {unknown}; metrics: {list(metrics)}")
    bad = {name: x for name, x in overrides.items() if not 0 <= x < math.inf}
    if bad:
        raise CompareError(f"--rtol must be a finite number >= 0, got {bad}")
    return {name: float(overrides.get(name, TOLERANCE["metric"][dtype])) for name in metrics}


def launch_command(
    config: Config,
    script: str,
    label: str,
    log_dir: str | None = None,
    measure: bool = False,
) -> list[str]:
    """The command line of one run; ``{run}`` in the script's arguments becomes ``label``;
    torchrun keeps its logs under ``log_dir`` (its own temporary folder otherwise); with
    ``measure`` the script runs under ``MEASURE``."""
    args = [a.replace("{run}", label) for a in config.script_args]
    target = [script]
    if config.forbid_fsdp1 and label == "new":
        target = ["-m", GUARD, script]
    if measure:
        target = ["-m", MEASURE, *target]
    if config.launcher == "none":
        return [sys.executable, *target, *args]
    nproc = 2 if config.nproc_per_node is None else config.nproc_per_node
    if config.nnodes in (None, "1") and config.rdzv_endpoint is None:
        rendezvous = ["--standalone"]
    else:
        rendezvous = ["--nnodes", str(config.nnodes or 1), "--rdzv-backend", "c10d"]
        rendezvous += ["--rdzv-endpoint", str(config.rdzv_endpoint)]
        rendezvous += ["--rdzv-id", config.rdzv_id or "fsdp2-port-compare"]
        if config.node_rank is not None:
            rendezvous += ["--node-rank", str(config.node_rank)]
    logs = [] if log_dir is None else ["--log-dir", os.path.join(log_dir, label)]
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        *rendezvous,
        "--nproc-per-node",
        str(nproc),
        *logs,
        *target,
        *args,
    ]


def check(config: Config) -> None:
    """Refuse, in one line, a request that cannot run."""
    if config.launcher not in LAUNCHERS:
        raise CompareError(f"--launcher must be one of {LAUNCHERS}")
    torchrun_only = {
        "--nproc-per-node": config.nproc_per_node,
        "--nnodes": config.nnodes,
        "--node-rank": config.node_rank,
        "--rdzv-endpoint": config.rdzv_endpoint,
        "--rdzv-id": config.rdzv_id,
    }
    if config.nproc_per_node is not None and config.nproc_per_node < 1:
        raise CompareError(f"--nproc-per-node must be >= 1, got {config.nproc_per_node}")
    if config.node_rank is not None and config.node_rank < 0:
        raise CompareError(f"--node-rank must be >= 0, got {config.node_rank}")
    check_timeout(config.timeout, CompareError)
    given = [name for name, value in torchrun_only.items() if value is not None]
    if config.launcher == "none" and given:
        raise CompareError(f"{', '.join(given)}: only with --launcher torchrun")
    several = config.nnodes not in (None, "1") or config.node_rank is not None or config.rdzv_id
    if several and config.rdzv_endpoint is None:
        raise CompareError("--nnodes, --node-rank and --rdzv-id need --rdzv-endpoint HOST:PORT")
    for script in (config.old, config.new):
        if not os.path.isfile(script):
            raise CompareError(f"no such script: {script}")
    _, metrics = patterns(config.metrics)
    tolerances(config.dtype, list(metrics), config.rtol)
    resume.check(
        config.resume_at,
        config.resume_from_old,
        config.convert,
        config.convert_args,
        CompareError,
    )


# -- reading and judging ----------------------------------------------------------------------


def parse_log(
    text: str, step: re.Pattern[str], metrics: Mapping[str, re.Pattern[str]]
) -> dict[int, dict[str, float]]:
    """step -> metric -> value, from lines that name a step; on a line the first match of
    each metric counts, across lines the last value of a step wins."""
    steps: dict[int, dict[str, float]] = {}
    for line in text.splitlines():
        at = step.search(line)
        if at is None:
            continue
        found = {}
        for name, pattern in metrics.items():
            m = pattern.search(line)
            if m is not None:
                found[name] = float(m.group(1))
        if found:
            steps.setdefault(int(at.group(1)), {}).update(found)
    return steps


def judge(
    old: Mapping[int, Mapping[str, float]],
    new: Mapping[int, Mapping[str, float]],
    tolerance: Mapping[str, float],
) -> list[str]:
    """Every way NEW departs from OLD, one line each, in step order; empty: the same."""
    failures = []
    for label, mine, other in (("old", old, new), ("new", new, old)):
        only = sorted(set(mine) - set(other))
        if only:
            failures.append(f"steps logged by {label} only: {_ranges(only)}")
    for s in sorted(set(old) & set(new)):
        for d in departures_at(s, old[s], new[s], tolerance):
            if d.baseline is None or d.value is None:
                alone = "old" if d.value is None else "new"
                failures.append(f"step {s}: {d.metric} logged by {alone} only")
            elif d.not_comparable:
                failures.append(f"step {s}: {d.metric} is NaN in both runs: not comparable")
            else:
                failures.append(
                    f"step {s}: {d.metric} {d.value!r} vs {d.baseline!r}, "
                    f"relative difference {d.difference:.2e} > {d.rtol:g}"
                )
    return failures


def _ranges(numbers: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2, 5'."""
    spans: list[list[int]] = []
    for n in numbers:
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def _status(run: Run) -> str:
    return "timed out, killed" if run.returncode is None else f"exit {run.returncode}"


def _failed(run: Run, label: str) -> str:
    return f"{label} ({run.script}) failed: {_status(run)}"


def judge_runs(config: Config, runs: dict[str, Run]) -> Result:
    """The verdict on two finished runs (NEW may be missing when OLD failed).

    On a job over several nodes only the node that holds rank 0 usually sees the log lines:
    where both runs succeeded and neither printed a step, the verdict is ``elsewhere``.
    """
    step, metric_patterns = patterns(config.metrics)
    metrics = list(metric_patterns)
    tol = tolerances(config.dtype, metrics, config.rtol)
    result = Result("error", _plain(config), tol, runs)
    for label in RUNS:
        if label in runs and not runs[label].ok:
            result.error = _failed(runs[label], label)
            return result
    logs = {label: parse_log(runs[label].stdout, step, metric_patterns) for label in RUNS}
    comparable = [
        s
        for s in sorted(set(logs["old"]) & set(logs["new"]))
        if logs["old"][s].keys() & logs["new"][s].keys()
    ]
    result.metrics = [
        m for m in metrics if any(m in v for log in logs.values() for v in log.values())
    ]
    result.steps = {
        s: {label: dict(logs[label].get(s, {})) for label in RUNS}
        for s in sorted(set(logs["old"]) | set(logs["new"]))
    }
    if not comparable:
        if not logs["old"] and not logs["new"] and config.nnodes not in (None, "1"):
            result.verdict = "elsewhere"
            return result
        silent = [label for label in RUNS if not logs[label]]
        result.error = (
            f"{' and '.join(silent)} logged no step with a metric"
            if silent
            else "the runs logged no step with a metric in common"
        )
        return result
    result.failures = judge(logs["old"], logs["new"], {m: tol[m] for m in result.metrics})
    result.verdict = "different" if result.failures else "same"
    return result


def compare(config: Config) -> Result:
    """Run OLD, then NEW (not when OLD failed), and judge them.

    SIGTERM, SIGHUP or SIGINT end the run in progress and raise ``Interrupted``.
    """
    check(config)
    runs = {}
    with signals_interrupt(), tempfile.TemporaryDirectory(prefix="fsdp2-port-compare-") as logs:
        saves = {label: Path(logs, "checkpoints", label) for label in RUNS}
        for label, script in zip(RUNS, (config.old, config.new)):
            print(f"fsdp2-port compare: running {label}: {script}", file=sys.stderr, flush=True)
            env = {}
            if config.resume_at is not None:
                saves[label].mkdir(parents=True)
                env = resume.save_env(config.resume_at, saves[label])
            runs[label] = measured_run(config, script, label, logs, env)
            if not runs[label].ok:
                break
        result = judge_runs(config, runs)
        if config.resume_at is not None and result.verdict in ("same", "different"):
            _continue(config, result, saves, logs)
        for run in result.runs.values():
            run.command = [a.replace(logs, TMP_SHOWN) for a in run.command]
    return result


class StepClock:
    """``run_command``'s ``keep``: chooses the lines that name a step (all ``parse_log``
    reads) and notes when each arrived, in seconds since the clock was made."""

    def __init__(self, step: re.Pattern[str]) -> None:
        self.step = step
        self.start = time.monotonic()
        self.arrivals: list[tuple[float, str]] = []

    def __call__(self, line: str) -> bool:
        if self.step.search(line) is None:
            return False
        self.arrivals.append((time.monotonic() - self.start, line))
        return True

    def step_times(self, metrics: Mapping[str, re.Pattern[str]]) -> dict[int, float]:
        """step -> when the first line that logged it (with a metric) arrived."""
        times: dict[int, float] = {}
        for seconds, line in self.arrivals:
            for s in parse_log(line, self.step, metrics):
                times.setdefault(s, seconds)
        return times


def measured_run(config: Config, script: str, label: str, logs: str, env: Mapping[str, str]) -> Run:
    """Run ``script`` as ``label`` (torchrun's logs and the processes' records in ``logs``),
    with ``env`` added; its time per step and its peak memory measured."""
    step, metrics = patterns(config.metrics)
    records = Path(logs, "measure", label)
    records.mkdir(parents=True)
    command = launch_command(config, script, label, logs, measure=True)
    clock = StepClock(step)
    env = {**env, MEASURE_DIR_VAR: str(records)}
    ended = run_command(command, config.timeout, env, keep=clock)
    cuda = [r["cuda_max_allocated_bytes"] for r in read_records(records)]
    return Run(
        script,
        launch_command(config, script, label),
        **asdict(ended),
        cuda_max_allocated_bytes=max(cuda, default=None),
        step_times=clock.step_times(metrics),
    )


def _continue(config: Config, result: Result, saves: dict[str, Path], logs: str) -> None:
    """``--resume-at``: NEW resumed from its own checkpoint (and from OLD's, converted), each
    judged against OLD's uninterrupted run after step K; ``result`` takes their runs and
    departures, and the errors of those that could not run (the others run all the same)."""
    assert config.resume_at is not None
    k = config.resume_at
    step, metric_patterns = patterns(config.metrics)
    tol = {m: result.tolerance[m] for m in result.metrics}
    old_log = parse_log(result.runs["old"].stdout, step, metric_patterns)
    sources = {resume.OWN: saves["new"]}
    if config.resume_from_old:
        sources[resume.FROM_OLD] = Path(logs, "checkpoints", "converted")
    errors = []
    for label, folder in sources.items():
        error = _continue_one(config, result, label, folder, saves, logs)
        if error is not None:
            errors.append(error)
            continue
        log = parse_log(result.runs[label].stdout, step, metric_patterns)
        result.continued[label] = {s: v for s, v in log.items() if s > k}
        result.failures += resume.judge_continued(old_log, log, k, tol, label)
    if errors:
        result.verdict, result.error = "error", "; ".join(errors)
    else:
        result.verdict = "different" if result.failures else "same"


def _continue_one(
    config: Config, result: Result, label: str, folder: Path, saves: dict[str, Path], logs: str
) -> str | None:
    """Run one continued NEW (converting OLD's checkpoint first for ``new-from-old``); the
    error that kept it from finishing, or None."""
    assert config.resume_at is not None
    made_by = "new" if label == resume.OWN else "old"
    if not resume.saved_anything(saves[made_by]):
        return resume.nothing_saved(made_by, config.resume_at)
    if label == resume.FROM_OLD:
        folder.mkdir(parents=True)
        print("fsdp2-port compare: converting old's checkpoint", file=sys.stderr, flush=True)
        conversions, commands, error = resume.convert_old(
            saves["old"], folder, config.convert, config.convert_args, config.timeout
        )
        for i, (run, command) in enumerate(zip(conversions, commands)):
            result.runs[f"convert-{i}"] = Run("convert-checkpoint", command, **asdict(run))
        if error is not None:
            return error
    print(f"fsdp2-port compare: running {label}: {config.new}", file=sys.stderr, flush=True)
    env = resume.resume_env(config.resume_at, folder)
    result.runs[label] = measured_run(config, config.new, label, logs, env)
    return None if result.runs[label].ok else _failed(result.runs[label], label)


def _plain(config: Config) -> dict[str, Any]:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(config).items()}


# -- time and memory --------------------------------------------------------------------------

#: The figures ``new_over_old`` divides, and how the reports name them.
PAYOFF = {
    "median_step_s": "median step",
    "first_step_s": "first step, with start-up",
    "total_s": "total",
    "peak_bytes": "peak memory",
}
MEMORY_KINDS = {"rss": "RSS, largest process", "cuda_max_allocated": "CUDA max allocated"}


def timing(run: Run) -> dict[str, Any]:
    """A run's wall time in seconds: ``total_s`` (launch to exit), ``first_step_s`` (launch to
    its first logged step's line: start-up and that step), and for each later logged step
    (``steps``) ``per_step_s``: the time since the previous logged step's line over the steps
    between them; ``median_step_s``, their median. None where there is nothing to time."""
    steps = sorted(run.step_times)
    pairs = list(itertools.pairwise(steps))
    per_step = [(run.step_times[b] - run.step_times[a]) / (b - a) for a, b in pairs]
    return {
        "total_s": _digits(run.seconds),
        "first_step_s": _digits(run.step_times[steps[0]]) if steps else None,
        "steps": [b for _, b in pairs],
        "per_step_s": [_digits(x) for x in per_step],
        "median_step_s": _digits(statistics.median(per_step)) if per_step else None,
    }


def memory(run: Run) -> dict[str, Any]:
    """A run's peak memory in bytes, ``peak_bytes`` of ``kind``: ``cuda_max_allocated``
    where a process of the run used CUDA (the largest ``torch.cuda.max_memory_allocated`` one
    reported), else ``rss`` (the largest resident set of one process); both figures beside."""
    cuda = run.cuda_max_allocated_bytes
    return {
        "kind": "rss" if cuda is None else "cuda_max_allocated",
        "peak_bytes": run.peak_rss_bytes if cuda is None else cuda,
        "peak_rss_bytes": run.peak_rss_bytes,
        "cuda_max_allocated_bytes": cuda,
    }


def new_over_old(result: Result) -> dict[str, float | None]:
    """NEW's figure over OLD's for each of ``PAYOFF``; None where either run lacks it (it
    failed, did not run, logged under two steps) or the memory is of two kinds."""
    if not set(RUNS) <= set(result.runs):
        return dict.fromkeys(PAYOFF)
    old, new = ({**timing(result.runs[r]), **memory(result.runs[r])} for r in RUNS)
    ratios = {key: _ratio(new[key], old[key]) for key in PAYOFF}
    if old["kind"] != new["kind"]:
        ratios["peak_bytes"] = None
    return ratios


def payoff_table(result: Result) -> list[list[str]]:
    """OLD's and NEW's time and memory side by side, and NEW's over OLD's: a header row, then
    a row per figure of ``PAYOFF``."""
    labels = [label for label in RUNS if label in result.runs]
    figures = {
        label: {**timing(result.runs[label]), **memory(result.runs[label])} for label in labels
    }
    kinds = {figures[label]["kind"] for label in labels}
    ratios = new_over_old(result)
    rows = [["", *labels, "new/old"]]
    for key, name in PAYOFF.items():
        if key == "peak_bytes":
            name += f" ({' | '.join(MEMORY_KINDS[k] for k in sorted(kinds))})"
        show = _bytes if key == "peak_bytes" else _seconds
        ratio = ratios[key]
        rows.append(
            [
                name,
                *(show(figures[label][key]) for label in labels),
                "" if ratio is None else f"{ratio:.2f}",
            ]
        )
    return rows


def _payoff_text(result: Result) -> list[str]:
    """The text report's lines on time and memory."""
    rows = payoff_table(result)
    first = max(len(row[0]) for row in rows)
    lines = ["", f"time and memory ({NOT_JUDGED}):"]
    for row in rows:
        lines.append("  " + row[0].ljust(first) + "".join(f"{c:>12}" for c in row[1:]))
    if result.config["forbid_fsdp1"]:
        lines.append(f"  {FORBID_COST}")
    return lines


def _digits(seconds: float) -> float:
    return float(f"{seconds:.4g}")


def _ratio(new: float | None, old: float | None) -> float | None:
    return None if new is None or not old else round(new / old, 3)


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.2f} s" if value >= 1 else f"{value * 1e3:.1f} ms"


def _bytes(value: int | None) -> str:
    if value is None:
        return "-"
    return f"{value / 2**30:.2f} GiB" if value >= 2**30 else f"{value / 2**20:.1f} MiB"


# -- reporting --------------------------------------------------------------------------------


def tail(text: str, lines: int = TAIL_LINES) -> str:
    return "\n".join(text.rstrip("\n").splitlines()[-lines:])


def format_error(result: Result) -> str:
    """The error, then the tail of the failing run's output (for standard error)."""
    out = [f"fsdp2-port compare: {result.error}"]
    failed = next((r for r in result.runs.values() if not r.ok), None)
    shown = [failed] if failed else list(result.runs.values())
    for run in shown:
        for stream in ("stdout", "stderr"):
            text = getattr(run, stream)
            if text.strip():
                out.append(f"--- {run.script}: last {TAIL_LINES} lines of its {stream}")
                out.append(tail(text))
        if not (run.stdout.strip() or run.stderr.strip()):
            out.append(f"--- {run.script}: printed nothing")
    return "\n".join(out)


def headline(result: Result) -> str:
    n = len(result.failures)
    return {
        "same": "same: every metric at every step within tolerance",
        "different": f"different: {n} departure{'s' * (n != 1)} from old",
        "elsewhere": "no step logged on this node; the node that runs rank 0 judges",
    }.get(result.verdict, f"error: {result.error}")


def format_text(result: Result) -> str:
    """The table of both runs side by side, the tolerances and the verdict."""
    lines = [
        f"{label}: {run.script} ({_status(run)}, {run.seconds:.1f} s)"
        for label, run in result.runs.items()
    ]
    lines += [f"command: {' '.join(result.runs['old'].command)}", ""]
    if result.verdict == "elsewhere":
        lines += [*_payoff_text(result), f"VERDICT: {headline(result)}"]
        return "\n".join(lines)
    widths = {m: max(14, len(m) + 4) for m in result.metrics}
    header = [f"{'step':>4}"]
    for m in result.metrics:
        header += [f"{m + ' old':>{widths[m]}}", f"{m + ' new':>{widths[m]}}", f"{'rel diff':>8}"]
    lines.append("  ".join(header))
    for s, by_run in result.steps.items():
        row = [f"{s:>4}"]
        for m in result.metrics:
            a, b = by_run["old"].get(m), by_run["new"].get(m)
            diff = "" if a is None or b is None else f"{relative_difference(a, b):.1e}"
            row += [_cell(a, widths[m]), _cell(b, widths[m]), f"{diff:>8}"]
        lines.append("  ".join(row))
    lines += _continued_rows(result, widths)
    lines += _payoff_text(result)
    rtols = ", ".join(f"{m} rtol {result.tolerance[m]:g}" for m in result.metrics)
    lines.append(f"tolerance ({result.config['dtype']}): {rtols}")
    lines.append(f"VERDICT: {headline(result)}")
    if result.failures:
        lines.extend(f"  {f}" for f in result.failures[:10])
        if len(result.failures) > 10:
            lines.append(f"  ... and {len(result.failures) - 10} more")
    return "\n".join(lines)


def _continued_rows(result: Result, widths: Mapping[str, int]) -> list[str]:
    """Each continued run's steps beside OLD's uninterrupted ones (``--resume-at``)."""
    whence = {resume.OWN: "NEW's own checkpoint", resume.FROM_OLD: "OLD's, converted"}
    lines = []
    for label, steps in result.continued.items():
        k = result.config["resume_at"]
        lines += ["", f"{label}: resumed after step {k} from {whence.get(label, label)}"]
        for s, values in steps.items():
            row = [f"{s:>4}"]
            for m in result.metrics:
                a, b = result.steps.get(s, {}).get("old", {}).get(m), values.get(m)
                diff = "" if a is None or b is None else f"{relative_difference(a, b):.1e}"
                row += [_cell(a, widths[m]), _cell(b, widths[m]), f"{diff:>8}"]
            lines.append("  ".join(row))
    return lines


def _cell(value: float | None, width: int) -> str:
    return " " * width if value is None else f"{value!r:>{width}}"  # the digits as logged


def as_json(result: Result) -> dict[str, Any]:
    """What ``--format json`` prints, for every outcome; runs carry the tail of their output."""
    runs = {
        label: {
            "script": r.script,
            "command": r.command,
            "returncode": r.returncode,
            "seconds": round(r.seconds, 3),
            "stdout_tail": tail(r.stdout),
            "stderr_tail": tail(r.stderr),
            "time": timing(r),
            "memory": memory(r),
        }
        for label, r in result.runs.items()
    }
    steps = [
        {
            "step": s,
            **by_run,
            "rel_diff": {
                m: relative_difference(by_run["old"][m], by_run["new"][m])
                for m in result.metrics
                if m in by_run["old"] and m in by_run["new"]
            },
        }
        for s, by_run in result.steps.items()
    ]
    return {
        "verdict": result.verdict,
        "exit_code": result.exit_code,
        "error": result.error,
        "failures": result.failures,
        "tolerance": result.tolerance,
        "metrics": result.metrics,
        "steps": steps,
        "runs": runs,
        "new_over_old": new_over_old(result),
        "config": result.config,
        "continued": {
            label: [{"step": s, **values} for s, values in by_step.items()]
            for label, by_step in result.continued.items()
        },
    }


def error_json(message: str, code: int, details: str) -> dict[str, Any]:
    """What ``--format json`` prints for a refused or interrupted request (``details`` go to
    standard error only)."""
    return error_payload(message, code)


def html_report(result: Result) -> str:
    """The result as one self-contained page (``fsdp2-port compare --html``)."""
    steps = list(result.steps)
    curves = {
        m: {label: [result.steps[s][label].get(m) for s in steps] for label in RUNS}
        for m in result.metrics
    }
    for label, by_step in result.continued.items():
        for m in result.metrics:
            curves[m][label] = [by_step.get(s, {}).get(m) for s in steps]
    rel_diffs = {m: relative_differences(curves[m], "old") for m in result.metrics}
    details = list(result.failures)
    if result.verdict == "error":
        details = format_error(result).splitlines()[1:]
    settings: dict[str, object] = {
        f"{label}": f"{run.script} ({_status(run)}, {run.seconds:.1f} s)"
        for label, run in result.runs.items()
    }
    settings.update({f"{label} command": " ".join(r.command) for label, r in result.runs.items()})
    rtols = ", ".join(f"{m} {t:g}" for m, t in result.tolerance.items())
    settings.update({"dtype": result.config["dtype"], "relative tolerance": rtols})
    note = NOT_JUDGED[0].upper() + NOT_JUDGED[1:] + "."
    if result.config["forbid_fsdp1"]:
        note += f" {FORBID_COST[0].upper()}{FORBID_COST[1:]}."
    return report_html.render(
        title=f"fsdp2-port compare: {result.config['old']} vs {result.config['new']}",
        verdict=f"VERDICT: {headline(result)}",
        outcome=outcome(result.verdict),
        details=details,
        steps=steps,
        curves=curves,
        rel_diffs=rel_diffs,
        tolerance=result.tolerance,
        baseline="old",
        settings=settings,
        payoff=report_html.Payoff(note, payoff_table(result), _seconds_per_step(result, steps)),
    )


def _seconds_per_step(result: Result, steps: list[int]) -> dict[str, list[float | None]]:
    """Each run's seconds per step (``timing``), one per step of ``steps`` (None: untimed)."""
    series = {}
    for label in [*RUNS, *result.continued]:
        if label in result.runs:
            timed = timing(result.runs[label])
            by_step = dict(zip(timed["steps"], timed["per_step_s"]))
            series[label] = [by_step.get(s) for s in steps]
    return series
