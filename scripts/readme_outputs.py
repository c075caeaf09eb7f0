"""Regenerate the command output pasted into README.md, so that it cannot go stale.

    python scripts/readme_outputs.py           # rewrite every output block of README.md
    python scripts/readme_outputs.py --check   # change nothing; exit 1 if a block is stale

An output block is the text between ``<!-- output:NAME:start -->`` and
``<!-- output:NAME:end -->``; ``OUTPUTS`` says how each is made. Only cheap commands run here
(``fsdp2-port migrate`` on a copy of ``examples/train_fsdp1.py``): nothing that trains.
``tests/test_docs.py`` runs the same check.
"""

from __future__ import annotations

import argparse
import difflib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
EXAMPLE = ROOT / "examples" / "train_fsdp1.py"

#: The diff hunks of the example's migration shown in the README: those containing any of these.
SHOWN_HUNKS = ("model = FSDP(", "with model.no_sync():")


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """``fsdp2-port ARGS`` from this checkout, in ``cwd``; stdout and stderr kept apart."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="100", NO_COLOR="1")
    return subprocess.run(
        [sys.executable, "-m", "fsdp2_port", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def hunks(diff: str) -> tuple[list[str], list[list[str]]]:
    """A unified diff's file header lines and its hunks, each a list of lines."""
    header: list[str] = []
    found: list[list[str]] = []
    for line in diff.splitlines():
        if line.startswith("@@"):
            found.append([line])
        elif found:
            found[-1].append(line)
        else:
            header.append(line)
    return header, found


def shown(diff: str, needles: tuple[str, ...]) -> list[str]:
    """The header and the hunks holding a needle; each needle must be in some hunk."""
    header, every = hunks(diff)
    for needle in needles:
        if not any(needle in line for hunk in every for line in hunk):
            raise SystemExit(f"readme_outputs: no hunk of the example's diff contains {needle!r}")
    kept = [hunk for hunk in every if any(n in line for n in needles for line in hunk)]
    return header + [line for hunk in kept for line in hunk]


def migrate_example() -> str:
    """``fsdp2-port migrate train.py`` on the bundled FSDP1 example: part of the diff, then the
    run's summary lines."""
    with tempfile.TemporaryDirectory() as scratch:
        shutil.copyfile(EXAMPLE, Path(scratch) / "train.py")
        done = run(["migrate", "train.py"], Path(scratch))
    if done.returncode != 0:
        raise SystemExit(f"readme_outputs: migrate exited {done.returncode}:\n{done.stderr}")
    summary = [line for line in done.stderr.splitlines() if line.startswith("fsdp2-port migrate:")]
    if not summary:
        raise SystemExit("readme_outputs: migrate printed no summary line")
    lines = ["$ fsdp2-port migrate train.py", *shown(done.stdout, SHOWN_HUNKS), *summary]
    return "```diff\n" + "\n".join(lines) + "\n```"


#: Each output block of the README and the function that makes its text.
OUTPUTS: dict[str, Callable[[], str]] = {"migrate-example": migrate_example}


def markers(name: str) -> tuple[str, str]:
    return f"<!-- output:{name}:start -->", f"<!-- output:{name}:end -->"


def replaced(text: str, name: str, body: str) -> str:
    """``text`` with output block ``name`` holding ``body``, the rest unchanged."""
    start, end = markers(name)
    if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
        raise SystemExit(f"readme_outputs: README.md needs one {start} line and one {end} line")
    head, rest = text.split(start)
    return f"{head}{start}\n{body.strip()}\n{end}{rest.split(end)[1]}"


def regenerated(text: str) -> str:
    """The README text with every output block made again."""
    for name, make in OUTPUTS.items():
        text = replaced(text, name, make())
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if stale")
    args = parser.parse_args()
    old = README.read_text(encoding="utf-8")
    new = regenerated(old)
    if new == old:
        return 0
    if args.check:
        diff = difflib.unified_diff(old.splitlines(), new.splitlines(), "README.md", "regenerated")
        print("\n".join(diff))
        print("README.md's output blocks are stale: run python scripts/readme_outputs.py")
        return 1
    README.write_text(new, encoding="utf-8")
    print("README.md: output blocks regenerated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
