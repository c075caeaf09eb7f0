"""``fsdp2-port compare --resume-at K`` on two tiny programs of plain Python (no torch, no ranks).

Each follows the protocol (``fsdp2_port.prove.resume``): it saves its state (a weight and a
momentum) after step K when ``FSDP2_PORT_SAVE_AT`` says so, and resumes from
``FSDP2_PORT_RESUME_FROM``. NEW carries one resume bug at a time; compare must tell each
from a faithful resume, which continues OLD's curve exactly (same arithmetic, same digits).
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PROGRAM = """
import json, os, sys
from pathlib import Path

BUG = {bug!r}
w, m, start = 1.0, 0.0, 0
if os.environ.get("FSDP2_PORT_RESUME_FROM") and BUG != "starts afresh":
    saved = json.loads((Path(os.environ["FSDP2_PORT_RESUME_FROM"]) / "state.json").read_text())
    w, m = saved["w"], 0.0 if BUG == "drops the momentum" else saved["m"]
    start = int(os.environ["FSDP2_PORT_RESUME_AT"]) + 1
for step in range(start, 6):
    grad = w - 0.3
    m = 0.9 * m + grad
    w -= 0.1 * m
    print(f"step {{step}} loss {{w * w!r}} grad_norm {{abs(grad)!r}}", flush=True)
    if os.environ.get("FSDP2_PORT_SAVE_AT") == str(step) and BUG != "never saves":
        folder = Path(os.environ["FSDP2_PORT_CHECKPOINT"])
        (folder / "state.json").write_text(json.dumps({{"w": w, "m": m}}))
"""


FLAGS = ("--launcher", "none", "--dtype", "fp32", "--format", "json")


def _compare(tmp_path, bug, *options):
    old, new = tmp_path / "old.py", tmp_path / "new.py"
    old.write_text(PROGRAM.format(bug=""))
    new.write_text(PROGRAM.format(bug=bug))
    done = subprocess.run(
        [sys.executable, "-m", "fsdp2_port", "compare", str(old), str(new), *FLAGS, *options],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.returncode, json.loads(done.stdout)


def test_a_faithful_resume_continues_olds_curve_from_its_own_and_olds_checkpoint(tmp_path):
    code, result = _compare(tmp_path, "", "--resume-at", "2", "--resume-from-old")
    assert (code, result["verdict"], result["failures"]) == (0, "same", [])
    for label in ("new-resumed", "new-from-old"):
        got = result["continued"][label]
        assert [s["step"] for s in got] == [3, 4, 5]
        old = {s["step"]: s["old"] for s in result["steps"]}
        assert all(s["loss"] == old[s["step"]]["loss"] for s in got)  # the same digits
    assert set(result["runs"]) == {"old", "new", "new-resumed", "new-from-old"}


@pytest.mark.parametrize(
    "bug,code,says",
    [
        ("drops the momentum", 1, "new-resumed: step 3: loss"),
        ("starts afresh", 1, "new-resumed: logged steps 0-2, at or before 2: it started afresh"),
        ("never saves", 2, "new saved nothing into $FSDP2_PORT_CHECKPOINT after step 2"),
    ],
)
def test_a_resume_bug_is_found(tmp_path, bug, code, says):
    got, result = _compare(tmp_path, bug, "--resume-at", "2")
    assert got == code, result
    assert says in " ".join(result["failures"] + [result["error"] or ""]), result
    if code == 1:  # the uninterrupted runs themselves are the same
        assert all(f.startswith("new-resumed: ") for f in result["failures"])


def test_a_request_that_cannot_run_is_refused_in_one_line(tmp_path):
    for options, says in [
        (["--resume-from-old"], "--resume-from-old: only with --resume-at K"),
        (["--resume-at", "-1"], "--resume-at must be a step number >= 0"),
        (["--resume-at", "1", "--convert", "a.pt"], "only with --resume-from-old"),
        (["--resume-at", "1", "--resume-from-old", "--convert", "../a.pt"], "inside OLD's"),
    ]:
        code, result = _compare(tmp_path, "", *options)
        assert code == 2 and says in result["error"], (options, result)
