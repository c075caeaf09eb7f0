"""The one runner of ``verify``, ``compare`` and the tests: it owns every process it starts.

- Every process of a run inherits a run id in its environment and is found again in
  ``/proc/PID/environ`` whatever its session or group (``run_pids``); ending a run sends it
  SIGTERM, then SIGKILL ``GRACE_S`` later (``end_processes``). Nothing of a run outlives it:
  not at its end, a failure, its timeout, nor an exception in the caller.
- ``run_command``: one command line (compare's runs), its output read to the end as it comes,
  in bounded memory: the lines the caller asks for and the last ones; the largest resident set
  any one of its processes reached (``wait4``'s ``ru_maxrss``).
- ``run_ranks``: a function on N local ranks (verify, tests); a hung collective is killed at the
  timeout (``RankTimeout``), a failing rank ends the others at once (``RankFailure``, every
  failed rank's traceback, the first cause first).
- ``signals_interrupt``: SIGTERM, SIGHUP, SIGINT raise ``Interrupted`` (exit 128 + n).

Imports no torch until ranks start: ``compare`` runs commands without it.
"""

from __future__ import annotations

import collections
import heapq
import multiprocessing
import multiprocessing.forkserver
import multiprocessing.resource_tracker
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import IO, Any

# Children are forked from a server that has imported torch but run no op (no OpenMP pool),
# which starts ranks in a fraction of the time a fresh interpreter takes. (The stdlib's
# context: ``torch.multiprocessing.get_context`` returns this same object.)
_CTX = multiprocessing.get_context("forkserver")
_CTX.set_forkserver_preload(["torch", "torch.distributed", "fsdp2_port.prove.launch"])

# -- owning processes ---------------------------------------------------------------------------

SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
# SIGTERM first, SIGKILL to what is left after GRACE_S (time for a launcher to stop its
# workers and for a worker's own SIGTERM handler); KILL_WAIT_S bounds the wait after the
# SIGKILL; READ_WAIT_S the wait for the end of a command's output.
GRACE_S, KILL_WAIT_S, POLL_S, READ_WAIT_S = 5.0, 2.0, 0.05, 2.0
# The variables that carry a run id: into every process of a ``run_command`` run, and into
# every process of ``run_ranks``' ranks (see ``_ranks_id``).
COMMAND_RUN_VAR = "FSDP2_PORT_COMPARE_RUN"
RANKS_RUN_VAR = "FSDP2_PORT_RANKS_RUN"


def backend(device: str) -> str:
    """The process group backend for ranks on ``device`` ("cpu", "cuda")."""
    return "nccl" if device == "cuda" else "gloo"


def run_pids(run_id: str, var: str) -> list[int]:
    """Live processes (not zombies) whose environment holds ``var=run_id``.

    Read from ``/proc/PID/environ``, the environment each process was started with: an
    inherited variable is found whatever its session or group. Empty where there is no /proc.
    """
    needle = f"{var}={run_id}".encode()
    found = []
    for entry in os.scandir("/proc") if os.path.isdir("/proc") else ():
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):  # a zombie's reads empty
                    found.append(int(entry.name))
        except OSError:  # gone meanwhile, or another user's
            continue
    return found


def end_processes(
    run_id: str,
    var: str,
    *,
    groups: Iterable[int] = (),
    pids: Iterable[int] = (),
    spare: Iterable[int] = (),
    exited: Callable[[], bool] = lambda: True,
    grace: float | None = None,
) -> None:
    """End a run: SIGTERM to its process ``groups``, its ``pids`` and every process carrying
    ``var=run_id`` (but those in ``spare``), SIGKILL to whatever is left ``grace`` seconds
    later (``GRACE_S``). Returns once ``exited()`` holds and nothing of the run is left, or
    ``KILL_WAIT_S`` after the SIGKILL. Signals to this process wait meanwhile."""
    groups, pids, spare = list(groups), list(pids), set(spare)

    def left() -> list[int]:
        mine = [p for p in run_pids(run_id, var) if p not in spare]
        return mine + [p for p in pids if p not in mine and _alive(p)]

    def send(sig: int) -> None:
        for target in groups:
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(target, sig)
        for pid in left():
            with suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    def gone(seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while True:
            if exited() and not left():
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)

    mask = _block(SIGNALS)
    try:
        if gone(0):
            return
        send(signal.SIGTERM)
        if gone(GRACE_S if grace is None else grace):
            return
        deadline = time.monotonic() + KILL_WAIT_S
        while time.monotonic() < deadline:
            send(signal.SIGKILL)
            if gone(POLL_S):
                return
    finally:
        _unblock(mask)


def _stat(pid: int) -> list[bytes]:
    """The fields of ``/proc/PID/stat`` after the command name (state, parent, ...); empty
    when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return []


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    return _stat(pid)[:1] not in ([], [b"Z"])  # gone, or a zombie


def _block(signals: Iterable[int]) -> Any:
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.pthread_sigmask(signal.SIG_BLOCK, signals)


def _unblock(mask: Any) -> None:
    if mask is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


class Interrupted(Exception):
    """This process received SIGTERM, SIGHUP or SIGINT; its runs have been ended."""

    def __init__(self, signum: int, what: str = "the runs") -> None:
        self.signum = signum
        name = signal.Signals(signum).name
        super().__init__(f"interrupted by {name}: {what} were stopped")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


@contextmanager
def signals_interrupt(what: str = "the runs") -> Iterator[None]:
    """Inside, the first of ``SIGNALS`` raises ``Interrupted`` (later ones are ignored); the
    handlers are restored on the way out. Only the main thread can take signals."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def handler(signum: int, frame: object) -> None:
        if not received:
            received.append(signum)
            raise Interrupted(signum, what)

    previous = {sig: signal.signal(sig, handler) for sig in SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


# -- commands -----------------------------------------------------------------------------------


@dataclass
class CommandRun:
    """A finished ``run_command``: its exit status (None: killed at the timeout), how long it
    took, what it printed (the lines its ``keep`` chose and its last ``TAIL_KEPT``, in their
    order), and its peak RSS (None: killed at the timeout)."""

    returncode: int | None
    seconds: float
    stdout: str
    stderr: str
    peak_rss_bytes: int | None = None


#: ``ru_maxrss``'s unit: kibibytes on Linux, bytes on macOS.
MAXRSS_UNIT = 1 if sys.platform == "darwin" else 1024


#: How many of a command's last lines ``run_command`` keeps of each stream, and how long a
#: line may be (the rest of a longer one is dropped): memory stays bounded whatever it prints.
TAIL_KEPT, LINE_LIMIT = 200, 64 * 1024


def run_command(
    command: list[str],
    timeout: float,
    env: Mapping[str, str] | None = None,
    keep: Callable[[str], bool] | None = None,
) -> CommandRun:
    """Run ``command`` to completion and leave nothing of it running.

    The run gets its own session (no terminal signal reaches it: the caller decides) and
    ``COMMAND_RUN_VAR`` set to an id of its own, which every process it starts inherits. When
    the command exits, at ``timeout``, and on any exception (``Interrupted``, Ctrl-C), every
    process of the run is ended (``end_processes``). Standard output is unbuffered, so a run
    killed at the deadline still shows its last lines. Of each stream, the lines ``keep``
    chooses (standard output only) and the last ``TAIL_KEPT`` are kept, as they are read.
    ``env``: variables added to this process's environment for the run. ``peak_rss_bytes``
    is the largest resident set of one process among the command and every descendant reaped
    before it exited (torchrun's workers, ranks a script joins; not a process left to others).
    """
    run_id = uuid.uuid4().hex
    extra = dict(env or {})
    env = {**os.environ, "PYTHONUNBUFFERED": os.environ.get("PYTHONUNBUFFERED", "1"), **extra}
    env[COMMAND_RUN_VAR] = run_id
    start = time.monotonic()
    proc = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        env=env,
        start_new_session=True,
    )
    outputs = [_reader(proc.stdout, keep), _reader(proc.stderr, None)]
    try:
        returncode, peak = _reap(proc, timeout)
    finally:
        end_processes(
            run_id, COMMAND_RUN_VAR, groups=[proc.pid], exited=lambda: proc.poll() is not None
        )
    stdout, stderr = (read() for read in outputs)
    return CommandRun(returncode, time.monotonic() - start, stdout, stderr, peak)


def _reap(proc: subprocess.Popen, timeout: float) -> tuple[int | None, int | None]:
    """(exit status, peak RSS in bytes) once ``proc`` exits; (None, None) after ``timeout``
    seconds, ``proc`` still running. Reaped by ``wait4``, whose ``ru_maxrss`` covers the
    process and the descendants it reaped; ``proc.returncode`` is set as ``wait`` sets it."""
    deadline = time.monotonic() + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return proc.returncode, usage.ru_maxrss * MAXRSS_UNIT
        if time.monotonic() >= deadline:
            return None, None
        time.sleep(POLL_S)


def _lines(stream: IO[str]) -> Iterator[str]:
    """The lines of ``stream``, each cut to ``LINE_LIMIT`` characters (and its line end)."""
    while True:
        line = stream.readline(LINE_LIMIT)
        if not line:
            return
        if len(line) == LINE_LIMIT and not line.endswith("\n"):
            rest = line
            while rest and not rest.endswith("\n"):  # drop the rest of an overlong line
                rest = stream.readline(LINE_LIMIT)
            line += "\n"
        yield line


def _reader(stream: IO[str] | None, keep: Callable[[str], bool] | None) -> Callable[[], str]:
    """Read ``stream`` to its end in a thread, keeping the lines ``keep`` chooses and the last
    ``TAIL_KEPT``; the function returned gives them in order, waiting at most ``READ_WAIT_S``
    for the end (a pipe some stray process still holds)."""
    chosen: list[tuple[int, str]] = []
    last: collections.deque[tuple[int, str]] = collections.deque(maxlen=TAIL_KEPT)
    lock = threading.Lock()

    def read() -> None:
        for index, line in enumerate(_lines(stream) if stream else ()):
            with lock:
                if keep is not None and keep(line):
                    chosen.append((index, line))
                else:
                    last.append((index, line))

    thread = threading.Thread(target=read, daemon=True)
    mask = _block(SIGNALS)
    try:  # the thread inherits the mask: signals reach the main thread only
        thread.start()
    finally:
        _unblock(mask)

    def result() -> str:
        thread.join(READ_WAIT_S)
        with lock:
            return "".join(line for _, line in heapq.merge(chosen, last))

    return result


# -- ranks --------------------------------------------------------------------------------------

_RANKS_ID: dict[int, str] = {}  # this process's id -> the run id its ranks inherit


def _ranks_id() -> str:
    """The run id of this process's ranks, made sure to be in the forkserver's environment.

    Ranks are forked by the forkserver and so start with the environment the forkserver was
    started with, which is what ``/proc/PID/environ`` shows: the variable is set while the
    forkserver (and the resource tracker it starts) start, and removed again, so that other
    processes this one starts do not carry it. The id is this process's (keyed by pid: a
    forked child makes its own); the forkserver itself carries it too, see ``_spare``.
    """
    run_id = _RANKS_ID.setdefault(os.getpid(), f"{os.getpid()}-{uuid.uuid4().hex}")
    saved = os.environ.get(RANKS_RUN_VAR)
    os.environ[RANKS_RUN_VAR] = run_id
    try:
        multiprocessing.forkserver.ensure_running()
    finally:
        if saved is None:
            del os.environ[RANKS_RUN_VAR]
        else:
            os.environ[RANKS_RUN_VAR] = saved
    return run_id


def _spare(run_id: str, forkserver: bool) -> list[int]:
    """The processes carrying ``run_id`` that this process started itself and that end with
    it: the resource tracker (always: killed, it would be restarted and then complain about
    every semaphore it no longer knows) and, unless ``forkserver`` is False, the forkserver
    (kept for the next ``run_ranks``)."""
    me = str(os.getpid()).encode()
    tracker = getattr(multiprocessing.resource_tracker._resource_tracker, "_pid", None)
    return [
        pid
        for pid in run_pids(run_id, RANKS_RUN_VAR)
        if _stat(pid)[1:2] == [me] and (forkserver or pid == tracker)
    ]


class RankFailure(RuntimeError):
    """One or more ranks raised; the message holds their tracebacks."""


class RankTimeout(TimeoutError):
    """Some ranks were still running at the deadline and were killed."""


def exit_now(code: int = 0) -> None:
    """Flush stdout and stderr and end this process without the interpreter's shutdown.

    For a rank that torchrun or ``mp.spawn`` started, once its work is written. With torch 2.13
    on gloo, a gloo worker thread may hold the last reference to a finished all-reduce and free
    it (and so the Python tensors it kept) while Python shuts down; taking the GIL then ends the
    thread inside a ``noexcept`` destructor and the rank aborts ("terminate called without an
    active exception", SIGABRT), about 1 run in 40 of a 2-rank script under load here. Not
    shutting down leaves nothing to race with. Ranks of ``run_ranks`` need it not: their
    forkserver children already end this way.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(
    rank: int, world_size: int, port: int, backend: str, fn: Callable, args: tuple, errors
) -> None:
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank))
    try:
        if backend == "nccl":
            torch.cuda.set_device(rank)
        dist.init_process_group(backend, rank=rank, world_size=world_size)
        try:
            fn(rank, world_size, *args)
        finally:
            dist.destroy_process_group()
    except BaseException:
        errors.put((rank, traceback.format_exc()))
        raise SystemExit(1) from None


def run_ranks(
    fn: Callable[..., Any],
    world_size: int,
    *args: Any,
    timeout: float = 120.0,
    backend: str = "gloo",
) -> None:
    """Call ``fn(rank, world_size, *args)`` on ``world_size`` local ranks; raise on any failure.

    ``fn`` must be importable (a module-level function) and ``args`` picklable. The process
    group is torchrun-compatible (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_*``).

    Nothing of the run outlives it: when it returns or raises (a failure, the timeout, an
    exception in this process such as ``Interrupted`` or KeyboardInterrupt), every rank and
    every process a rank started, also in a session of its own, is ended (``end_processes``
    by ``RANKS_RUN_VAR``). On an exception in this process the forkserver goes too; the resource
    tracker ends with this process.
    """
    run_id = _ranks_id()
    errors = _CTX.SimpleQueue()
    port = free_port()
    procs = [
        _CTX.Process(
            target=_worker, args=(r, world_size, port, backend, fn, args, errors), daemon=True
        )
        for r in range(world_size)
    ]
    finished = False
    try:
        for p in procs:
            p.start()
        _wait(procs, timeout)
        finished = True
    finally:
        # ranks that ended badly on their own, before any is killed here
        died = {r: p.exitcode for r, p in enumerate(procs) if p.exitcode not in (None, 0)}
        failed_first = bool(died)
        hung = [r for r, p in enumerate(procs) if p.is_alive()]
        reports = _drain(errors)  # failures from before any rank is killed
        for p in procs:
            if p.pid is not None and p.is_alive():
                p.kill()
        end_processes(
            run_id,
            RANKS_RUN_VAR,
            pids=[p.pid for p in procs if p.pid is not None],
            spare=_spare(run_id, forkserver=finished),
            exited=lambda: not any(p.pid is not None and p.is_alive() for p in procs),
        )
        for p in procs:
            if p.pid is not None:
                p.join()
    if hung and not failed_first and not reports:
        # What peers report now (a closed connection) is the kill's echo, not a cause.
        raise RankTimeout(f"ranks {hung} of {world_size} did not finish: a hung collective?")
    reports += _drain(errors)
    if reports:  # in the order they failed: the first is the cause, the rest its echoes
        reported = {rank for rank, _ in reports}
        # a rank that died without a traceback (a signal, os._exit) came first: its peers'
        # reports ("connection closed by peer") are its echoes
        silent = [
            f"rank {rank} of {world_size} died without a report: {_exit_meaning(code)}"
            for rank, code in died.items()
            if rank not in reported
        ]
        raise RankFailure(
            "\n".join(
                [*silent, *(f"rank {rank} of {world_size} failed:\n{tb}" for rank, tb in reports)]
            )
        )
    if died:  # no rank reported: say how the first ones ended (the rest were stopped here)
        raise RankFailure(
            "\n".join(
                f"rank {rank} of {world_size} died without a report: {_exit_meaning(code)}"
                for rank, code in died.items()
            )
        )
    bad = [(r, p.exitcode) for r, p in enumerate(procs) if p.exitcode != 0]
    if bad:
        raise RankFailure(f"ranks exited abnormally (rank, exit code): {bad}")


def _exit_meaning(code: int) -> str:
    """``-6`` -> "killed by SIGABRT (exit code -6)"; a positive code as it is."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name} (exit code {code})"
        except ValueError:
            pass
    return f"exit code {code}"


def _wait(procs: list, timeout: float) -> None:
    """Until every rank has ended, one has failed, or ``timeout`` seconds have passed. Polls
    rather than joins in order: a rank that fails leaves its peers waiting in a collective,
    and they are killed at once instead of at the deadline."""
    deadline = time.monotonic() + timeout
    while any(p.is_alive() for p in procs) and time.monotonic() < deadline:
        if any(p.exitcode not in (None, 0) for p in procs):
            break
        time.sleep(0.02)


def _drain(queue) -> list:
    """Everything a ``SimpleQueue`` holds now."""
    items = []
    while not queue.empty():
        items.append(queue.get())
    return items
