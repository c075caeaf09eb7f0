"""Every fixture case migrates to its expected text with its expected findings (positions in
the input, marker lines in the output), and its output is a fixed point."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures_support import (
    REGENERATE,
    case_id,
    cases,
    expected_outputs,
    expected_paths,
    findings_text,
    regenerate,
    run_case,
)

from fsdp2_port.codemods import registry


@pytest.mark.parametrize("case", cases(), ids=case_id)
def test_fixture(case: Path, tmp_path: Path) -> None:
    outputs, findings = run_case(case, tmp_path / "first")
    if REGENERATE:
        regenerate(case, outputs, findings)
    assert outputs == expected_outputs(case)
    assert findings_text(findings) == expected_paths(case)[1].read_text()


def test_every_code_has_fixtures() -> None:
    """Each code is found in some case's snapshot (a rule's own cases, for a rule's codes)."""
    found = {
        line.split()[1]
        for case in cases()
        for line in expected_paths(case)[1].read_text().splitlines()
        if line.strip()
    }
    assert set(registry.CODES) <= found, sorted(set(registry.CODES) - found)
