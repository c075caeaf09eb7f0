"""Do two training scripts train the same? Run both the same way and read what each logs.

``fsdp2-port compare OLD NEW -- ARGS`` runs OLD, then NEW, with the same arguments (through
torchrun by default, or directly for scripts that start their own ranks), reads the per-step
metrics each prints on its standard output, and judges NEW against OLD step by step with
one relative tolerance per metric. Invariants:

- a metric belongs to the step named on the same line (``step N``); lines without a step
  are not read; for each step and metric the last value logged wins;
- a step logged by one run only, a metric one run logs at a step and the other does not, a
  relative difference beyond the tolerance, or a NaN (in NEW where OLD is a number, in OLD,
  or in both: NaN against NaN is not comparable, never "same") makes the runs *different*;
- a run that fails, times out, or logs no step both runs can be compared at is an *error*,
  reported with that run's exit status and the tail of its output;
- nothing of a run outlives it: at its end, its timeout, or a signal to compare, every
  process that inherited its run id is ended (SIGTERM, SIGKILL ``GRACE_S`` later).

Imports no torch: it launches the runs and reads their output.
"""

from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import IO, Any

from fsdp2_port.prove import report_html
from fsdp2_port.prove.launch import GRACE_S as GRACE_S  # re-exported: compare's bounds
from fsdp2_port.prove.launch import KILL_WAIT_S as KILL_WAIT_S
from fsdp2_port.prove.launch import SIGNALS, end_processes, signals_interrupt
from fsdp2_port.prove.launch import Interrupted as Interrupted
from fsdp2_port.prove.launch import run_pids as _run_pids

NUMBER = r"[-+]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf)"
STEP = r"(?i)\bstep\b\s*[:=]?\s*(\d+)"
DEFAULT_METRICS = {
    "loss": rf"(?i)\bloss\b\s*[:=]?\s*({NUMBER})",
    "grad_norm": rf"(?i)\b(?:grad[ _-]?norm|gnorm|norm)\b\s*[:=]?\s*({NUMBER})",
}
# Relative tolerances, one per metric, from the precision the runs compute in.
# fp32: a faithful migration changes only the order of fp32 sums (FSDP1 reduces flat
# parameters, FSDP2 each parameter; the norm adds its pieces in another order), a few ulps
# (1.2e-7) per operation; 1e-5 leaves ~100 ulps for that to compound over layers and steps,
# and is still orders of magnitude below what a real change moves (the rank-local clip
# shrinks a 2-rank norm by ~30%).
# bf16 compute: the sums may still be in fp32, but when their order flips a rounding to bf16
# (unit roundoff 2^-9 ~ 2e-3) a value moves by up to one bf16 step; a loss or norm averages
# many such values, so aggregates move far less (~1e-4 on the demo). 2e-3 is one bf16
# rounding: anything beyond it is not rounding noise.
TOLERANCE = {"fp32": 1e-5, "bf16": 2e-3}
LAUNCHERS = ("torchrun", "none")
RUNS = ("old", "new")
TAIL_LINES = 40  # torchrun alone prints ~25 lines after a worker's own error
# Owning the processes of a run (``fsdp2_port.prove.launch``, shared with verify): every one
# inherits RUN_ID_VAR; ending a run sends SIGTERM, then SIGKILL to what is left after GRACE_S;
# READ_WAIT_S bounds the wait for the end of the run's output.
RUN_ID_VAR = "FSDP2_PORT_COMPARE_RUN"
READ_WAIT_S = 2.0


class CompareError(ValueError):
    """A bad request (pattern, tolerance, launcher options): one line, before any run."""


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


@dataclass
class Run:
    script: str
    command: list[str]
    returncode: int | None = None  # None: timed out (killed)
    seconds: float = 0.0
    stdout: str = ""
    stderr: str = ""

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

    @property
    def exit_code(self) -> int:
        return {"same": 0, "elsewhere": 0, "different": 1}.get(self.verdict, 2)


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
    """One relative tolerance per metric: ``TOLERANCE[dtype]`` unless overridden."""
    if dtype not in TOLERANCE:
        raise CompareError(f"--dtype must be one of {sorted(TOLERANCE)}")
    unknown = sorted(set(overrides) - set(metrics))
    if unknown:
        raise CompareError(f"--rtol names no metric: {unknown}; metrics: {list(metrics)}")
    bad = {name: x for name, x in overrides.items() if not 0 <= x < math.inf}
    if bad:
        raise CompareError(f"--rtol must be a finite number >= 0, got {bad}")
    return {name: float(overrides.get(name, TOLERANCE[dtype])) for name in metrics}


def launch_command(config: Config, script: str, label: str) -> list[str]:
    """The command line of one run; ``{run}`` in the script's arguments becomes ``label``."""
    args = [a.replace("{run}", label) for a in config.script_args]
    if config.launcher == "none":
        return [sys.executable, script, *args]
    nproc = 2 if config.nproc_per_node is None else config.nproc_per_node
    if config.nnodes in (None, "1") and config.rdzv_endpoint is None:
        rendezvous = ["--standalone"]
    else:
        rendezvous = ["--nnodes", str(config.nnodes or 1), "--rdzv-backend", "c10d"]
        rendezvous += ["--rdzv-endpoint", str(config.rdzv_endpoint)]
        rendezvous += ["--rdzv-id", config.rdzv_id or "fsdp2-port-compare"]
        if config.node_rank is not None:
            rendezvous += ["--node-rank", str(config.node_rank)]
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        *rendezvous,
        "--nproc-per-node",
        str(nproc),
        script,
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
    if not 0 < config.timeout < math.inf:
        raise CompareError(
            f"--timeout must be a finite number of seconds > 0, got {config.timeout}"
        )
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


# -- running ----------------------------------------------------------------------------------


def run_script(script: str, command: list[str], timeout: float) -> Run:
    """Run ``command`` to completion and leave nothing of it running.

    The run gets its own session and ``RUN_ID_VAR`` set to a value unique to it, which every
    process it starts inherits, also one that starts a session of its own. When the launcher
    exits, at ``timeout``, and on any exception (``Interrupted``, Ctrl-C), ``end_run`` ends
    every process of the run. Standard output unbuffered, so a run killed at the deadline
    still shows its last lines.
    """
    run_id = uuid.uuid4().hex
    env = {**os.environ, "PYTHONUNBUFFERED": os.environ.get("PYTHONUNBUFFERED", "1")}
    env[RUN_ID_VAR] = run_id
    start = time.monotonic()
    proc = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,  # no terminal signal reaches it: compare decides
    )
    outputs = [_reader(proc.stdout), _reader(proc.stderr)]
    try:
        returncode: int | None = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        returncode = None
    finally:
        end_run(proc, run_id)
    stdout, stderr = (read() for read in outputs)
    return Run(script, command, returncode, time.monotonic() - start, stdout, stderr)


def _reader(stream: IO[str] | None) -> Callable[[], str]:
    """Read ``stream`` to its end in a thread; the function returned gives what was read,
    waiting at most ``READ_WAIT_S`` for the end (a pipe some stray process still holds)."""
    lines: list[str] = []
    thread = threading.Thread(target=lambda: lines.extend(stream or ()), daemon=True)
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    try:  # the thread inherits the mask: compare's signals reach the main thread only
        thread.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)

    def result() -> str:
        thread.join(READ_WAIT_S)
        return "".join(list(lines))

    return result


def end_run(proc: subprocess.Popen, run_id: str, grace: float | None = None) -> None:
    """SIGTERM to the run's process group and to every process carrying its run id, SIGKILL
    to whatever is left ``grace`` seconds later (``GRACE_S``); returns when nothing of the
    run is left, or ``KILL_WAIT_S`` after the SIGKILL. Signals to compare wait meanwhile."""
    end_processes(
        run_id,
        RUN_ID_VAR,
        groups=[proc.pid],
        exited=lambda: proc.poll() is not None,
        grace=grace,
    )


def run_pids(run_id: str) -> list[int]:
    """Live processes (not zombies) whose environment holds ``RUN_ID_VAR=run_id``."""
    return _run_pids(run_id, RUN_ID_VAR)


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


def relative_difference(old: float, new: float) -> float:
    """|new - old| / |old|: 0 when equal, inf against a zero or a NaN in either run."""
    if old == new:
        return 0.0
    if old == 0 or math.isnan(old) or math.isnan(new):
        return math.inf
    return abs(new - old) / abs(old)


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
        for name, rtol in tolerance.items():
            a, b = old[s].get(name), new[s].get(name)
            if a is None and b is None:
                continue
            if a is None or b is None:
                failures.append(f"step {s}: {name} logged by {'old' if b is None else 'new'} only")
                continue
            diff = relative_difference(a, b)
            if math.isnan(a) and math.isnan(b):
                failures.append(f"step {s}: {name} is NaN in both runs: not comparable")
            elif not diff <= rtol:
                failures.append(
                    f"step {s}: {name} {b!r} vs {a!r}, relative difference {diff:.2e} > {rtol:g}"
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
    with signals_interrupt():
        for label, script in zip(RUNS, (config.old, config.new)):
            print(f"fsdp2-port compare: running {label}: {script}", file=sys.stderr, flush=True)
            command = launch_command(config, script, label)
            runs[label] = run_script(script, command, config.timeout)
            if not runs[label].ok:
                break
    return judge_runs(config, runs)


def _plain(config: Config) -> dict[str, Any]:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(config).items()}


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
        lines.append(f"VERDICT: {headline(result)}")
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
    rtols = ", ".join(f"{m} rtol {result.tolerance[m]:g}" for m in result.metrics)
    lines.append(f"tolerance ({result.config['dtype']}): {rtols}")
    lines.append(f"VERDICT: {headline(result)}")
    if result.failures:
        lines.extend(f"  {f}" for f in result.failures[:10])
        if len(result.failures) > 10:
            lines.append(f"  ... and {len(result.failures) - 10} more")
    return "\n".join(lines)


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
        "config": result.config,
    }


def html_report(result: Result) -> str:
    """The result as one self-contained page (``fsdp2-port compare --html``)."""
    steps = list(result.steps)
    curves = {
        m: {label: [result.steps[s][label].get(m) for s in steps] for label in RUNS}
        for m in result.metrics
    }
    rel_diffs = {
        m: {
            "new": [
                None if a is None or b is None else relative_difference(a, b)
                for a, b in zip(curves[m]["old"], curves[m]["new"])
            ]
        }
        for m in result.metrics
    }
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
    return report_html.render(
        title=f"fsdp2-port compare: {result.config['old']} vs {result.config['new']}",
        verdict=f"VERDICT: {headline(result)}",
        outcome={"same": "pass", "elsewhere": "pass", "different": "fail"}.get(
            result.verdict, "error"
        ),
        details=details,
        steps=steps,
        curves=curves,
        rel_diffs=rel_diffs,
        tolerance=result.tolerance,
        baseline="old",
        settings=settings,
    )
