"""What is generated from the rules' own metadata: the docs tables and ``--list-rules``; and
the tests each code with safe rewrites names (``Code.proven_by``), read as files: this suite
runs without torch."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

from fsdp2_port.codemods import registry
from fsdp2_port.codemods.cli import main

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "migrate.md"
BEGIN = "<!-- generated from the rules' CODES"
END = "<!-- end of the generated table -->"
SAFE_BEGIN, SAFE_END = "<!-- safe-codes:start -->", "<!-- safe-codes:end -->"
#: Where the codemod's expected findings are written down: its rule cases and fixtures.
FINDINGS = (
    "fsdp2_port/codemods/rules/*/cases/**/*.findings",
    "tests/codemods/fixtures/**/*.findings",
)
SAFE_INTRO = """\
### Safe rewrites and the tests that prove them

A finding labelled `safe` is a rewrite that keeps what the program computes. For each code with
such rewrites, these tests run its FSDP1 lines and what the codemod writes for them, and find the
same values: FSDP1 programs run side by side with their migration by the codemod (losses,
gradient norms, state dicts, the answers of type tests), or the form the codemod writes called
next to FSDP1's own call, on FSDP1 and FSDP2 models. Generated from the rules' `CODES`
(`proven_by`): `FSDP2_PORT_REGENERATE=1 pytest tests/codemods/test_registry.py`.

"""


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


def _safe_codes() -> set[str]:
    """The codes of every ``[safe, rewritten]`` finding the rule cases and fixtures expect."""
    found = set()
    for pattern in FINDINGS:
        for path in ROOT.glob(pattern):
            found |= set(re.findall(r"\b(F2P\d{3}) \[safe, rewritten\]", path.read_text()))
    return found


def safe_codes_block() -> str:
    """The block of ``docs/migrate.md`` between the safe-codes markers, in markdown."""
    rows = ["| code | topic | proven by |", "| --- | --- | --- |"]
    for code, doc in registry.DOCS.items():
        if doc.proven_by:
            tests = "<br>".join(f"`{node_id}`" for node_id in doc.proven_by)
            rows.append(f"| {code} | {doc.topic} | {tests} |")
    return SAFE_INTRO + "\n".join(rows) + "\n"


def _not_a_test(node_id: str) -> str | None:
    """Why ``node_id`` (``path::[Class::]function[case]``) names no test function of the
    repository, or None: the file is parsed, never imported."""
    path, _, qualified = node_id.partition("::")
    qualified, _, case = qualified.partition("[")
    file = ROOT / path
    if not path.startswith("tests/") or not file.is_file():
        return f"no test file {path}"
    tree = ast.parse(file.read_text(), path)
    body: list[ast.stmt] = tree.body
    *classes, name = qualified.split("::")
    for cls in classes:
        found = [n for n in body if isinstance(n, ast.ClassDef) and n.name == cls]
        if not found:
            return f"no class {cls} in {path}"
        body = found[0].body
    functions = [n for n in body if isinstance(n, ast.FunctionDef) and n.name == name]
    if not name.startswith("test") or not functions:
        return f"no test function {qualified} in {path}"
    if case:
        case = case.removesuffix("]")
        decorators = " ".join(ast.unparse(d) for d in functions[0].decorator_list)
        strings = {
            n.value
            for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str)
        }
        if "parametrize" not in decorators:
            return f"{qualified} is not parametrized: no case [{case}]"
        if not any(case == s or case.startswith(f"{s}-") for s in strings):
            return f"{qualified}[{case}]: no parameter of {path} begins that id"
    return None


def test_every_code_with_safe_rewrites_names_the_tests_that_prove_them() -> None:
    safe = _safe_codes()
    assert safe, "the rule cases expect safe rewrites"
    assert [c for c in sorted(safe) if not registry.DOCS[c].proven_by] == []
    # and a code without safe rewrites claims no proof of them
    assert [c for c, d in registry.DOCS.items() if d.proven_by and c not in safe] == []
    assert all(len(set(d.proven_by)) == len(d.proven_by) for d in registry.DOCS.values())


def test_every_proving_test_exists() -> None:
    named = {node_id for doc in registry.DOCS.values() for node_id in doc.proven_by}
    assert {n: why for n in sorted(named) if (why := _not_a_test(n))} == {}


def test_a_missing_test_is_named() -> None:
    existing = "tests/codemods/test_registry.py::test_every_proving_test_exists"
    assert _not_a_test(existing) is None
    assert _not_a_test(existing + "_twice") == (
        "no test function test_every_proving_test_exists_twice in tests/codemods/test_registry.py"
    )
    assert "no test file" in (_not_a_test("tests/test_nowhere.py::test_x") or "")
    assert "not parametrized" in (_not_a_test(existing + "[case]") or "")


def test_docs_safe_codes_block_is_current() -> None:
    text = DOC.read_text()
    head, rest = text.split(SAFE_BEGIN + "\n", 1)
    _, tail = rest.split(SAFE_END, 1)
    assert END in head, "the block follows the rules table"
    expected = head + SAFE_BEGIN + "\n" + safe_codes_block() + SAFE_END + tail
    if os.environ.get("FSDP2_PORT_REGENERATE") == "1":
        DOC.write_text(expected)
        text = expected
    assert text == expected
