"""The ``fsdp2-port`` command: one subcommand per job, each imported only when it runs.

``verify`` and ``compare`` exit 0 (equivalent / the same), 1 (not), 2 (bad request, or a run
or rank failed); with ``--format json`` each prints exactly one JSON object on standard
output for every outcome, errors included. Every command exits 141 (as if ended by SIGPIPE),
quietly, when its standard output is closed before its output ends (``| head``).
"""

from __future__ import annotations

import argparse
import difflib
import os
import signal
import stat
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

_C = TypeVar("_C", bound="DataclassInstance")

_USAGE = """\
usage: fsdp2-port COMMAND [ARGS...]

Move PyTorch training code from FSDP1 to FSDP2 without changing what it computes.

commands:
  migrate   rewrite FSDP1 call sites into FSDP2 and mark what needs review
            (codemods, no torch needed; run `fsdp2-port migrate --help`)
  compare   run your FSDP1 script and its migration the same way (torchrun) and
            check that they log the same losses and grad norms, step by step
  verify    train a model under FSDP1 + compat and FSDP2 + fsdp2_port on N ranks
            and check both match a single-process reference
  convert-checkpoint
            turn a checkpoint an FSDP1 job wrote (SpecForge optimizer, FULL, SHARDED,
            LOCAL) into full tensors by name that the migrated script loads, offline

Run `fsdp2-port COMMAND --help` for a command's options, `fsdp2-port --version` for the
version.
"""


class _UsageError(Exception):
    """argparse's complaint, raised instead of exiting so ``--format json`` can report it."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _UsageError(message)


def _wants_json(argv: list[str]) -> bool:
    """``--format json`` anywhere before ``--``: read before parsing, for usage errors."""
    head = argv[: argv.index("--")] if "--" in argv else argv
    pairs = zip(head, [*head[1:], ""])
    return "--format=json" in head or ("--format", "json") in pairs


def _write_html(path: Path | None, page: str) -> str | None:
    """Write ``page`` to ``path`` (its folders made): None, or why it could not be."""
    if path is None:
        return None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(page, encoding="utf-8")
    except OSError as e:
        return f"cannot write --html {path}: {e.strerror or e}"
    return None


def _html_problem(path: Path | None) -> str | None:
    """Why ``--html PATH`` cannot be written, said before anything runs; None when it can."""
    if path is None:
        return None
    if path.is_dir():
        return f"--html {path} is a directory"
    folder = path.parent.absolute()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent  # the folders --html names are made
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        return f"--html {path}: cannot write in {folder}"
    return None


def _same_file(output: Any, inputs: list[str]) -> bool:
    """Whether ``output`` (a path, or an open stream such as standard output) is one of the
    files ``inputs`` names (a link or another spelling of it included)."""
    try:
        status = os.fstat(output.fileno()) if hasattr(output, "fileno") else os.stat(output)
    except (OSError, ValueError):
        return False
    for name in inputs:
        try:
            other = os.stat(name)
        except OSError:
            continue
        if stat.S_ISREG(status.st_mode) and os.path.samestat(status, other):
            return True
    return False


def _no_torch() -> str | None:
    """Why the runtime cannot run here (no torch, one too old, or one that fails to import);
    None when it can. Imports torch."""
    from fsdp2_port.versions import require_torch

    try:
        require_torch()
    except ImportError as e:
        return str(e)
    try:
        import torch  # noqa: F401
    except ImportError as e:
        return f"fsdp2-port's runtime cannot import torch: {e}"
    return None


def _count(n: int, noun: str) -> str:
    """``1 step``, ``2 steps``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _migrate(argv: list[str]) -> int:
    from fsdp2_port.codemods.cli import main as migrate_main

    return migrate_main(argv)


# -- verify and compare: shared options, one way out ------------------------------------------


def _add_proof_options(
    parser: _Parser, *, quantities: tuple[str, ...], dtype: str, timeout: float, timeout_help: str
) -> _Parser:
    """The options ``verify`` and ``compare`` both take, after their own: ``--dtype`` (naming
    its tolerances, the ``quantities`` rows of ``judge.TOLERANCE``), ``--timeout``,
    ``--format``, ``--html``."""
    from fsdp2_port.prove.judge import DTYPES, TOLERANCE

    rtols = "; ".join(
        f"{d} " + ", ".join(f"{q} {TOLERANCE[q][d]:g}" for q in quantities) for d in DTYPES
    )
    parser.add_argument(
        "--dtype",
        choices=DTYPES,
        default=dtype,
        help=f"what the runs compute in, which sets the relative tolerances: {rtols} "
        "(default %(default)s)",
    )
    parser.add_argument("--timeout", type=float, default=timeout, help=timeout_help)
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument("--html", type=Path, metavar="PATH", help="also write an HTML report")
    return parser


def _config(kind: type[_C], args: argparse.Namespace, **given: Any) -> _C:
    """A ``kind`` (a Config dataclass) from the parsed options named as its fields, and
    ``given``."""
    names = {f.name for f in fields(kind)}
    return kind(**{**{k: v for k, v in vars(args).items() if k in names}, **given})


@dataclass
class _Output:
    """Where a ``verify`` or ``compare`` outcome goes: standard output (its text, or exactly
    one JSON object with ``--format json``), standard error, and the ``--html`` page."""

    command: str
    as_json: bool
    error_json: Callable[[str, int, str], dict[str, Any]]  # (message, code, details) -> object
    html: Path | None = None
    speaks: bool = True  # False: a rank of torchrun's job other than 0, which prints nothing

    def error(
        self, message: str, details: str = "", code: int = 2, this_rank_only: bool = False
    ) -> int:
        """Return ``code``, saying ``details`` (a traceback, the usage) above a last line that
        names the failure; ``this_rank_only``: on standard error even where others speak."""
        from fsdp2_port.prove.judge import error_page, json_text

        unwritten = None
        if self.speaks:
            if self.as_json:
                print(json_text(self.error_json(message, code, details)))
            unwritten = _write_html(self.html, error_page(self.command, message, details))
        if self.speaks or this_rank_only:
            last = f"fsdp2-port {self.command}: {message}"
            print(f"{details.rstrip()}\n{last}".lstrip(), file=sys.stderr)
        if unwritten:
            print(f"fsdp2-port {self.command}: {unwritten}", file=sys.stderr)
        return code

    def verdict(self, payload: dict[str, Any], text: str | None, page: str, code: int) -> int:
        """Return ``code``, printing ``payload`` (JSON) or ``text`` and writing ``page``."""
        from fsdp2_port.prove.judge import json_text

        if self.speaks:
            if self.as_json:
                print(json_text(payload))
            elif text is not None:
                print(text)
            unwritten = _write_html(self.html, page)
            if unwritten:
                print(f"fsdp2-port {self.command}: {unwritten}", file=sys.stderr)
                return 2
        return code


# -- verify -----------------------------------------------------------------------------------


def _verify_parser() -> _Parser:
    from fsdp2_port.prove.verify_request import LOCAL_WORLD_SIZE, QUANTITIES, STRATEGIES, Config

    defaults = Config()  # the defaults live there, once
    parser = _Parser(
        prog="fsdp2-port verify",
        description="Train one model from one seed in four arms (single-process reference, "
        "FSDP1 + fsdp2_port.compat.BF16Optimizer, FSDP2 + fsdp2_port.BF16Optimizer, FSDP1 with "
        "the old "
        "rank-local clip) and check the sharded arms match the reference. Started by "
        "torchrun, it runs on the job's ranks (any number of nodes); otherwise it spawns "
        "its own. Exit 0: equivalent; 1: not; 2: bad request or a rank failed.",
    )
    parser.add_argument(
        "--model",
        default=defaults.model,
        metavar="MODULE:FACTORY",
        help="returns a model, (model, batch_fn) or (model, batch_fn, loss_fn); "
        "default: the bundled tiny transformer",
    )
    parser.add_argument(
        "--world-size",
        type=int,
        default=defaults.world_size,
        help=f"ranks to spawn (default {LOCAL_WORLD_SIZE}); under torchrun, the job's",
    )
    parser.add_argument("--steps", type=int, default=defaults.steps)
    parser.add_argument("--strategy", choices=STRATEGIES, default=defaults.strategy)
    parser.add_argument("--max-grad-norm", type=float, default=defaults.max_grad_norm)
    parser.add_argument("--lr", type=float, default=defaults.lr)
    parser.add_argument("--device", choices=("cpu", "cuda"), default=defaults.device)
    parser.add_argument(
        "--judge-old-clip",
        action="store_true",
        default=defaults.judge_old_clip,
        help="hold the old rank-local clip to the tolerances too (it should fail)",
    )
    return _add_proof_options(
        parser,
        quantities=QUANTITIES,
        dtype=defaults.dtype,
        timeout=defaults.timeout,
        timeout_help="seconds before hung ranks are killed (under torchrun: a collective fails)",
    )


def _verify(argv: list[str]) -> int:
    from fsdp2_port.prove import verify_request
    from fsdp2_port.prove.judge import exit_code
    from fsdp2_port.prove.launch import Interrupted, RankFailure, RankTimeout, backend, exit_now

    # Under torchrun every rank runs this; rank 0 speaks for the job. The verdict is the same
    # on every rank (rank 0's figures are broadcast), so every rank exits with its code.
    speaks = not verify_request.under_torchrun() or os.environ.get("RANK") == "0"
    out = _Output("verify", _wants_json(argv), verify_request.error_json, speaks=speaks)
    parser = _verify_parser()
    try:
        args = parser.parse_args(argv)
    except _UsageError as e:
        return out.error(f"error: {e}", parser.format_usage())
    problem = _html_problem(args.html) or _no_torch()
    if problem:
        return out.error(f"error: {problem}")
    out.html = args.html
    from fsdp2_port.prove import verify

    try:
        config = verify.resolved(_config(verify.Config, args))
        if speaks:
            assert config.world_size is not None  # resolved() sets it
            ranks = _count(config.world_size, f"{backend(args.device)} rank")
            if verify.under_torchrun():
                ranks = f"torchrun's {ranks}"
            print(
                f"fsdp2-port verify: training 4 arms for {_count(args.steps, 'step')} on "
                f"{ranks}...",
                file=sys.stderr,
            )
        report = verify.verify(config)
    except verify.VerifyError as e:
        return out.error(str(e), e.user_traceback)
    except (RankFailure, RankTimeout) as e:
        return out.error(f"a rank failed: {type(e).__name__} (tracebacks above)", str(e))
    except Interrupted as e:  # SIGTERM, SIGHUP, SIGINT: the ranks are gone already
        return out.error(str(e), code=e.exit_code)
    except KeyboardInterrupt:  # raised by code of the user's, not by a signal to verify
        return out.error("interrupted: KeyboardInterrupt", code=128 + signal.SIGINT)
    except SystemExit as e:  # sys.exit() in code of the user's that verify did not call
        return out.error(f"SystemExit: {e.code} in the user's code", traceback.format_exc())
    except Exception as e:
        if not verify.under_torchrun():
            raise
        # this process is one rank of torchrun's job: its failure, its traceback
        message = f"rank {os.environ['RANK']} failed: {type(e).__name__}: {e}"
        return out.error(message, traceback.format_exc(), this_rank_only=True)
    code = out.verdict(
        verify.as_json(report),
        verify.format_text(report),
        verify.html_report(report),
        exit_code(report.verdict),
    )
    if verify.under_torchrun():  # a rank of torchrun's job: see launch.exit_now
        exit_now(code)
    return code


# -- compare ----------------------------------------------------------------------------------


def _key_value(kind: type):
    def parse(text: str) -> tuple[str, Any]:
        name, sep, value = text.partition("=")
        if not sep or not name:
            raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
        try:
            return name, kind(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name}: not a number: {value!r}") from None

    return parse


def _compare_parser() -> _Parser:
    from fsdp2_port.prove import compare

    defaults = compare.Config()
    parser = _Parser(
        prog="fsdp2-port compare",
        usage="fsdp2-port compare OLD NEW [options] -- SCRIPT_ARGS...",
        description="Run OLD, then NEW, with the same SCRIPT_ARGS (through torchrun, or "
        "directly with --launcher none), read the per-step metrics each prints on its "
        "standard output (`step N ... loss X ... grad_norm Y`), and judge NEW against OLD. "
        "`{run}` in SCRIPT_ARGS becomes `old` or `new` (e.g. --save ckpt_{run}.pt). "
        "Exit 0: the same; 1: different; 2: a run failed or logged no comparable steps.",
    )
    parser.add_argument("old", metavar="OLD", help="the original script (e.g. FSDP1)")
    parser.add_argument("new", metavar="NEW", help="its migration (e.g. FSDP2)")
    parser.add_argument("--launcher", choices=compare.LAUNCHERS, default=defaults.launcher)
    parser.add_argument(
        "--forbid-fsdp1",
        action="store_true",
        help="run NEW under fsdp2_port.prove.no_fsdp1: it fails (exit 3) if its code, or "
        "fsdp2_port's, calls FSDP1's implementation; ranks a script spawns itself "
        "(--launcher none) are not checked",
    )
    run = parser.add_argument_group("torchrun (with --launcher torchrun)")
    run.add_argument(
        "--nproc-per-node", type=int, default=defaults.nproc_per_node, help="default 2"
    )
    run.add_argument("--nnodes", default=defaults.nnodes, help="default 1 (--standalone)")
    run.add_argument("--node-rank", type=int, default=defaults.node_rank)
    run.add_argument("--rdzv-endpoint", default=defaults.rdzv_endpoint, metavar="HOST:PORT")
    run.add_argument("--rdzv-id", default=defaults.rdzv_id)
    parser.add_argument(
        "--metric",
        action="append",
        type=_key_value(str),
        default=[],
        metavar="NAME=REGEX",
        help="another metric to read, or a new pattern for loss, grad_norm or step; "
        "the regex's first group is the number",
    )
    parser.add_argument(
        "--rtol",
        action="append",
        type=_key_value(float),
        default=[],
        metavar="NAME=X",
        help="a metric's relative tolerance instead of --dtype's",
    )
    life = parser.add_argument_group(
        "save and resume (the script reads FSDP2_PORT_SAVE_AT, FSDP2_PORT_CHECKPOINT, "
        "FSDP2_PORT_RESUME_FROM, FSDP2_PORT_RESUME_AT: docs/compare.md)"
    )
    life.add_argument(
        "--resume-at",
        type=int,
        metavar="K",
        help="both runs save a checkpoint after step K and go on; NEW then resumes from its "
        "own and must continue as OLD's uninterrupted run did",
    )
    life.add_argument(
        "--resume-from-old",
        action="store_true",
        help="with --resume-at: NEW also resumes from OLD's checkpoint, converted",
    )
    life.add_argument(
        "--convert",
        action="append",
        default=[],
        metavar="SRC[=DST]",
        help="a file of OLD's checkpoint folder to pass through fsdp2-port convert-checkpoint "
        "({rank}: one file per rank; DST with {rank}: the converted file for every rank); "
        "other files are copied as they are",
    )
    life.add_argument(
        "--convert-args",
        metavar="ARGS",
        help="convert-checkpoint's options, one string ({old}: OLD's checkpoint folder), "
        "e.g. '--model pkg.model:build --rebuild-missing {old}/model.safetensors'",
    )
    return _add_proof_options(
        parser,
        quantities=("metric",),
        dtype=defaults.dtype,
        timeout=defaults.timeout,
        timeout_help="seconds each run may take (default %(default)g)",
    )


def _compare(argv: list[str]) -> int:
    from fsdp2_port.prove import compare
    from fsdp2_port.prove.launch import Interrupted

    out = _Output("compare", _wants_json(argv), compare.error_json)
    split = argv.index("--") if "--" in argv else len(argv)
    parser = _compare_parser()
    try:
        args = parser.parse_args(argv[:split])
    except _UsageError as e:
        return out.error(f"error: {e}", parser.format_usage())
    scripts = [args.old, args.new]
    if _same_file(sys.stdout, scripts):
        print(
            "fsdp2-port compare: error: standard output is a script being compared", file=sys.stderr
        )
        return 2
    if args.html is not None and _same_file(args.html, scripts):
        return out.error(f"error: --html {args.html} is a script being compared")
    problem = _html_problem(args.html)
    if problem is None and args.launcher == "torchrun":
        problem = _no_torch()  # torchrun is torch's
    if problem:
        return out.error(f"error: {problem}")
    out.html = args.html
    try:
        given = dict(metrics=dict(args.metric), rtol=dict(args.rtol), convert=tuple(args.convert))
        config = _config(compare.Config, args, script_args=tuple(argv[split + 1 :]), **given)
        result = compare.compare(config)
    except compare.CompareError as e:
        return out.error(f"error: {e}")
    except Interrupted as e:
        return out.error(str(e), code=e.exit_code)
    failed = result.verdict == "error"
    if failed:
        print(compare.format_error(result), file=sys.stderr)
    text = None if failed else compare.format_text(result)
    return out.verdict(compare.as_json(result), text, compare.html_report(result), result.exit_code)


# -- convert-checkpoint -----------------------------------------------------------------------


def _convert_checkpoint(argv: list[str]) -> int:
    from fsdp2_port.fsdp1.checkpoint_formats import FORMATS

    parser = _Parser(
        prog="fsdp2-port convert-checkpoint",
        description="Convert a checkpoint written before the migration into one torch.save "
        "file of full tensors keyed by parameter name, with no FSDP1 job running. SRC: a "
        "file, a DCP directory, or per-rank files named with {rank} (ckpt/optim_{rank}.pt). "
        "DST is never a file SRC names. Exit 0: converted; 2: refused (one line says why).",
    )
    parser.add_argument("src")
    parser.add_argument("dst")
    parser.add_argument("--format", choices=FORMATS, default="auto")
    parser.add_argument(
        "--model",
        metavar="MODULE:FACTORY",
        help="builds (on the meta device) the module the old optimizer or FSDP1 was given: "
        "names positions and flat parameters (needed for specforge and local)",
    )
    parser.add_argument(
        "--units",
        metavar="PATHS",
        help="comma-separated module paths of the FSDP1 units ('' the root), for a SpecForge "
        "checkpoint saved with use_orig_params=False",
    )
    parser.add_argument("--model-key", default="model")
    parser.add_argument("--optim-key", default="optim")
    parser.add_argument(
        "--trust-pickle",
        action="store_true",
        help="load SRC with Python's unpickler, which runs any code the checkpoint names: "
        "only for a checkpoint you trust. Without it nothing in SRC runs: only the types "
        "these formats hold are built, and a checkpoint that needs anything else is refused",
    )
    parser.add_argument(
        "--rebuild-missing",
        metavar="WEIGHTS",
        help="a SpecForge optimizer state some ranks never saved (training_state.pt, rank 0 "
        "only): rebuild the missing fp32 masters from these model weights (.safetensors, a "
        "torch.save'd dict, or a save_pretrained directory) and start the missing Adam moments "
        "at zero; said here, recorded in DST, and warned about by the optimizer that loads it",
    )
    try:
        args = parser.parse_args(argv)
    except _UsageError as e:
        print(f"fsdp2-port convert-checkpoint: error: {e}", file=sys.stderr)
        return 2
    problem = _no_torch()
    if problem:
        print(f"fsdp2-port convert-checkpoint: error: {problem}", file=sys.stderr)
        return 2
    from fsdp2_port.fsdp1.convert import ConversionError, convert_checkpoint

    units = None if args.units is None else args.units.split(",")
    if args.trust_pickle:
        print(
            f"fsdp2-port convert-checkpoint: --trust-pickle: {args.src} is unpickled with no "
            "restriction; any code it names runs",
            file=sys.stderr,
        )
    try:
        kind = convert_checkpoint(
            args.src,
            args.dst,
            args.format,
            args.model,
            units=units,
            model_key=args.model_key,
            optim_key=args.optim_key,
            trust_pickle=args.trust_pickle,
            rebuild_missing=args.rebuild_missing,
            announce=print,
        )
    except (ConversionError, FileNotFoundError, KeyError) as e:
        print(f"fsdp2-port convert-checkpoint: {e}", file=sys.stderr)
        return 2
    print(f"{args.src} ({kind}) -> {args.dst}")
    return 0


_COMMANDS = {
    "migrate": _migrate,
    "compare": _compare,
    "verify": _verify,
    "convert-checkpoint": _convert_checkpoint,
}


#: The exit code when standard output closes before the output ends (``| head``): that of a
#: process ended by SIGPIPE, as shells report it.
CLOSED_PIPE = 128 + 13


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        code = _main(argv)
        sys.stdout.flush()
    except BrokenPipeError:
        _drop_standard_output()
        return CLOSED_PIPE
    return code


def _main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(_USAGE, end="")
        return 0
    if argv[0] in ("-V", "--version"):
        from fsdp2_port import __version__

        print(f"fsdp2-port {__version__}")
        return 0
    if argv[0].startswith("-"):
        print(f"fsdp2-port: error: unknown option {argv[0]!r} (try --help)", file=sys.stderr)
        return 2
    command = _COMMANDS.get(argv[0])
    if command is None:
        close = [c for c in _COMMANDS if argv[0].isalpha() and c.startswith(argv[0])]
        close = close or difflib.get_close_matches(argv[0], list(_COMMANDS), n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"one of {', '.join(_COMMANDS)}"
        print(f"fsdp2-port: error: unknown command {argv[0]!r} ({hint})", file=sys.stderr)
        return 2
    return command(argv[1:])


def _drop_standard_output() -> None:
    """Point standard output at /dev/null: what is still buffered goes nowhere, quietly (also
    when the interpreter flushes it on the way out)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())
