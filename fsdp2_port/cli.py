"""The ``fsdp2-port`` command: one subcommand per job, each imported only when it runs."""

from __future__ import annotations

import sys

_USAGE = """\
usage: fsdp2-port COMMAND [ARGS...]

Move PyTorch training code from FSDP1 to FSDP2 without changing what it computes.

commands:
  migrate   rewrite FSDP1 call sites into FSDP2 and mark what needs review
            (libcst codemods; run `fsdp2-port migrate --help`)

Run `fsdp2-port COMMAND --help` for a command's options.
"""


def _migrate(argv: list[str]) -> int:
    from codemods.cli import main as migrate_main

    return migrate_main(argv)


_COMMANDS = {"migrate": _migrate}


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
