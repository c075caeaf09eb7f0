"""The ``fsdp2-port`` command: one subcommand per job, each imported only when it runs.

``verify`` and ``compare`` exit 0 (equivalent / the same), 1 (not), 2 (bad request, or a run
or rank failed); with ``--format json`` each prints exactly one JSON object on standard
output for every outcome, errors included.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import Any, NoReturn

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

Run `fsdp2-port COMMAND --help` for a command's options.
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


def _dumps(obj: Any) -> str:
    """Strict JSON (no NaN/Infinity tokens): a non-finite float becomes "nan"/"inf"/"-inf"."""

    def clean(x: Any) -> Any:
        if isinstance(x, float) and not math.isfinite(x):
            return str(x)
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [clean(v) for v in x]
        return x

    return json.dumps(clean(obj), indent=2, allow_nan=False)


def _write_html(path: Path | None, page: str) -> None:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(page, encoding="utf-8")


def _error_page(command: str, message: str, details: str) -> str:
    from fsdp2_port.prove import report_html

    return report_html.render(
        title=f"fsdp2-port {command}",
        verdict=f"ERROR: {message}",
        outcome="error",
        details=details.splitlines(),
    )


def _migrate(argv: list[str]) -> int:
    from codemods.cli import main as migrate_main

    return migrate_main(argv)


# -- verify -----------------------------------------------------------------------------------


def _verify_parser() -> argparse.ArgumentParser:
    from fsdp2_port.prove.verify import LOCAL_WORLD_SIZE, STRATEGIES, Config

    d = Config()  # the defaults live there, once
    parser = _Parser(
        prog="fsdp2-port verify",
        description="Train one model from one seed in four arms (single-process reference, "
        "FSDP1 + compat.BF16Optimizer, FSDP2 + fsdp2_port.BF16Optimizer, FSDP1 with the old "
        "rank-local clip) and check the sharded arms match the reference. Started by "
        "torchrun, it runs on the job's ranks (any number of nodes); otherwise it spawns "
        "its own. Exit 0: equivalent; 1: not; 2: bad request or a rank failed.",
    )
    parser.add_argument(
        "--model",
        default=d.model,
        metavar="MODULE:FACTORY",
        help="returns a model, (model, batch_fn) or (model, batch_fn, loss_fn); "
        "default: the bundled tiny transformer",
    )
    parser.add_argument(
        "--world-size",
        type=int,
        default=d.world_size,
        help=f"ranks to spawn (default {LOCAL_WORLD_SIZE}); under torchrun, the job's",
    )
    parser.add_argument("--steps", type=int, default=d.steps)
    parser.add_argument("--strategy", choices=STRATEGIES, default=d.strategy)
    parser.add_argument("--dtype", choices=("bf16", "fp32"), default=d.dtype)
    parser.add_argument("--max-grad-norm", type=float, default=d.max_grad_norm)
    parser.add_argument("--lr", type=float, default=d.lr)
    parser.add_argument("--device", choices=("cpu", "cuda"), default=d.device)
    parser.add_argument(
        "--judge-old-clip",
        action="store_true",
        default=d.judge_old_clip,
        help="hold the old rank-local clip to the tolerances too (it should fail)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=d.timeout,
        help="seconds before hung ranks are killed (under torchrun: a collective fails)",
    )
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument("--html", type=Path, metavar="PATH", help="also write an HTML report")
    return parser


def _verify(argv: list[str]) -> int:
    from fsdp2_port.prove import verify as v
    from fsdp2_port.prove.launch import Interrupted, RankFailure, RankTimeout

    as_json = _wants_json(argv)
    # Under torchrun every rank runs this; rank 0 speaks for the job. The verdict is the same
    # on every rank (rank 0's figures are broadcast), so every rank exits with its code.
    speaks = not v.under_torchrun() or os.environ.get("RANK") == "0"
    html: Path | None = None

    def error(message: str, details: str = "", this_rank_only: bool = False, code: int = 2) -> int:
        """Exit ``code``; ``details`` (a traceback, the usage) above a last line naming the
        failure."""
        if speaks:
            if as_json:
                out = {"verdict": "error", "ok": False, "exit_code": code, "error": message}
                print(_dumps({**out, "details": details}))
            _write_html(html, _error_page("verify", message, details))
        if speaks or this_rank_only:
            print(f"{details.rstrip()}\nfsdp2-port verify: {message}".lstrip(), file=sys.stderr)
        return code

    try:
        args = _verify_parser().parse_args(argv)
    except _UsageError as e:
        return error(f"error: {e}", _verify_parser().format_usage())
    html = args.html
    config = v.Config(
        model=args.model,
        world_size=args.world_size,
        steps=args.steps,
        strategy=args.strategy,
        dtype=args.dtype,
        max_grad_norm=args.max_grad_norm,
        lr=args.lr,
        device=args.device,
        judge_old_clip=args.judge_old_clip,
        timeout=args.timeout,
    )
    try:
        config = v.resolved(config)
        if speaks:
            ranks = f"torchrun's {config.world_size}" if v.under_torchrun() else config.world_size
            backend = "gloo" if args.device == "cpu" else "nccl"
            print(
                f"fsdp2-port verify: training 4 arms for {args.steps} steps on {ranks} "
                f"{backend} ranks...",
                file=sys.stderr,
            )
        report = v.verify(config)
    except v.VerifyError as e:
        return error(str(e), e.user_traceback)
    except (RankFailure, RankTimeout) as e:
        return error(f"a rank failed: {type(e).__name__} (tracebacks above)", str(e))
    except Interrupted as e:  # SIGTERM, SIGHUP, SIGINT: the ranks are gone already
        return error(str(e), code=e.exit_code)
    except KeyboardInterrupt:  # raised by code of the user's, not by a signal to verify
        return error("interrupted: KeyboardInterrupt", code=128 + signal.SIGINT)
    except SystemExit as e:  # sys.exit() in code of the user's that verify did not call
        return error(f"SystemExit: {e.code} in the user's code", traceback.format_exc())
    except Exception as e:
        if not v.under_torchrun():
            raise
        # this process is one rank of torchrun's job: its failure, its traceback
        message = f"rank {os.environ['RANK']} failed: {type(e).__name__}: {e}"
        return error(message, traceback.format_exc(), this_rank_only=True)
    if speaks:
        if as_json:
            print(_dumps({**v.asdict(report), "ok": report.ok, "verdict": report.verdict}))
        else:
            print(v.format_text(report))
        _write_html(html, v.html_report(report))
    if v.under_torchrun():  # a rank of torchrun's job: see launch.exit_now
        from fsdp2_port.prove.launch import exit_now

        exit_now(0 if report.ok else 1)
    return 0 if report.ok else 1


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


def _compare_parser() -> argparse.ArgumentParser:
    from fsdp2_port.prove import compare as c

    d = c.Config()
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
    parser.add_argument("--launcher", choices=c.LAUNCHERS, default=d.launcher)
    run = parser.add_argument_group("torchrun (with --launcher torchrun)")
    run.add_argument("--nproc-per-node", type=int, default=d.nproc_per_node, help="default 2")
    run.add_argument("--nnodes", default=d.nnodes, help="default 1 (--standalone)")
    run.add_argument("--node-rank", type=int, default=d.node_rank)
    run.add_argument("--rdzv-endpoint", default=d.rdzv_endpoint, metavar="HOST:PORT")
    run.add_argument("--rdzv-id", default=d.rdzv_id)
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
    parser.add_argument(
        "--dtype",
        choices=sorted(c.TOLERANCE),
        default=d.dtype,
        help=f"what the runs compute in: tolerance fp32 {c.TOLERANCE['fp32']:g}, "
        f"bf16 {c.TOLERANCE['bf16']:g} (default {d.dtype})",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=d.timeout,
        help="seconds each run may take (default %(default)g)",
    )
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument("--html", type=Path, metavar="PATH", help="also write an HTML report")
    return parser


def _compare(argv: list[str]) -> int:
    from fsdp2_port.prove import compare as c

    as_json = _wants_json(argv)
    split = argv.index("--") if "--" in argv else len(argv)
    html: Path | None = None
    try:
        args = _compare_parser().parse_args(argv[:split])
        html = args.html
        config = c.Config(
            old=args.old,
            new=args.new,
            script_args=tuple(argv[split + 1 :]),
            launcher=args.launcher,
            nproc_per_node=args.nproc_per_node,
            nnodes=args.nnodes,
            node_rank=args.node_rank,
            rdzv_endpoint=args.rdzv_endpoint,
            rdzv_id=args.rdzv_id,
            metrics=dict(args.metric),
            rtol=dict(args.rtol),
            dtype=args.dtype,
            timeout=args.timeout,
        )
        result = c.compare(config)
    except (_UsageError, c.CompareError) as e:
        if as_json:
            print(_dumps({"verdict": "error", "exit_code": 2, "error": str(e)}))
        print(f"fsdp2-port compare: error: {e}", file=sys.stderr)
        _write_html(html, _error_page("compare", f"error: {e}", ""))
        return 2
    except c.Interrupted as e:
        if as_json:
            print(_dumps({"verdict": "error", "exit_code": e.exit_code, "error": str(e)}))
        print(f"fsdp2-port compare: {e}", file=sys.stderr)
        _write_html(html, _error_page("compare", str(e), ""))
        return e.exit_code
    if as_json:
        print(_dumps(c.as_json(result)))
    elif result.verdict != "error":
        print(c.format_text(result))
    if result.verdict == "error":
        print(c.format_error(result), file=sys.stderr)
    if html is not None:
        _write_html(html, c.html_report(result))
    return result.exit_code


# -- convert-checkpoint -----------------------------------------------------------------------


def _convert_checkpoint(argv: list[str]) -> int:
    from fsdp2_port.fsdp1.convert import FORMATS, ConversionError, convert_checkpoint

    parser = _Parser(
        prog="fsdp2-port convert-checkpoint",
        description="Convert a checkpoint written before the migration into one torch.save "
        "file of full tensors keyed by parameter name, with no FSDP1 job running. SRC: a "
        "file, a DCP directory, or per-rank files named with {rank} (ckpt/optim_{rank}.pt).",
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
    try:
        args = parser.parse_args(argv)
    except _UsageError as e:
        print(f"fsdp2-port convert-checkpoint: error: {e}", file=sys.stderr)
        return 2
    units = None if args.units is None else args.units.split(",")
    try:
        kind = convert_checkpoint(
            args.src,
            args.dst,
            args.format,
            args.model,
            units=units,
            model_key=args.model_key,
            optim_key=args.optim_key,
        )
    except (ConversionError, FileNotFoundError, KeyError) as e:
        print(f"fsdp2-port convert-checkpoint: {e}", file=sys.stderr)
        return 1
    print(f"{args.src} ({kind}) -> {args.dst}")
    return 0


_COMMANDS = {
    "migrate": _migrate,
    "compare": _compare,
    "verify": _verify,
    "convert-checkpoint": _convert_checkpoint,
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_USAGE, end="")
        return 0
    command = _COMMANDS.get(argv[0])
    if command is None:
        print(_USAGE, end="", file=sys.stderr)
        print(f"fsdp2-port: error: unknown command {argv[0]!r}", file=sys.stderr)
        return 2
    return command(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
