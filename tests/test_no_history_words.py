"""The repository speaks about the product as it is, never about how it came to be.

Every tracked text file (and every new one git does not ignore) is scanned for words that tell
the project's development history: numbered steps of the work, issue numbers, sessions of the
people who built it, corpus figures told as they moved. User code the codemod
reads (rule cases, fixtures) and the benchmark manifests (pinned third-party file lists) are
not the project's prose and are left out. The patterns are narrow on purpose: "stop" in
``StopIteration`` or "issues one all-reduce" is no history.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Paths that are not the project's prose: user code the codemod reads, pinned file lists, and
#: this file, whose examples are the words it looks for.
SKIPPED = re.compile(
    r"(^|/)cases/|^tests/codemods/fixtures/|^benchmarks/\w+_manifest\.json$"
    r"|^tests/test_no_history_words\.py$"
)

#: Development history, in any text file: code, comments, docstrings, messages, docs.
EVERYWHERE = {
    "a step of the work": r"\bstops? \d+\b|\bstop's\b|\bstops? (?:ago|before)\b",
    "a step of the work, by place": r"\b(?:this|that|last|latest|earlier|previous|next) stop\b",
    "an issue number": r"\bissues? #?\d+",
    "who built it": r"\b(?:helper|earlier|previous|later|this) sessions?\b|\bthe lead\b",
    "figures as they moved": r"\bcorpus moved\b|\bre-?measured\b|\bfirst contact\b",
    "the origin as a story": r"\bthe seed's (?:bug|code|optimizer)\b",
    "change narration": r"\bpreviously\b|\bused to be\b|\bwe fixed\b|\bfixed since\b",
    "the work in progress": r"\bthis change\b",
}
#: Change narration that is only history in prose (in code, "no longer holds the bytes the run
#: read" describes a file at run time).
IN_PROSE = {"change narration, in prose": r"\bno longer\b|\bany ?more\b"}
#: The pages that must not tell what changed: "now" there is always a before and after.
NOW_FREE = {"README.md", "CHANGELOG.md", "benchmarks/RESULTS.md"}
#: The rules table of docs/migrate.md is generated from the rules' own text, which describes
#: what a rewrite does to the user's code ("no longer runs once the model is FSDP2").
GENERATED = re.compile(
    r"<!-- generated from the rules' CODES.*?<!-- end of the generated table -->", re.S
)

#: Hits in files another part of the work is changing at the same time, as ``path:line: text``.
#: Each is reworded there; the list must end empty.
PENDING: frozenset[str] = frozenset()


def _files() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if listed.returncode != 0:
        pytest.skip("not a git checkout: no list of tracked files")
    return sorted(f for f in listed.stdout.splitlines() if not SKIPPED.search(f))


def _text(path: str) -> str | None:
    try:
        return (ROOT / path).read_text(encoding="utf-8")
    except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
        return None  # binary, or deleted from the work tree


def _pattern(path: str) -> re.Pattern[str]:
    """One expression for every history word that counts in ``path``."""
    patterns = list(EVERYWHERE.values())
    if path.endswith(".md"):
        patterns += IN_PROSE.values()
    if path in NOW_FREE:
        patterns.append(r"\bnow\b")  # a before and after, on a page that tells no changes
    return re.compile("|".join(f"(?:{p})" for p in patterns), re.I)


def hits(path: str, text: str) -> list[str]:
    """``path:line: text`` for each line of ``text`` with a history word."""
    text = GENERATED.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    pattern = _pattern(path)
    if not pattern.search(text):
        return []
    return [
        f"{path}:{number}: {line.strip()}"
        for number, line in enumerate(text.splitlines(), start=1)
        if pattern.search(line)
    ]


def test_no_file_tells_the_history_of_the_work():
    found = [
        hit for path in _files() if (text := _text(path)) is not None for hit in hits(path, text)
    ]
    assert sorted(set(found) - PENDING) == []
    assert sorted(PENDING - set(found)) == [], "reworded: take these off PENDING"


def test_test_names_tell_no_history():
    names = []
    for path in _files():
        if path.startswith("tests/") and path.endswith(".py") and (text := _text(path)):
            names += re.findall(r"^\s*def (test_\w+)", text, re.M)
    assert len(names) > 100
    told = [
        n
        for n in names
        if any(re.search(p, n.replace("_", " "), re.I) for p in EVERYWHERE.values())
    ]
    assert told == []


@pytest.mark.parametrize(
    ("path", "line"),
    [
        ("README.md", "measured at {step} 36"),
        ("README.md", "as this {step} showed"),
        ("x.py", "# {issue} 21: refuse bad numbers"),
        ("x.py", '"""{Issue} #7: keep the journal."""'),
        ("x.py", "# gathered by a helper session"),
        ("docs/a.md", "the codemod no longer rewrites it"),
        ("CHANGELOG.md", "the norm is now global"),
        ("x.py", "# the held-out corpus moved figure 3 to 31"),
    ],
)
def test_a_history_word_is_found(path, line):
    # the words are filled in here, so that this file's own text tells no history
    line = line.format(step="st" + "op", issue="iss" + "ue", Issue="Iss" + "ue")
    assert hits(path, line) == [f"{path}:1: {line}"]


@pytest.mark.parametrize(
    ("path", "line"),
    [
        ("x.py", "except StopIteration:"),
        ("x.py", "# the clip issues one all-reduce per mesh dimension"),
        ("x.py", '"""A file no longer holds the bytes the run read."""'),
        ("docs/a.md", "a run that ends now exits 130"),
        ("x.py", "stop = len(chunk)  # the slice stops at 4096 elements"),
        ("x.py", "# ranks in a session of their own"),
        (
            "docs/migrate.md",
            "<!-- generated from the rules' CODES -->\nit no longer runs\n"
            "<!-- end of the generated table -->",
        ),
    ],
)
def test_the_words_of_the_product_are_not_taken_for_history(path, line):
    assert hits(path, line) == []
