"""What a process of a compared run measured of itself: its GPU memory peak.

``python -m fsdp2_port.prove.measure SCRIPT [ARGS...]`` (or ``-m MODULE [ARGS...]``) runs the
script as ``__main__`` with its arguments, as ``python SCRIPT`` would: the same exit status,
exceptions and output. ``compare`` starts every run under it (under torchrun, each rank).

With ``MEASURE_DIR_VAR`` set to a folder, a process that used CUDA writes ``PID.json`` there
as it ends (also through ``os._exit``, ``launch.exit_now``): ``{"rank": RANK or null,
"cuda_max_allocated_bytes": N}``, N the largest ``torch.cuda.max_memory_allocated`` of its
devices. A process that never initialised CUDA writes nothing, nor does one killed by a signal.
Imports no torch: it reads torch only when the script imported it.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
from pathlib import Path
from typing import Any, NoReturn

#: The folder each process writes its record into; unset: nothing is written.
MEASURE_DIR_VAR = "FSDP2_PORT_MEASURE_DIR"

USAGE = "usage: python -m fsdp2_port.prove.measure SCRIPT [ARGS...] | -m MODULE [ARGS...]"


def cuda_peak() -> int | None:
    """The largest ``max_memory_allocated`` over this process's CUDA devices; None when the
    process did not import torch or never initialised CUDA."""
    torch: Any = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return None
    return max(torch.cuda.max_memory_allocated(d) for d in range(torch.cuda.device_count()))


def write_record(folder: str | None) -> None:
    """This process's record into ``folder`` (see the module), if it used CUDA."""
    peak = cuda_peak()
    if not folder or peak is None:
        return
    record = {"rank": os.environ.get("RANK"), "cuda_max_allocated_bytes": peak}
    Path(folder, f"{os.getpid()}.json").write_text(json.dumps(record))


def read_records(folder: Path) -> list[dict[str, Any]]:
    """The records the processes of one run wrote into ``folder`` (none: an empty list)."""
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]


def main(argv: list[str]) -> None:
    """Run the target of ``argv`` (see the module), then write this process's record."""
    as_module = argv[:1] == ["-m"]
    args = argv[1:] if as_module else argv
    if not args:
        raise SystemExit(USAGE)
    target, rest = args[0], args[1:]
    folder = os.environ.get(MEASURE_DIR_VAR)
    real_exit = os._exit

    def exit_recording(status: int) -> NoReturn:
        """``os._exit`` skips ``finally``: the record first (a forked child writes its own)."""
        write_record(folder)
        real_exit(status)

    sys.argv = [target, *rest]
    os._exit = exit_recording
    try:
        if as_module:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            # as `python SCRIPT` does: the script's directory first on the path
            sys.path[0] = os.path.dirname(os.path.abspath(target))
            runpy.run_path(target, run_name="__main__")
    finally:
        os._exit = real_exit
        write_record(folder)


if __name__ == "__main__":
    main(sys.argv[1:])
