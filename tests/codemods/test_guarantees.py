"""Properties every migration keeps, checked on every fixture case migrated by every rule."""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

import pytest
from fixtures_support import case_id, cases, run_case

from fsdp2_port.codemods import audit, engine, markers
from fsdp2_port.codemods.text import split_lines

#: Comments that go with the code they annotate when that code is removed.
DROPPED_WITH_THEIR_NODE = {
    "imports/imports": ["# the wrapper, going away"],
    "constructors/runtime": ["# the FSDP1 wrapper"],
    "isinstance_check/drop": ["# FSDP1's own clip"],  # in the FSDP1 branch it deletes
    "dead_values/qlora": ["# a script's: no importer"],  # on the unread binding removed
}


def comments(text: str) -> list[str]:
    tokens = tokenize.generate_tokens(io.StringIO(text).readline)
    return [t.string for t in tokens if t.type == tokenize.COMMENT]


def inputs(case: Path) -> dict[str, str]:
    if case.is_dir():
        return {str(p.relative_to(case)): p.read_text() for p in sorted(case.rglob("*.py"))}
    return {case.name: case.read_text()}


@pytest.fixture(params=cases(), ids=case_id)
def migrated(request, tmp_path):
    case = request.param
    outputs, findings = run_case(case, tmp_path / "first", every_rule=True)
    return case, inputs(case), outputs, findings


def test_outputs_parse_and_a_second_run_changes_nothing(migrated, tmp_path):
    case, _, outputs, _ = migrated
    for text in outputs.values():
        ast.parse(text)
    again, _ = run_case(Path(tmp_path / "first" / case.name), tmp_path / "second", True)
    assert again == outputs


def test_comments_are_kept(migrated):
    case, sources, outputs, _ = migrated
    lost = []
    for relative, text in sources.items():
        survived = comments(outputs[relative])
        lost += [c for c in comments(text) if c not in survived]
    assert lost == DROPPED_WITH_THEIR_NODE.get(case_id(case), [])


def test_findings_point_at_their_node_and_markers_at_their_code(migrated):
    _, sources, outputs, findings = migrated
    for finding in findings:
        lines = split_lines(sources[finding.path])
        line = lines[finding.line - 1]
        assert 1 <= finding.column <= len(line.rstrip("\r\n")), finding
        assert not line[finding.column - 1].isspace(), finding
        output = split_lines(outputs[finding.path])
        if finding.severity == "review":
            marker = output[finding.marker_line - 1].strip()
            assert marker.startswith(f"{markers.PREFIX}{finding.code} "), (finding, marker)
        else:
            assert finding.marker_line is None


def test_every_new_marker_has_its_finding(migrated):
    _, sources, outputs, findings = migrated
    for relative, text in outputs.items():
        before = sum(markers.PREFIX in line for line in split_lines(sources[relative]))
        after = sum(line.strip().startswith(markers.PREFIX) for line in split_lines(text))
        marked = {f.marker_line for f in findings if f.path == relative and f.marker_line}
        assert after - before == len(marked), relative


def test_nothing_is_half_migrated_or_left_unmarked(migrated, tmp_path):
    _, sources, outputs, _ = migrated
    before = {r: audit.audit(r, t, *engine.module_name(r)) for r, t in sources.items()}
    after = {r: audit.audit(r, t, *engine.module_name(r)) for r, t in outputs.items()}
    assert audit.run_problems(before, after) == []
    assert audit.run_unmarked(before, after) == []


def test_a_line_marked_ignore_is_left_alone():
    source = (
        "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
        "m = FSDP(x)  # fsdp2-port: ignore\n"
    )
    from fsdp2_port.codemods import registry
    from fsdp2_port.codemods.options import Options

    output, findings = engine.migrate_text(source, "x.py", registry.select(), Options())
    assert output == source and findings == []
