"""What is generated from the rules' own metadata: the docs table and ``--list-rules``."""

from __future__ import annotations

import os
from pathlib import Path

from fsdp2_port.codemods import registry
from fsdp2_port.codemods.cli import main

DOC = Path(__file__).resolve().parents[2] / "docs" / "migrate.md"
BEGIN = "<!-- generated from the rules' CODES"
END = "<!-- end of the generated table -->"


def test_docs_rules_table_is_the_rules_own() -> None:
    text = DOC.read_text()
    head, rest = text.split(BEGIN, 1)
    marker_line, rest = rest.split("\n", 1)
    _, tail = rest.split(END, 1)
    expected = head + BEGIN + marker_line + "\n" + registry.rules_table() + END + tail
    if os.environ.get("FSDP2_PORT_REGENERATE") == "1":
        DOC.write_text(expected)
        text = expected
    assert text == expected


def test_list_rules_prints_every_code_with_its_summary(capsys) -> None:
    assert main(["--list-rules"]) == 0
    out = capsys.readouterr().out
    for code, summary in registry.CODES.items():
        assert f"{code}" in out and summary in out


def test_each_code_belongs_to_one_rule() -> None:
    owners = [code for rule in registry.RULES for code in rule.CODES]
    assert len(owners) == len(set(owners))
    assert all(code in registry.CODES for rule in registry.RULES for code in rule.NEEDS)
