"""The ``fsdp2-port`` command: one subcommand per job, each imported only when it runs."""

from __future__ import annotations

import sys

_USAGE = """\
usage: fsdp2-port COMMAND [ARGS...]

Move PyTorch training code from FSDP1 to FSDP2 without changing what it computes.

commands:
  migrate   rewrite FSDP1 call sites into FSDP2 and mark what needs review
            (libcst codemods; run `fsdp2-port migrate --help`)
  verify    train a model under FSDP1 + compat and FSDP2 + fsdp2_port on N local
            ranks and check both match a single-process reference

Run `fsdp2-port COMMAND --help` for a command's options.
"""


def _migrate(argv: list[str]) -> int:
    from codemods.cli import main as migrate_main

    return migrate_main(argv)


def _verify(argv: list[str]) -> int:
    import argparse
    import json

    from fsdp2_port import verify as v
    from fsdp2_port.launch import RankFailure, RankTimeout

    parser = argparse.ArgumentParser(
        prog="fsdp2-port verify",
        description="Train one model from one seed in four arms (single-process reference, "
        "FSDP1 + compat.BF16Optimizer, FSDP2 + fsdp2_port.BF16Optimizer, FSDP1 with the old "
        "rank-local clip) and check the sharded arms match the reference. "
        "Exit 0: equivalent; 1: not; 2: bad request or a rank failed.",
    )
    parser.add_argument(
        "--model",
        default=v.DEFAULT_MODEL,
        metavar="MODULE:FACTORY",
        help="returns a model, (model, batch_fn) or (model, batch_fn, loss_fn); "
        "default: the bundled tiny transformer",
    )
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--strategy", choices=v.STRATEGIES, default="full_shard")
    parser.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16")
    parser.add_argument("--max-grad-norm", type=float, default=0.5)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument(
        "--judge-old-clip",
        action="store_true",
        help="hold the old rank-local clip to the tolerances too (it should fail)",
    )
    parser.add_argument(
        "--timeout", type=float, default=600.0, help="seconds before hung ranks are killed"
    )
    parser.add_argument("--format", choices=("text", "json"), default="text")
    args = parser.parse_args(argv)
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
    print(
        f"fsdp2-port verify: training 4 arms for {args.steps} steps on {args.world_size} "
        f"{'gloo' if args.device == 'cpu' else 'nccl'} ranks...",
        file=sys.stderr,
    )
    try:
        report = v.verify(config)
    except v.VerifyError as e:
        print(f"fsdp2-port verify: error: {e}", file=sys.stderr)
        return 2
    except (RankFailure, RankTimeout) as e:
        print(f"fsdp2-port verify: a rank failed:\n{e}", file=sys.stderr)
        return 2
    if args.format == "json":
        print(json.dumps({**v.asdict(report), "ok": report.ok}, indent=2))
    else:
        print(v.format_text(report))
    return 0 if report.ok else 1


_COMMANDS = {"migrate": _migrate, "verify": _verify}


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
