"""``fsdp2-port migrate``: output streams, exit codes, file handling, options."""

from __future__ import annotations

import json
import os
import stat
from dataclasses import replace
from pathlib import Path

import pytest
from codemod_samples import FSDP1_SOURCE, FSDP2_SOURCE

from fsdp2_port.codemods import sources, writes
from fsdp2_port.codemods.cli import main


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_dry_run_prints_only_the_diff_on_stdout(tmp_path, capsys):
    target = write(tmp_path / "train.py", FSDP1_SOURCE)
    assert main([str(target)]) == 0
    out, err = capsys.readouterr()
    assert out.startswith(f"--- {target}\n+++ {target}\n")
    assert "+    return fully_shard(model)" in out
    assert "F2P002" in err and "F2P002" not in out
    assert target.read_text() == FSDP1_SOURCE


def test_check_exit_codes(tmp_path, capsys):
    old = write(tmp_path / "old.py", FSDP1_SOURCE)
    new = write(tmp_path / "new.py", FSDP2_SOURCE)
    assert main(["--check", str(old)]) == 1
    assert main(["--check", str(new)]) == 0
    assert old.read_text() == FSDP1_SOURCE


def test_no_path_migrates_the_current_directory(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["--check"]) == 0, "nothing here"
    write(tmp_path / "pkg" / "train.py", FSDP1_SOURCE)
    assert main(["--check"]) == 1
    assert "+++ b/pkg/train.py" in capsys.readouterr().out
    assert main(["--write"]) == 0 and (tmp_path / "pkg" / "train.py").read_text() == FSDP2_SOURCE


# Its model stays FSDP1 (an FSDP1 internal is read): two findings to review, two markers.
MARKED = """\
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def wrap(model):
    m = FSDP(model)
    m._handle.flat_param.grad = None
    return m
"""


def test_check_fails_on_changes_and_fail_on_review_on_markers_too(tmp_path, capsys):
    """``--check`` fails while a file would change; once the markers are written, only
    ``--fail-on-review`` still fails, until the code they mark is dealt with."""
    target = write(tmp_path / "train.py", MARKED)
    assert main(["--check", str(target)]) == 1
    assert main(["--write", str(target)]) == 0
    capsys.readouterr()
    assert main(["--check", str(target)]) == 0
    assert "0 would change, 2 findings (2 to review)" in capsys.readouterr().err
    assert main(["--check", "--fail-on-review", str(target)]) == 1
    assert main(["--fail-on-review", str(target)]) == 1
    clean = write(tmp_path / "clean.py", FSDP2_SOURCE)
    assert main(["--check", "--fail-on-review", str(clean)]) == 0


def test_the_summary_counts_in_words(tmp_path, capsys):
    one = write(tmp_path / "one" / "train.py", FSDP1_SOURCE)
    write(
        tmp_path / "one" / "bad.py",
        "from torch.distributed.fsdp import (FullyShardedDataParallel,\n",
    )
    main([str(one)])
    assert (
        "fsdp2-port migrate: 1 file scanned, 1 parsed, 1 would change, 2 findings"
        " (0 to review), 0 errors"
    ) in capsys.readouterr().err.splitlines()
    main([str(one.parent)])
    assert ", 1 error\n" in capsys.readouterr().err


def test_write_then_check_passes(tmp_path, capsys):
    target = write(tmp_path / "train.py", FSDP1_SOURCE)
    assert main(["--write", str(target)]) == 0
    assert target.read_text() == FSDP2_SOURCE
    assert main(["--check", str(target)]) == 0


def test_bad_arguments_exit_2(tmp_path, capsys):
    target = write(tmp_path / "train.py", FSDP1_SOURCE)
    assert main(["--select", "F2P777", str(target)]) == 2
    assert main(["--target-torch", "2.3", str(target)]) == 2
    assert main(["--jobs", "0", str(target)]) == 2
    assert main(["--write", "--check", str(target)]) == 2
    assert main([str(tmp_path / "missing.py")]) == 2
    assert "unknown rule code" in capsys.readouterr().err


def test_json_formats(tmp_path, capsys):
    target = write(tmp_path / "train.py", FSDP1_SOURCE)
    assert main(["--format", "json", str(target)]) == 0
    *records, summary = json.loads(capsys.readouterr().out)
    assert {r["code"] for r in records} == {"F2P001", "F2P002"}
    assert summary["summary"]["findings"] == 2
    wrap = next(r for r in records if r["code"] == "F2P002")
    assert wrap == {
        "path": str(target),
        "line": 7,
        "column": 12,
        "code": "F2P002",
        "message": "FSDP(...) -> fully_shard(...)",
        "severity": "safe",
        "action": "rewritten",
        "marker_line": None,
    }
    assert main(["--format", "jsonl", str(target)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line) for line in lines] == [*records, summary]


def test_json_is_one_array_even_with_no_findings_or_many_files(tmp_path, capsys):
    assert main(["--format", "json", str(write(tmp_path / "plain.py", "x = 1\n"))]) == 0
    assert [list(r) for r in json.loads(capsys.readouterr().out)] == [["summary"]]
    write(tmp_path / "a.py", FSDP1_SOURCE)
    write(tmp_path / "b.py", FSDP1_SOURCE)
    assert main(["--format", "json", str(tmp_path)]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 4 + 1  # the findings, the summary


def test_github_annotations(tmp_path, capsys):
    target = write(
        tmp_path / "train.py",
        FSDP1_SOURCE
        + "\n\ndef is_scaler(s):\n"
        + "    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler\n\n"
        + "    return isinstance(s, ShardedGradScaler)\n",
    )
    assert main(["--format", "github", str(target)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert (
        f"::notice file={target},line=7,col=12,title=F2P002::F2P002 FSDP(...) -> fully_shard(...)"
        in out
    )
    warning = next(line for line in out if line.startswith("::warning"))
    assert warning.startswith(
        f"::warning file={target},line=13,col=26,title=F2P010::F2P010 ShardedGradScaler"
    )


def test_select_and_ignore(tmp_path, capsys):
    target = write(tmp_path / "train.py", FSDP1_SOURCE)
    assert main(["--format", "json", "--select", "F2P001", str(target)]) == 0
    records = json.loads(capsys.readouterr().out)
    assert [list(r) for r in records] == [["summary"]], "nothing to remove: the constructor stays"
    assert main(["--format", "jsonl", "--ignore", "f2p001,F2P099", str(target)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line).get("code") for line in lines] == ["F2P002", None]


def test_target_torch_chooses_the_import_path(tmp_path, capsys):
    target = write(tmp_path / "train.py", FSDP1_SOURCE)
    assert main(["--target-torch", "2.5", str(target)]) == 0
    assert "+from torch.distributed._composable.fsdp import fully_shard" in capsys.readouterr().out


def test_write_keeps_encoding_newlines_and_mode(tmp_path, capsys):
    latin = tmp_path / "latin.py"
    latin.write_bytes(("# -*- coding: latin-1 -*-\n# caf\xe9\n" + FSDP1_SOURCE).encode("latin-1"))
    bom = tmp_path / "bom.py"
    bom.write_bytes(b"\xef\xbb\xbf" + ("# \u00fcber\n" + FSDP1_SOURCE).encode("utf-8"))
    crlf = tmp_path / "crlf.py"
    crlf.write_bytes(FSDP1_SOURCE.replace("\n", "\r\n").encode())
    os.chmod(crlf, 0o750)
    assert main(["--write", str(tmp_path)]) == 0
    assert latin.read_bytes() == ("# -*- coding: latin-1 -*-\n# caf\xe9\n" + FSDP2_SOURCE).encode(
        "latin-1"
    )
    assert bom.read_bytes() == b"\xef\xbb\xbf" + ("# \u00fcber\n" + FSDP2_SOURCE).encode("utf-8")
    assert crlf.read_bytes() == FSDP2_SOURCE.replace("\n", "\r\n").encode()
    assert stat.S_IMODE(crlf.stat().st_mode) == 0o750
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bom.py", "crlf.py", "latin.py"], (
        "no temporary files left"
    )


def test_write_is_all_or_nothing(tmp_path, monkeypatch):
    first = write(tmp_path / "a.py", FSDP1_SOURCE)
    second = write(tmp_path / "b.py", FSDP1_SOURCE)

    def stage_or_fail(target, data, like, real=writes._stage):
        if os.path.basename(target).startswith(".b.py."):
            raise OSError(28, "No space left on device", target)
        return real(target, data, like)

    monkeypatch.setattr(writes, "_stage", stage_or_fail)
    read = writes.sha(FSDP1_SOURCE.encode())
    outputs = [(str(p), FSDP2_SOURCE, "utf-8", read) for p in (first, second)]
    problem = writes.write_all(outputs)
    assert problem is not None and "No space left on device" in problem
    assert first.read_text() == FSDP1_SOURCE and second.read_text() == FSDP1_SOURCE
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.py", "b.py"], "no temporaries"


def test_an_internal_error_in_one_file_writes_no_file_of_the_run(tmp_path, capsys, monkeypatch):
    from fsdp2_port.codemods import apply

    first = write(tmp_path / "a.py", FSDP1_SOURCE)
    second = write(tmp_path / "b.py", FSDP1_SOURCE)
    real = apply.apply_plan

    def collide(text, plan, *args, **kwargs):
        if plan.path == str(second):
            raise apply.InternalError("two rewrites touch the same code (test)")
        return real(text, plan, *args, **kwargs)

    monkeypatch.setattr(apply, "apply_plan", collide)
    assert main(["--write", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{second}: error: internal error" in err
    assert f"{first}: error: not written: {second} could not be migrated" in err
    assert "0 changed" in err
    assert first.read_text() == FSDP1_SOURCE and second.read_text() == FSDP1_SOURCE


def test_bad_files_with_no_fsdp_text_are_not_read_and_the_run_goes_on(tmp_path, capsys):
    broken = write(tmp_path / "a_broken.py", "import torch\nx = (\n")
    undecodable = tmp_path / "b_undecodable.py"
    undecodable.write_bytes(b"x = '\xff\xfe'\n")
    good = write(tmp_path / "c_good.py", FSDP1_SOURCE)
    assert main(["--write", str(tmp_path)]) == 0  # the text filter skips them: nothing to do
    assert "0 errors" in capsys.readouterr().err
    assert broken.read_text() == "import torch\nx = (\n"
    assert undecodable.read_bytes() == b"x = '\xff\xfe'\n"
    assert good.read_text() == FSDP2_SOURCE


@pytest.mark.parametrize(
    "unread",
    [
        b"from torch.distributed.fsdp import (FullyShardedDataParallel,\n",  # a syntax error
        b"type Alias = int\ndef save(model):\n    model.no_sync()\n",  # a newer Python's
        b"from torch.distributed.fsdp import FullyShardedDataParallel\nx = '\xff\xfe'\n",
    ],
    ids=["syntax", "newer", "undecodable"],
)
def test_a_file_that_cannot_be_read_but_may_call_fsdp1_holds_the_run(tmp_path, capsys, unread):
    # what it does to a model cannot be seen: the run's models stay FSDP1, and say why
    (tmp_path / "a_unread.py").write_bytes(unread)
    good = write(tmp_path / "c_good.py", FSDP1_SOURCE)
    assert main(["--write", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "FSDP(...) left as is (its model stays FSDP1 because of F2P099 at " in err
    assert "a_unread.py:1" in err and "a_unread.py: error: cannot " in err
    assert "FullyShardedDataParallel" in good.read_text() and "fully_shard(" not in good.read_text()
    assert (tmp_path / "a_unread.py").read_bytes() == unread


def test_unreadable_file_is_an_error(tmp_path, capsys, monkeypatch):
    target = write(tmp_path / "train.py", FSDP1_SOURCE)
    other = write(tmp_path / "z_other.py", FSDP1_SOURCE)
    real_open = os.open

    def guarded(path, *args, **kwargs):
        if str(path) == str(target):
            raise PermissionError(13, "Permission denied")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", guarded)
    assert main([str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert f"{target}: error: cannot read: Permission denied" in err
    assert f"+++ {other}" in out, "the run goes on after an unreadable file"


def test_no_runtime_dependency(tmp_path, capsys):
    target = write(
        tmp_path / "train.py",
        FSDP1_SOURCE + "\n\ndef clip(m):\n    m = FSDP(m)\n    return m.clip_grad_norm_(1.0)\n",
    )
    assert main(["--no-runtime-dependency", str(target)]) == 0
    out = capsys.readouterr().out
    assert (
        "torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0).full_tensor()" in out
        and "import fsdp2_port" not in out
    )


def test_progress_goes_to_stderr_only(tmp_path, capsys, monkeypatch):
    for index in range(25):
        write(tmp_path / f"f{index:02d}.py", FSDP1_SOURCE)
    monkeypatch.setattr("sys.stderr.isatty", lambda: True, raising=False)
    assert main(["--format", "json", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert "analysing [25/25]" in err and "applying [25/25]" in err
    assert len(json.loads(out)) == 50 + 1  # the findings, the summary


def test_pre_commit_hook_runs_the_check():
    yaml = pytest.importorskip("yaml")
    hooks = yaml.safe_load((Path(__file__).parents[2] / ".pre-commit-hooks.yaml").read_text())
    assert [(h["id"], h["entry"], h["language"]) for h in hooks] == [
        ("fsdp2-port-migrate", "fsdp2-port migrate --check", "python")
    ]


def test_symlinks_and_non_python_files_are_skipped(tmp_path, capsys):
    real = write(tmp_path / "real" / "train.py", FSDP1_SOURCE)
    (tmp_path / "link.py").symlink_to(real)
    (tmp_path / "linkdir").symlink_to(real.parent)
    write(tmp_path / "notes.txt", FSDP1_SOURCE)
    files, problems = sources.discover(
        [str(tmp_path), str(tmp_path / "link.py"), str(tmp_path / "notes.txt")]
    )
    assert files == [str(real)] and problems == []


@pytest.mark.parametrize(
    "directory",
    [
        ".git",
        ".venv",
        "venv",
        "build",
        "site-packages",
        "__pycache__",
        "node_modules",
        ".tox",
        "env-with-cfg",
    ],
)
def test_tool_directories_are_skipped_unless_named(tmp_path, directory):
    hidden = write(tmp_path / directory / "pkg" / "train.py", FSDP1_SOURCE)
    if directory == "env-with-cfg":
        (tmp_path / directory / "pyvenv.cfg").write_text("home = /usr\n")
    visible = write(tmp_path / "src" / "train.py", FSDP1_SOURCE)
    assert sources.discover([str(tmp_path)])[0] == [str(visible)]
    assert sources.discover([str(tmp_path / directory)])[0] == [str(hidden)]


def test_jobs_give_the_same_output_in_the_same_order(tmp_path, capsys):
    for index in range(12):
        write(tmp_path / f"m{index:02d}" / "train.py", FSDP1_SOURCE.replace("wrap", f"wrap{index}"))
    write(tmp_path / "plain.py", "x = 1\n")
    assert main(["--format", "json", str(tmp_path)]) == 0
    serial = capsys.readouterr().out
    assert main(["--format", "json", "--jobs", "2", str(tmp_path)]) == 0
    assert capsys.readouterr().out == serial
    assert main(["--jobs", "2", str(tmp_path)]) == 0
    diffs = capsys.readouterr().out
    assert diffs.count("+++ ") == 12


def test_list_rules(capsys):
    assert main(["--list-rules"]) == 0
    codes = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert codes[-1] == "F2P099" and len(codes) == len(set(codes)) == 15


def _add_edit(sites, edit):
    """A broken rule: the first site's rewrite gets one more edit."""
    first = sites[0]
    rewrite = replace(first.forms.rewrite, edits=(*first.forms.rewrite.edits, edit))
    sites[0] = first.but(rewrite=rewrite)


def test_a_rewrite_that_would_not_parse_is_never_written(tmp_path, capsys, monkeypatch):
    from fsdp2_port.codemods.rules.constructors import ConstructorRule
    from fsdp2_port.codemods.text import Edit

    target = write(tmp_path / "train.py", FSDP1_SOURCE)
    analyze = ConstructorRule.analyze

    def broken(self, a):
        analyze(self, a)
        _add_edit(a.plan.sites, Edit(0, 0, "def broken(:\n"))

    monkeypatch.setattr(ConstructorRule, "analyze", broken)
    assert main(["--write", str(target)]) == 2
    assert "internal error: the rewrite would not parse" in capsys.readouterr().err
    assert target.read_text() == FSDP1_SOURCE


def test_colliding_rewrites_are_an_internal_error_not_a_guess(tmp_path, capsys, monkeypatch):
    from fsdp2_port.codemods.rules.constructors import ConstructorRule
    from fsdp2_port.codemods.text import Edit

    target = write(tmp_path / "train.py", FSDP1_SOURCE)
    analyze = ConstructorRule.analyze

    def colliding(self, a):
        analyze(self, a)
        first = a.plan.sites[0].forms.rewrite.edits[0]
        _add_edit(a.plan.sites, Edit(first.start, first.end, "other"))

    monkeypatch.setattr(ConstructorRule, "analyze", colliding)
    assert main([str(target)]) == 2
    assert "internal error: two rewrites touch the same code" in capsys.readouterr().err


def test_colliding_clean_ups_are_an_internal_error_of_their_file(tmp_path, capsys, monkeypatch):
    """A clean-up (the second round: dead values, values only readers read) that collides
    is reported as its file's internal error, not a crash of the run; as for any error, the
    run writes nothing (its files migrate together)."""
    from fsdp2_port.codemods.rules.reader_values import written
    from fsdp2_port.codemods.text import Edit

    first = write(tmp_path / "a.py", FSDP1_SOURCE)
    second = write(tmp_path / "b.py", FSDP1_SOURCE)
    calls = []

    def colliding(names, lines, written):  # on the first file the run tidies (a.py)
        calls.append(lines.text)
        return [Edit(0, 5, "x"), Edit(2, 6, "y")] if len(calls) == 1 else []

    monkeypatch.setattr(written, "annotation_edits", colliding)
    assert main(["--write", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{first}: error: internal error: two clean-ups touch the same code" in err
    assert first.read_text() == second.read_text() == FSDP1_SOURCE


WHOLE_PROGRAM_LIB = """\
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import ShardingStrategy

STRATEGIES = {"full": ShardingStrategy.FULL_SHARD, "zero2": ShardingStrategy.SHARD_GRAD_OP}


def shard(model, name):
    return FSDP(model, sharding_strategy=STRATEGIES[name])
"""


def test_whole_program_lets_a_public_name_only_the_run_reads_go_without_fsdp1(tmp_path, capsys):
    """A public module-level map read only by its module: kept as it is by default (code
    outside the run may import it), written by name with --whole-program."""
    for flags, kept in (([], True), (["--whole-program"], False)):
        target = write(tmp_path / "lib.py", WHOLE_PROGRAM_LIB)
        write(tmp_path / "train.py", "import lib\n\nlib.shard(None, 'full')\n")
        assert main(["--write", *flags, str(target), str(tmp_path / "train.py")]) == 0
        text = target.read_text()
        assert ("ShardingStrategy" in text) is kept, text
        assert ('"full": "FULL_SHARD"' in text) is not kept, text
        assert "FullyShardedDataParallel" not in text, text
    capsys.readouterr()
