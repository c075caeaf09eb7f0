"""The user documentation: a short README whose pasted output is regenerated, links that
resolve, commands that exist, and benchmark figures that match benchmarks/RESULTS.md."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted(
    [README, ROOT / "CHANGELOG.md", ROOT / "SECURITY.md", *ROOT.glob("docs/*.md")],
) + sorted(ROOT.glob("benchmarks/*.md"))
#: The README of a tool a newcomer reads in minutes stays about this long (ruff's: ~560 lines).
README_MAX_LINES = 300


def _outputs():
    spec = importlib.util.spec_from_file_location(
        "readme_outputs", ROOT / "scripts" / "readme_outputs.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readme_is_short():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"


def test_the_readme_opens_with_the_two_setup_commands_ci_runs():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert lines[2:6] == ["```", "bash scripts/demo", "bash scripts/test", "```"]
    assert re.search(r"^bash scripts/test\b", (ROOT / ".ci" / "run").read_text(), re.M)


def test_the_readme_says_what_it_is_before_anything_else():
    text = README.read_text(encoding="utf-8")
    first_prose = text.split("```", 2)[2].strip().split("\n\n")[0]
    assert "FSDP1" in first_prose and "FSDP2" in first_prose and "It is for" in first_prose


def test_the_quick_start_makes_a_virtual_environment_first():
    text = README.read_text(encoding="utf-8")
    quick = text.split("## Quick start", 1)[1]
    assert quick.index("python3 -m venv .venv && . .venv/bin/activate") < quick.index("pip install")
    for command in ("fsdp2-port migrate ", "fsdp2-port migrate --write", "fsdp2-port compare "):
        assert command in quick


def test_the_pasted_command_output_is_current():
    """Regenerates every output block (runs ``fsdp2-port migrate`` on the example)."""
    outputs = _outputs()
    text = README.read_text(encoding="utf-8")
    assert outputs.regenerated(text) == text, (
        "README.md's pasted output is stale: run python scripts/readme_outputs.py"
    )


def test_a_stale_output_block_is_rewritten_and_the_rest_kept():
    outputs = _outputs()
    start, end = outputs.markers("x")
    text = f"before\n{start}\nstale\n{end}\nafter\n"
    assert outputs.replaced(text, "x", "fresh\n") == f"before\n{start}\nfresh\n{end}\nafter\n"
    with pytest.raises(SystemExit):
        outputs.replaced("no block here\n", "x", "fresh")


def test_only_the_hunks_asked_for_are_shown():
    outputs = _outputs()
    diff = "--- a/t.py\n+++ b/t.py\n@@ -1 +1 @@\n-a\n+b\n@@ -9 +9 @@\n-keep\n+this\n"
    assert outputs.shown(diff, ("keep",)) == [
        "--- a/t.py",
        "+++ b/t.py",
        "@@ -9 +9 @@",
        "-keep",
        "+this",
    ]
    with pytest.raises(SystemExit, match="absent"):
        outputs.shown(diff, ("absent",))


_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    return {_anchor(m) for m in re.findall(r"^#+ (.+)$", text, re.M)}


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path):
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    for target in _LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto: ...
        file, _, anchor = target.partition("#")
        linked = (path.parent / file).resolve() if file else path
        assert linked.exists(), f"{path.name}: {target} does not exist"
        if anchor and linked.suffix == ".md":
            assert anchor in _anchors(linked), f"{path.name}: no heading for #{anchor}"


def test_the_commands_the_docs_name_exist():
    shown = subprocess.run(
        [sys.executable, "-m", "fsdp2_port", "--help"], capture_output=True, text=True, check=False
    )
    listed = set(re.findall(r"^  ([a-z][\w-]*)", shown.stdout + shown.stderr, re.M))
    assert {"migrate", "compare", "verify", "convert-checkpoint"} <= listed
    for path in DOCS:
        if path.name == "CHANGELOG.md":
            continue  # names what releases did, not what to type
        named = set(re.findall(r"`fsdp2-port ([a-z][\w-]*)", path.read_text(encoding="utf-8")))
        assert named <= listed, f"{path.name} names {sorted(named - listed)}"


def test_the_benchmark_figures_of_the_readme_are_those_of_the_results():
    section = README.read_text(encoding="utf-8").split("## Benchmarks", 1)[1].split("\n## ")[0]
    results = (ROOT / "benchmarks" / "RESULTS.md").read_text(encoding="utf-8")
    figures = re.findall(r"\d+(?:\.\d+)?x|\d+\.\d+ B/param|\d+ of \d+|\d+ files", section)
    assert len(figures) >= 5
    for figure in figures:
        number = figure.split(" B/param")[0].split(" files")[0]
        assert number in results, f"README's {figure!r} is not in benchmarks/RESULTS.md"


def _walkthrough() -> dict[str, str]:
    """The files docs/contributing.md's walkthrough creates: path -> text."""
    text = (ROOT / "docs" / "contributing.md").read_text(encoding="utf-8")
    return dict(re.findall(r"^<!-- file: (\S+) -->\n```python\n(.*?)^```$", text, re.M | re.S))


def _lines_with(text: str, needle: str) -> list[int]:
    return [n for n, line in enumerate(text.splitlines(), 1) if needle in line]


def test_the_contributing_walkthrough_adds_a_rule_that_works(tmp_path):
    """The walkthrough's rule, added to a scratch copy of the package as the page says, marks
    the flattened parameters of the migrating model (also in a helper of another file) and
    nothing else."""
    files = _walkthrough()
    rule = "fsdp2_port/codemods/rules/vector/"
    assert {f"{rule}rule.py", f"{rule}__init__.py"} <= files.keys()
    shutil.copytree(
        ROOT / "fsdp2_port",
        tmp_path / "fsdp2_port",
        ignore=shutil.ignore_patterns("__pycache__", "cases"),
    )
    case = tmp_path / "case"
    for path, text in files.items():
        inside = path.split("/cases/vector.in/", 1)
        target = case / inside[1] if len(inside) == 2 else tmp_path / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    registry = tmp_path / "fsdp2_port" / "codemods" / "registry.py"
    text = registry.read_text(encoding="utf-8")
    # step 2 of the page, done as it says (it must change when the registry does)
    assert "    ParamShapesRule,\n    LeftoversRule,\n" in text
    text = text.replace(
        "    ParamShapesRule,\n    LeftoversRule,\n",
        "    ParamShapesRule,\n    VectorRule,\n    LeftoversRule,\n",
    )
    last_import = "from fsdp2_port.codemods.rules.state_dict import StateDictRule\n"
    assert last_import in text
    text = text.replace(
        last_import, last_import + "from fsdp2_port.codemods.rules.vector import VectorRule\n"
    )
    registry.write_text(text, encoding="utf-8")
    command = ["migrate", "--format=json", "--select=F2P002,F2P015", "case"]
    run = subprocess.run(
        [sys.executable, "-m", "fsdp2_port", *command],
        cwd=tmp_path,  # the scratch package comes first on sys.path
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    found = {
        (Path(r["path"]).name, r["line"])
        for r in json.loads(run.stdout)
        if r.get("code") == "F2P015"
    }
    train = (case / "pkg" / "train.py").read_text()
    snapshots = (case / "pkg" / "snapshots.py").read_text()
    expected = {("train.py", n) for n in _lines_with(train, "(model.parameters())")}
    expected |= {("snapshots.py", n) for n in _lines_with(snapshots, "(model.parameters())")}
    assert len(expected) == 2 and found == expected
    assert _lines_with(snapshots, "(encoder.parameters())")  # the line left alone is there


def test_the_tests_the_docs_cite_exist():
    cited = 0
    for path in DOCS:
        for file, name in re.findall(r"`(tests/[\w/]+\.py)(?:::(\w+))?`", path.read_text()):
            assert (ROOT / file).exists(), f"{path.name} cites {file}"
            if name:
                assert f"def {name}(" in (ROOT / file).read_text(), f"{path.name}: {file}::{name}"
            cited += 1
    assert cited > 20
