"""benchmarks/RESULTS.md: each benchmark writes its own block, and only that block.

The blocks' figures come from runs too heavy for a test; these check the writer, the tables
each script renders from its measurements, and that every block a script writes is in the file.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest

from benchmarks import results_md

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
MANIFESTS = sorted((ROOT / "benchmarks").glob("*_manifest.json"))


def test_a_block_is_replaced_and_the_rest_kept_byte_for_byte():
    text = (
        "head\n<!-- a:start -->\nold\n<!-- a:end -->\nmiddle\n<!-- b:start -->\nb\n<!-- b:end -->\n"
    )
    new = results_md.replace_block(text, "a", "\nnew\nlines\n\n")
    assert new == text.replace("old", "new\nlines")
    assert results_md.block(new, "b") == "b"


@pytest.mark.parametrize(
    "text",
    [
        "no markers at all\n",
        "<!-- a:start -->\nx\n",  # no end
        "<!-- a:end -->\nx\n<!-- a:start -->\n",  # end before start
        "<!-- a:start -->\n<!-- a:end -->\n<!-- a:start -->\n<!-- a:end -->\n",  # twice
    ],
)
def test_a_block_that_is_not_exactly_one_pair_is_refused(text):
    with pytest.raises(ValueError, match="a:start"):
        results_md.replace_block(text, "a", "body")


def test_write_block_touches_only_its_file_block(tmp_path, capsys):
    path = tmp_path / "RESULTS.md"
    path.write_text("x\n<!-- n:start -->\n1\n<!-- n:end -->\ny\n", encoding="utf-8")
    results_md.write_block("n", "2", path)
    assert path.read_text(encoding="utf-8") == "x\n<!-- n:start -->\n2\n<!-- n:end -->\ny\n"
    assert "'n'" in capsys.readouterr().out


def test_a_table_row_of_the_wrong_width_is_refused():
    assert results_md.table(["a", "b"], [[1, 2]]).splitlines()[-1] == "| 1 | 2 |"
    with pytest.raises(ValueError):
        results_md.table(["a", "b"], [[1]])


def _blocks(text: str) -> list[str]:
    return re.findall(r"^<!-- ([\w-]+):start -->$", text, re.M)


def test_every_block_a_benchmark_writes_is_in_the_file_once():
    text = RESULTS.read_text(encoding="utf-8")
    corpora = [f"corpus-{m.name.removesuffix('_manifest.json')}" for m in MANIFESTS]
    corpora = [c.replace("corpus-corpus", "corpus-original") for c in corpora]
    written = [
        *(f"optimizer-step-{device}" for device in ("cpu", "cuda")),
        *(
            f"norm-clip-{layout}{suffix}"
            for layout in ("fsdp", "hsdp", "fsdp1")
            for suffix in ("", "-cuda")
        ),
        "codemod-speed",
        "codemod-speed-whole-program",
        "codemod-scaling",
        "faults",
        *corpora,
    ]
    assert sorted(_blocks(text)) == sorted(written)
    for name in written:  # each a well-formed pair: replacing it must work
        results_md.replace_block(text, name, "x")


def test_each_manifest_is_named_beside_its_block():
    text = RESULTS.read_text(encoding="utf-8")
    for manifest in MANIFESTS:
        assert manifest.name.split("_manifest")[0] in text, manifest.name


def test_codemod_speed_reports_each_command_against_migrate():
    from benchmarks import codemod_speed

    times = {"migrate": [2.0, 2.2, 1.9], "parse, 1 process": [6.0, 6.6, 5.7]}
    command = "fsdp2-port migrate --check --jobs 2"
    block = codemod_speed.results_block([Path("/x/torch/nn")], 498, command, times)
    assert "| `fsdp2-port migrate --check --jobs 2` | 2.00 (1.90-2.20) | 1.0x |" in block
    assert "| `libcst.parse_module`, 1 process | 6.00 (5.70-6.60) | 3.0x |" in block
    assert "498 files under `torch/nn`" in block


def test_the_optimizer_row_marks_each_goal():
    from benchmarks import optimizer_step

    res = {
        "world_size": 2,
        "backend": "gloo",
        "layout": "fsdp2",
        "params": 20e6,
        "tensors": 100,
        "median_s": {"fsdp2_port": 0.030},
        # per round: SpecForge 3x and 1x the default's time; fused AdamW half of it
        "times_s": {
            "specforge": [0.09, 0.03],
            "fsdp2_port": [0.03, 0.03],
            "adamw-fused": [0.015, 0.015],
        },
        "peak_extra_bytes_per_param": {"fsdp2_port": 0.7},
    }
    row = optimizer_step.results_row(res)
    assert row[0] == "2 gloo ranks, FSDP2, 20 M params in 100 tensors"
    assert row[1:] == [
        "30.0",
        "2.00x faster (1.00-3.00), met",
        "2.00x its time (2.00-2.00), met",
        "0.70, missed",
    ]
    assert optimizer_step.results_row({**res, "layout": None})[0].startswith("1 process")


def test_the_norm_block_states_the_goals_only_where_they_apply():
    from benchmarks import norm_clip

    row = {
        "tensors": 2000,
        "ours_s": 0.02,
        "ours_spread_s": [0.019, 0.03],
        "torch_s": 0.05,
        "torch_spread_s": [0.04, 0.06],
        "ratio": 2.5,
        "ratio_spread": [1.5, 3.0],
        "ours_first_s": 0.025,
        "torch_first_s": 11.0,
        "first_ratio": 440.0,
        "ours_collectives": 1,
        "torch_collectives": 1,
    }
    res = {"layout": "fsdp", "world_size": 2, "backend": "gloo", "rounds": 21, "torch": "t"}
    block = norm_clip.results_block({**res, "rows": [row]})
    assert "| 2000 | 20.00 (19.00-30.00) | 50.00 (40.00-60.00) | 2.50x (1.50x-3.00x) |" in block
    assert "2.50x (missed)" in block and "440x (met)" in block
    hsdp = norm_clip.results_block({**res, "layout": "hsdp", "world_size": 4, "rows": [row]})
    assert "Goals" not in hsdp


def test_the_corpus_block_counts_what_the_run_counted():
    from benchmarks import corpus

    totals = Counter(
        files=10,
        changed_files=4,
        constructors_before=8,
        constructors_after=2,
        bridges=1,
        plain_with_readers=3,
        migrated_files=3,
        files_importing_fsdp1=1,
        fsdp1_imports=1,
        errors=2,
    )
    block = corpus.results_block(totals, 5, ["--whole-program"])
    assert "`python benchmarks/corpus.py CORPUS_DIR --whole-program`" in block
    assert "| FSDP1 constructors migrated | 6 of 8 (75%) |" in block
    assert "| of them plain `fully_shard` code | 5 (3 reading" in block
    assert "| of them still importing FSDP1 names | 1 (1 name) |" in block
    assert (
        "| errors / outputs that do not parse / files a second run changes | 2 / 0 / 0 |" in block
    )


def test_the_faults_block_names_each_failure():
    from benchmarks import faults

    outcomes = [("codemod", True, "a"), ("codemod", False, "b"), ("runtime", True, "c")]
    block = faults.results_block(outcomes, 12.0, SimpleNamespace(seed=21, kills=20))
    assert "| codemod | 2 | 1 |" in block and "| runtime | 1 | 1 |" in block
    assert "| all | 3 | 2 |" in block and "- FAIL b" in block and "FAIL a" not in block
