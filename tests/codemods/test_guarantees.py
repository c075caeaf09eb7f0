"""Properties every migration keeps, checked over every fixture with every rule."""

from __future__ import annotations

import io
import tokenize
from pathlib import Path

import libcst as cst
import pytest

from codemods import batch, engine, markers, registry
from codemods.options import Options
from codemods.rules.leftovers import LeftoversRule

FIXTURES = sorted((Path(__file__).parent / "fixtures").glob("*/*.in.py"))
#: Comments inside an argument that the rewrite drops (they go with the argument).
DROPPED_WITH_THEIR_NODE: dict[str, set[str]] = {}


def migrate(path: Path) -> tuple[str, list]:
    return engine.migrate_text(path.read_text(), path.name, registry.select(), Options())


def comments(text: str) -> list[str]:
    tokens = tokenize.generate_tokens(io.StringIO(text).readline)
    return [t.string for t in tokens if t.type == tokenize.COMMENT]


@pytest.mark.parametrize("case", FIXTURES, ids=lambda p: f"{p.parent.name}/{p.name[:-6]}")
def test_all_rules_parse_idempotent_and_keep_comments(case: Path) -> None:
    output, _findings = migrate(case)
    cst.parse_module(output)
    assert migrate_text_again(output) == output
    survived = comments(output)
    lost = [c for c in comments(case.read_text()) if c not in survived]
    assert lost == sorted(DROPPED_WITH_THEIR_NODE.get(case.name, ())), lost


def migrate_text_again(text: str) -> str:
    return engine.migrate_text(text, "again.py", registry.select(), Options())[0]


@pytest.mark.parametrize("case", FIXTURES, ids=lambda p: f"{p.parent.name}/{p.name[:-6]}")
def test_nothing_fsdp1_is_left_without_a_marker(case: Path) -> None:
    output, _ = migrate(case)
    again, _flagged = engine.migrate_text(output, case.name, [LeftoversRule], Options())
    assert again == output, "an FSDP1 reference has no marker"


@pytest.mark.parametrize("case", FIXTURES, ids=lambda p: f"{p.parent.name}/{p.name[:-6]}")
def test_every_review_finding_points_at_its_marked_statement(case: Path) -> None:
    output, findings = migrate(case)
    lines = engine.split_lines(output)
    for finding in findings:
        assert 1 <= finding.line <= len(lines)
        assert not lines[finding.line - 1].lstrip().startswith(markers.PREFIX), finding
        if finding.severity != "review":
            continue
        above = finding.line - 2
        while above >= 0 and not lines[above].lstrip().startswith(markers.PREFIX):
            above -= 1  # the finding may sit inside a multi-line statement
        block = []
        while above >= 0 and lines[above].lstrip().startswith(markers.PREFIX):
            block.append(lines[above])
            above -= 1
        assert any(f"{markers.PREFIX}{finding.code} " in line for line in block), finding


def test_ignore_comment_leaves_the_line_alone() -> None:
    source = (
        "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
        "m = FSDP(x)  # fsdp2-port: ignore\n"
    )
    output, findings = engine.migrate_text(source, "x.py", registry.select(), Options())
    assert output == source and findings == []


def test_files_without_fsdp1_text_are_not_parsed(tmp_path) -> None:
    plain = tmp_path / "plain.py"
    plain.write_text("def broken(:\n")  # would not parse, but there is nothing to migrate
    result = batch.migrate_file(
        str(plain), [r.CODE for r in registry.RULES], Options(), write=False
    )
    assert (result.parsed, result.error, result.changed) == (False, None, False)


@pytest.mark.parametrize(
    "case", [p for p in FIXTURES if p.parent.name == "all"], ids=lambda p: p.name[:-6]
)
def test_crlf_and_tab_indented_files_get_the_same_rewrite(case: Path) -> None:
    """Generated lines (markers, loops, try/finally) follow the file's newline and indent style."""
    source, expected = (
        case.read_text(),
        case.with_name(case.name.replace(".in.py", ".out.py")).read_text(),
    )
    crlf, _ = engine.migrate_text(
        source.replace("\n", "\r\n"), case.name, registry.select(), Options()
    )
    assert crlf == expected.replace("\n", "\r\n")
    tabs = lambda text: "\n".join(_tabbed(line) for line in text.split("\n"))  # noqa: E731
    tabbed, _ = engine.migrate_text(tabs(source), case.name, registry.select(), Options())
    assert tabbed == tabs(expected)


def _tabbed(line: str) -> str:
    stripped = line.lstrip(" ")
    depth = (len(line) - len(stripped)) // 4
    return (
        "\t" * depth + stripped
        if (stripped and not stripped.startswith((")", "]", "}"))) or depth
        else line
    )
