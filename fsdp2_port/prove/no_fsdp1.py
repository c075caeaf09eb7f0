"""Does a run execute FSDP1 code from outside torch? A guard, and a command that runs a script
under it.

FSDP1 is deprecated and leaving torch; a migrated program must not run its implementation,
neither in the user's code nor inside ``fsdp2_port``. What counts, for each Python-level call
(``sys.setprofile`` in this thread, ``threading.setprofile`` in threads started meanwhile):

- **the callee** is FSDP1 code: its code object's file is under ``torch/distributed/fsdp/`` but
  not under ``torch/distributed/fsdp/_fully_shard/`` (FSDP2). A module's body (``<module>``,
  run once by ``import``) is not counted: importing FSDP1 runs no FSDP1 *call* by the program,
  ``fsdp2_port`` accepts FSDP1's enums and dataclasses as arguments, and a migrated file's
  imports are the codemod's to check (statically). Dataclass-generated methods
  (``MixedPrecision(...)``, their ``__eq__``) are compiled from ``"<string>"`` and enum members
  live in ``enum.py``: neither is FSDP1 code, so building FSDP1's config values never counts.
- **the caller** is outside torch: the nearest frame below the callee that is not a pass-through
  (the standard library, ``"<string>"`` and frozen import frames, ``typing_extensions``, torch's
  ``no_grad``/``enable_grad`` decorator wrappers) has its file outside the torch package. So
  ``with FSDP.state_dict_type(...)`` counts (its generator is entered from contextlib, itself
  entered from the user's ``with``), and so do a ``@torch.no_grad`` FSDP1 method the user
  calls, and an FSDP1 ``forward`` or forward hook run by the user's ``model(x)``
  (``nn.Module``'s call dispatch passes through). FSDP1 helpers that torch itself calls do not
  count: FSDP2 calls FSDP1's ``_common_utils.collect_grad_tensors`` in every backward, DCP's
  ``get_model_state_dict`` calls ``FSDP.fsdp_modules``. Those are torch's business (the
  issue's "what FSDP2 itself imports"); they are counted apart (``FSDP1Calls.from_torch``),
  not reported.

What it cannot see: calls made from C++ threads torch starts (no Python caller: not counted),
threads already running when the guard starts, and work done in other processes (under
``torchrun`` each rank runs the command and checks itself; ranks a script spawns are not
checked). A run that ends with ``os._exit`` (``launch.exit_now``) is reported before it ends.
FSDP1's autograd hooks run from the autograd engine, torch's caller: not counted at run time,
but the call that registered them (``FSDP(...)``) was.

``python -m fsdp2_port.prove.no_fsdp1 SCRIPT [ARGS...]`` (or ``-m MODULE [ARGS...]``) runs the
script as ``__main__`` with its arguments under the guard; afterwards it prints every FSDP1 call
it recorded (function, caller's file:line, count) to stderr and exits 3 if there was one, else
with the script's own status. Imports no torch before the script does.
"""

from __future__ import annotations

import importlib.util
import os
import runpy
import sys
import sysconfig
import threading
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import CodeType, FrameType
from typing import Any, NoReturn

#: The exit status of the command when the script ran FSDP1 code (and itself exited 0).
EXIT_FSDP1_CALLS = 3

_FSDP1, _TORCH, _PASS_THROUGH, _OUTSIDE = "fsdp1", "torch", "pass-through", "outside"
#: ``nn.Module``'s file: its call dispatch passes a call through (to ``forward`` and hooks)
_TORCH_MODULE_CALL = "torch nn.Module"
_MODULE_CALL_DISPATCH = frozenset({"_wrapped_call_impl", "_call_impl"})


def _torch_dirs() -> tuple[str, ...]:
    """The torch package's directory as code objects may spell it (found without importing)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return ()
    found: list[str] = []
    for location in spec.submodule_search_locations:
        for spelling in (location, os.path.realpath(location)):
            spelling = os.path.join(spelling, "")
            if spelling not in found:
                found.append(spelling)
    return tuple(found)


def _stdlib_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    found: list[str] = []
    for key in ("stdlib", "platstdlib"):
        for spelling in (paths[key], os.path.realpath(paths[key])):
            spelling = os.path.join(spelling, "")
            if spelling not in found:
                found.append(spelling)
    return tuple(found)


class _Files:
    """What a code object's file is: FSDP1, other torch, a pass-through, or outside torch."""

    def __init__(self) -> None:
        self.torch = _torch_dirs()
        self.stdlib = _stdlib_dirs()
        sep = os.sep
        self.fsdp = f"distributed{sep}fsdp{sep}"
        self.fsdp2 = f"distributed{sep}fsdp{sep}_fully_shard{sep}"
        self.torch_pass_through = {f"utils{sep}_contextlib.py"}  # no_grad/enable_grad wrappers
        self.module_py = f"nn{sep}modules{sep}module.py"
        self.kinds: dict[str, str] = {}

    def kind(self, filename: str) -> str:
        kind = self.kinds.get(filename)
        if kind is None:
            kind = self.kinds[filename] = self._classify(filename)
        return kind

    def caller_kind(self, code: CodeType) -> str:
        """``kind``, except that the top level of code compiled from a string (``python -c``,
        ``exec``) is the user's: the functions it defines pass through to it."""
        if code.co_name == "<module>" and code.co_filename in ("<string>", "<stdin>"):
            return _OUTSIDE
        kind = self.kind(code.co_filename)
        if kind == _TORCH_MODULE_CALL:
            return _PASS_THROUGH if code.co_name in _MODULE_CALL_DISPATCH else _TORCH
        return kind

    def _classify(self, filename: str) -> str:
        for root in self.torch:
            if filename.startswith(root):
                inside = filename[len(root) :]
                if inside.startswith(self.fsdp) and not inside.startswith(self.fsdp2):
                    return _FSDP1
                if inside in self.torch_pass_through:
                    return _PASS_THROUGH
                return _TORCH_MODULE_CALL if inside == self.module_py else _TORCH
        if filename.startswith("<") or filename.startswith(self.stdlib):
            # "<string>": dataclass-generated methods, exec; "<frozen ...>": the import system
            if "site-packages" not in filename and "dist-packages" not in filename:
                return _PASS_THROUGH
        if os.path.basename(filename) == "typing_extensions.py":  # @deprecated wrappers
            return _PASS_THROUGH
        return _OUTSIDE

    def torch_relative(self, filename: str) -> str:
        for root in self.torch:
            if filename.startswith(root):
                return "torch/" + filename[len(root) :].replace(os.sep, "/")
        return filename


@dataclass(frozen=True)
class FSDP1Call:
    """One FSDP1 function called from outside torch: where it is, and who called it."""

    #: ``torch/distributed/fsdp/<file>.py:<qualified name>``
    function: str
    #: the caller's ``file:line``
    caller: str
    thread: str

    def __str__(self) -> str:
        where = "" if self.thread == "MainThread" else f" [thread {self.thread}]"
        return f"{self.function}, called from {self.caller}{where}"


@dataclass
class FSDP1Calls:
    """What a guard recorded: each distinct FSDP1 call from outside torch with its count, in the
    order first seen, and how many calls of FSDP1 code torch itself made (not reported)."""

    counts: dict[FSDP1Call, int] = field(default_factory=dict)
    from_torch: int = 0

    @property
    def calls(self) -> list[FSDP1Call]:
        return list(self.counts)

    def __bool__(self) -> bool:
        return bool(self.counts)

    def report(self) -> str:
        if not self.counts:
            return "no FSDP1 code called from outside torch"
        total = sum(self.counts.values())
        lines = [f"{total} call(s) of FSDP1 code from outside torch ({len(self.counts)} distinct):"]
        for call, count in self.counts.items():
            lines.append(f"  {call}" + (f" (x{count})" if count > 1 else ""))
        return "\n".join(lines)


class FSDP1CallError(AssertionError):
    """Raised by ``forbid_fsdp1_calls`` when the block called FSDP1 code from outside torch."""

    def __init__(self, calls: FSDP1Calls) -> None:
        super().__init__(calls.report())
        self.calls = calls


_files: _Files | None = None


def _classifier() -> _Files:
    global _files
    if _files is None:
        _files = _Files()
    return _files


@contextmanager
def record_fsdp1_calls() -> Iterator[FSDP1Calls]:
    """Record, while the block runs, every call of FSDP1 code whose caller is outside torch
    (module docstring). Guards nest; a profile function already set keeps being called."""
    files = _classifier()
    recorded = FSDP1Calls()
    active = True

    def record(frame: FrameType) -> None:
        code = frame.f_code
        if code.co_name == "<module>":  # an import runs the module's body
            return
        caller = frame.f_back
        while caller is not None and files.caller_kind(caller.f_code) == _PASS_THROUGH:
            caller = caller.f_back
        if caller is None or files.caller_kind(caller.f_code) != _OUTSIDE:
            recorded.from_torch += 1
            return
        name = getattr(code, "co_qualname", code.co_name)
        call = FSDP1Call(
            function=f"{files.torch_relative(code.co_filename)}:{name}",
            caller=f"{caller.f_code.co_filename}:{caller.f_lineno}",
            thread=threading.current_thread().name,
        )
        recorded.counts[call] = recorded.counts.get(call, 0) + 1

    def chained(previous: Callable[..., Any] | None) -> Callable[[FrameType, str, Any], None]:
        def profile(frame: FrameType, event: str, arg: Any) -> None:
            if previous is not None:
                previous(frame, event, arg)
            if event == "call" and active and files.kind(frame.f_code.co_filename) == _FSDP1:
                record(frame)

        return profile

    previous_here = sys.getprofile()
    previous_threads = threading.getprofile()
    threading.setprofile(chained(previous_threads))
    sys.setprofile(chained(previous_here))
    try:
        yield recorded
    finally:
        sys.setprofile(previous_here)
        threading.setprofile(previous_threads)
        active = False  # threads started meanwhile keep the function: it does nothing now


@contextmanager
def forbid_fsdp1_calls() -> Iterator[FSDP1Calls]:
    """``record_fsdp1_calls``, then ``FSDP1CallError`` listing the calls if there were any
    (an exception raised by the block itself goes through unchanged)."""
    with record_fsdp1_calls() as recorded:
        yield recorded
    if recorded:
        raise FSDP1CallError(recorded)


# -- the command ---------------------------------------------------------------------------------

USAGE = """usage: python -m fsdp2_port.prove.no_fsdp1 SCRIPT [ARGS...]
       python -m fsdp2_port.prove.no_fsdp1 -m MODULE [ARGS...]

Runs SCRIPT (or MODULE) as __main__ with ARGS, recording every call of FSDP1 code
(torch/distributed/fsdp/ outside _fully_shard/) whose caller is outside torch. Afterwards it
prints those calls to stderr and exits 3 if there was one, else with the script's status.
Under torchrun each rank checks itself:
  torchrun --nproc-per-node 2 -m fsdp2_port.prove.no_fsdp1 train.py --steps 10"""


def _exit_status(code: object) -> int:
    """The process status ``sys.exit(code)`` gives."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _rank_prefix() -> str:
    rank = os.environ.get("RANK")
    return f"rank {rank}: " if rank is not None else ""


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE, file=sys.stdout if args else sys.stderr)
        return 0 if args else 2
    as_module = args[0] == "-m"
    if as_module:
        args = args[1:]
        if not args:
            print(USAGE, file=sys.stderr)
            return 2
    target, rest = args[0], args[1:]
    if not as_module and not os.path.exists(target):
        print(f"no_fsdp1: no such script: {target}", file=sys.stderr)
        return 2
    sys.argv = [target, *rest]
    status = 0
    real_exit, guarded = os._exit, os.getpid()
    with record_fsdp1_calls() as recorded:

        def exit_reporting(status: int) -> NoReturn:
            """``os._exit`` (``launch.exit_now``: a rank that skips the interpreter's shutdown)
            ends the process here: the report comes first. A process forked from it (a
            ``fork`` multiprocessing child ends with ``os._exit`` too) exits as it asked: the
            report and the status are the guarded process's."""
            sys.stdout.flush()
            real_exit(_reported(recorded, status) if os.getpid() == guarded else status)

        os._exit = exit_reporting
        try:
            if as_module:
                runpy.run_module(target, run_name="__main__", alter_sys=True)
            else:
                # as `python SCRIPT` does: the script's directory first on the path
                sys.path[0] = os.path.dirname(os.path.abspath(target))
                runpy.run_path(target, run_name="__main__")
        except SystemExit as e:
            status = _exit_status(e.code)
        except BaseException:
            traceback.print_exc()
            status = 1
        finally:
            os._exit = real_exit
    sys.stdout.flush()
    return _reported(recorded, status)


def _reported(recorded: FSDP1Calls, status: int) -> int:
    """Print what was recorded; the status to end with (3 instead of 0 after FSDP1 calls)."""
    if recorded:
        print(f"no_fsdp1: {_rank_prefix()}{recorded.report()}", file=sys.stderr, flush=True)
        if status == 0:
            return EXIT_FSDP1_CALLS
    return status


if __name__ == "__main__":
    sys.exit(main())
