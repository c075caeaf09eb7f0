"""``convert-checkpoint`` and ``compare`` on files from someone else, and outputs that would
land on inputs.

A hostile checkpoint's pickle names a function that makes a directory in ``outside`` (what
``os.system("touch PWNED")`` would do, without a shell): after the command, ``outside`` must
be as it was, whatever the format the payload hides in, unless ``--trust-pickle`` says to
run it. Outputs named onto inputs are usage errors that leave every input as it was.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp

from fsdp2_port import cli
from fsdp2_port.fsdp1.convert import load_offline

ROOT = Path(__file__).resolve().parents[1]


class Payload:
    """Unpickled, it makes the directory ``target`` (also when it is there, so that every load
    of it succeeds): code a checkpoint should never run."""

    def __init__(self, target: Path) -> None:
        self.target = str(target)

    def __reduce__(self):
        return (os.makedirs, (self.target, 0o777, True))


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() if p.is_file() else b"<dir>"
        for p in sorted(root.rglob("*"))
    }


def _state(payload: Payload | None = None) -> dict:
    state = {"model": {"w": torch.arange(4.0)}, "optim": {"state": {}, "param_groups": []}}
    if payload is not None:
        state["step"] = payload
    return state


def _hostile(where: Path, form: str, payload: Payload) -> str:
    """A checkpoint in ``form`` whose pickle runs ``payload``; the SRC to convert."""
    if form == "file":
        torch.save(_state(payload), where / "ckpt.pt")
        return str(where / "ckpt.pt")
    if form == "legacy file":
        torch.save(_state(payload), where / "ckpt.pt", _use_new_zipfile_serialization=False)
        return str(where / "ckpt.pt")
    if form == "rank files":
        for rank in range(2):
            torch.save(_state(payload if rank else None), where / f"ckpt_{rank}.pt")
        return str(where / "ckpt_{rank}.pt")
    dcp.save(_state(payload if form == "dcp item" else None), checkpoint_id=where / "dcp")
    if form == "dcp metadata":
        (where / "dcp" / ".metadata").write_bytes(pickle.dumps(payload))
    return str(where / "dcp")


FORMS = ["file", "legacy file", "rank files", "dcp item", "dcp metadata"]


@pytest.mark.parametrize("form", FORMS)
def test_a_checkpoint_that_runs_code_is_refused(tmp_path, capsys, form):
    outside = tmp_path / "outside"
    outside.mkdir()
    src = _hostile(tmp_path, form, Payload(outside / "PWNED"))
    before = snapshot(outside)
    code = cli.main(["convert-checkpoint", src, str(tmp_path / "out.pt"), "--format", "auto"])
    err = capsys.readouterr().err
    assert snapshot(outside) == before, "the checkpoint ran code"
    assert code == 2 and "--trust-pickle" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out.pt").exists()


def test_trust_pickle_runs_it_and_says_so(tmp_path, capsys):
    outside = tmp_path / "outside"
    outside.mkdir()
    src = _hostile(tmp_path, "file", Payload(outside / "PWNED"))
    code = cli.main(["convert-checkpoint", src, str(tmp_path / "out.pt"), "--trust-pickle"])
    err = capsys.readouterr().err
    assert code == 0 and (outside / "PWNED").is_dir(), "--trust-pickle loads as pickle does"
    assert "any code it names runs" in err


def test_a_saved_command_line_loads_without_trusting_the_pickle(tmp_path):
    """SpecForge saves its ``argparse.Namespace`` beside the state: attributes only, built
    without running code, so its checkpoint converts without ``--trust-pickle``; a hostile
    value inside it still runs nothing."""
    outside = tmp_path / "outside"
    outside.mkdir()
    args = argparse.Namespace(lr=1e-4, draft="llama", hook=Payload(outside / "PWNED"))
    torch.save({"fp32_params": [torch.arange(3.0)], "args": args}, tmp_path / "state.pt")
    loaded = load_offline(tmp_path / "state.pt")
    assert isinstance(loaded["args"], argparse.Namespace)
    assert (loaded["args"].lr, loaded["args"].draft) == (1e-4, "llama")
    assert not (outside / "PWNED").exists()


def test_what_conversion_never_reads_may_stand_in_for_a_class_it_does_not_build(tmp_path):
    """A tensor's attributes (an fp32 FSDP1 flat parameter pickles the modules it came from)
    are not read: a class named only there loads as an inert stand-in, its code not run."""
    outside = tmp_path / "outside"
    outside.mkdir()
    weight = torch.nn.Parameter(torch.arange(3.0))
    weight.origin = Payload(outside / "PWNED")  # type: ignore[attr-defined]
    torch.save({"fp32_params": [weight]}, tmp_path / "masters.pt")
    loaded = load_offline(tmp_path / "masters.pt")
    assert torch.equal(loaded["fp32_params"][0], torch.arange(3.0))
    assert not (outside / "PWNED").exists()


@pytest.mark.parametrize("how", ["same path", "another spelling", "a hard link", "a rank file"])
def test_converting_onto_its_own_source_is_refused(tmp_path, capsys, how, monkeypatch):
    torch.save(_state(), tmp_path / "ckpt_0.pt")
    data = (tmp_path / "ckpt_0.pt").read_bytes()
    monkeypatch.chdir(tmp_path)
    src, dst = {
        "same path": ("ckpt_0.pt", "ckpt_0.pt"),
        "another spelling": (str(tmp_path / "ckpt_0.pt"), "./ckpt_0.pt"),
        "a hard link": ("ckpt_0.pt", "link.pt"),
        "a rank file": ("ckpt_{rank}.pt", "ckpt_0.pt"),
    }[how]
    if how == "a hard link":
        os.link("ckpt_0.pt", "link.pt")
    code = cli.main(["convert-checkpoint", src, dst])
    err = capsys.readouterr().err
    assert code == 2 and "is the checkpoint being read" in err, err
    assert (tmp_path / "ckpt_0.pt").read_bytes() == data


def test_converting_into_the_dcp_checkpoint_read_is_refused(tmp_path, capsys):
    dcp.save(_state(), checkpoint_id=tmp_path / "dcp")
    before = snapshot(tmp_path / "dcp")
    assert cli.main(["convert-checkpoint", str(tmp_path / "dcp"), str(tmp_path / "dcp/x")]) == 2
    assert "inside the checkpoint being read" in capsys.readouterr().err
    assert snapshot(tmp_path / "dcp") == before


@pytest.mark.parametrize("dst", ["a directory", "a missing directory"])
def test_a_destination_that_cannot_be_written_is_one_line(tmp_path, capsys, dst):
    torch.save(_state(), tmp_path / "ckpt.pt")
    (tmp_path / "a directory").mkdir()
    target = tmp_path / dst / ("" if dst == "a directory" else "out.pt")
    assert cli.main(["convert-checkpoint", str(tmp_path / "ckpt.pt"), str(target)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_a_link_planted_where_the_output_is_staged_is_not_followed(tmp_path, capsys):
    """The destination's temporary once had a fixed name (``DST.tmp``): a link planted there
    made the conversion write through it."""
    torch.save(_state(), tmp_path / "ckpt.pt")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (tmp_path / "out.pt.tmp").symlink_to(victim)
    assert (
        cli.main(["convert-checkpoint", str(tmp_path / "ckpt.pt"), str(tmp_path / "out.pt")]) == 0
    )
    assert victim.read_text() == "precious\n"
    assert torch.equal(torch.load(tmp_path / "out.pt")["model"]["w"], torch.arange(4.0))


# -- compare ---------------------------------------------------------------------------------

SCRIPT = "print('step 0 loss 1.0')\n"


@pytest.mark.parametrize("onto", ["NEW", "OLD through a link"])
def test_compare_never_writes_its_report_over_a_script(tmp_path, capsys, onto):
    old, new = tmp_path / "old.py", tmp_path / "new.py"
    old.write_text(SCRIPT)
    new.write_text(SCRIPT)
    (tmp_path / "link.html").symlink_to(old)
    html = new if onto == "NEW" else tmp_path / "link.html"
    code = cli.main(["compare", str(old), str(new), "--launcher", "none", "--html", str(html)])
    err = capsys.readouterr().err
    assert code == 2 and "--html" in err, err
    assert old.read_text() == SCRIPT and new.read_text() == SCRIPT


def test_standard_output_onto_a_compared_script_is_refused(tmp_path):
    """``>> new.py``: the shell opens the file before the command starts (``>`` would even
    empty it); compare must not write its report into a script it runs."""
    script = tmp_path / "new.py"
    script.write_text(SCRIPT)
    with script.open("a") as out:
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "fsdp2_port",
                "compare",
                str(script),
                str(script),
                "--launcher",
                "none",
                "--format",
                "json",
            ],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    assert run.returncode == 2 and "standard output" in run.stderr, run.stderr
    assert script.read_text() == SCRIPT


# A script that prints MIB MiB of lines nobody reads, one metric line, then a line of 8 MiB
# with no end.
LOUD = """\
import sys
block = ("x" * 1023 + "\\n") * 1024
for _ in range(int(sys.argv[1])):
    sys.stdout.write(block)
print("step 0 loss 1.0 grad_norm 2.0")
sys.stdout.write("y" * (8 << 20))
"""


# fsdp2-port's CLI, saying at its end the most memory it held (VmHWM: the peak resident size
# of this process image, counted from its exec).
MEASURED_CLI = """\
import sys
from fsdp2_port.cli import main
code = main(sys.argv[1:])
sys.stderr.write(next(line for line in open("/proc/self/status") if line.startswith("VmHWM")))
sys.exit(code)
"""


@pytest.mark.slow
def test_compare_reads_any_amount_of_output_in_bounded_memory(tmp_path):
    """Two runs of 64 MiB each: compare's peak memory stays under 48 MiB (about 20 MiB for the
    interpreter and its imports; keeping the outputs took 250 MiB)."""
    script = tmp_path / "loud.py"
    script.write_text(LOUD)
    compare = ["compare", str(script), str(script), "--launcher", "none", "--format", "json"]
    run = subprocess.run(
        [sys.executable, "-c", MEASURED_CLI, *compare, "--", "64"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    report = json.loads(run.stdout)
    assert run.returncode == 0 and report["verdict"] == "same", report["error"]
    assert report["steps"][0]["old"] == {"loss": 1.0, "grad_norm": 2.0}
    assert report["runs"]["old"]["stdout_tail"].splitlines()[-1].startswith("y" * 1000)
    peak_mib = int(run.stderr.strip().splitlines()[-1].split()[1]) / 1024  # "VmHWM: N kB"
    assert peak_mib < 48, f"compare peaked at {peak_mib:.0f} MiB"


def test_an_html_report_that_cannot_be_written_is_refused_before_any_run(tmp_path, capsys):
    script = tmp_path / "s.py"
    script.write_text(SCRIPT)
    args = ["compare", str(script), str(script), "--launcher", "none", "--html", str(tmp_path)]
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        f"fsdp2-port compare: error: --html {tmp_path} is a directory"
    ]
