"""Every fixture ``fixtures/<CODE>_<rule>/*.in.py`` migrates to its ``*.out.py``.

A rule's fixtures run that rule plus the import clean-up (F2P001); ``fixtures/all`` runs every
rule. Each output must also parse and be a fixed point (a second run changes nothing).
"""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

from codemods import engine, registry
from codemods.options import Options

FIXTURES = Path(__file__).parent / "fixtures"
CASES = sorted(FIXTURES.glob("*/*.in.py"))


def rules_for(directory: str):
    if directory == "all" or directory.startswith("torch25"):
        return registry.select()
    code = directory.split("_", 1)[0]
    return registry.select([code, "F2P001"])


def options_for(path: Path) -> Options:
    text = path.read_text()
    if "# fixture: target-torch 2.5" in text:
        return Options.for_torch("2.5")
    if "# fixture: no-runtime-dependency" in text:
        return Options(runtime_dependency=False)
    return Options()


@pytest.mark.parametrize("case", CASES, ids=lambda p: f"{p.parent.name}/{p.name[:-6]}")
def test_fixture(case: Path) -> None:
    rules = rules_for(case.parent.name)
    options = options_for(case)
    source = case.read_text()
    expected = case.with_name(case.name.replace(".in.py", ".out.py")).read_text()
    output, _ = engine.migrate_text(source, str(case), rules, options)
    assert output == expected
    cst.parse_module(output)
    again, _ = engine.migrate_text(output, str(case), rules, options)
    assert again == output, "second run changed the output"


def test_every_rule_has_fixtures() -> None:
    covered = {p.parent.name.split("_", 1)[0] for p in CASES}
    assert set(registry.BY_CODE) <= covered
