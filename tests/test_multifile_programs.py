"""Seven FSDP1 training programs of several modules each migrate whole and train the same.

tests/multifile/ holds them, one package per shape in which real code passes its model around: a
base-class trainer whose methods use ``self.policy`` while a subclass wraps it; a
builder whose ``(model, optimizer)`` tuple is unpacked, with DCP helpers in another module; a
compat BF16 optimizer on an inner module of the wrapped model; SpecForge before its fix (its own
rank-local-clip optimizer imported as ``specforge.optimizer`` from a package in the program's
folder, and a backend class in another module that all-reduces the squared norm it returns;
clipping disengaged, so the FSDP1 run is right); ``full_optim_state_dict`` /
``scatter_full_optim_state_dict`` checkpoint helpers; weight decay chosen by ``p.ndim`` after
wrapping; FSDP1 values built in one module and read only in another's wrapping function
(no FSDP1 name survives in any file).

Each program is migrated by one ``fsdp2-port migrate --write`` over its folder, as a user would.
No finding is left to review, no marker, and no FSDP1 name, import or FSDP1 module call survives
(the end state of a migration) — except
in ``ndim_decay``, whose meaning truly changes (FSDP1's flat 1-D views decayed nothing, FSDP2
decays every matrix): one F2P011 marker at the ``p.ndim`` line, and compare must see the
difference. Then ``fsdp2-port compare`` trains original and migration on 2 gloo ranks through
torchrun (fp32 1e-5, bf16 2e-3: its defaults) and judges every logged loss and grad norm,
leaving no log folder in TMPDIR.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
from pathlib import Path

import pytest

from fsdp2_port.codemods.assumptions import FSDP2_NAMES
from tests.processes import fsdp2_port_cli

pytestmark = pytest.mark.slow  # fsdp2-port compare: torchrun, 2 ranks

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = ROOT / "tests" / "multifile"

# FSDP1's module methods and static functions: on a migrated model only fsdp2_port's may remain.
FSDP1_CALLS = frozenset(
    {
        "no_sync",
        "clip_grad_norm_",
        "summon_full_params",
        "state_dict_type",
        "optim_state_dict",
        "optim_state_dict_to_load",
        "full_optim_state_dict",
        "scatter_full_optim_state_dict",
        "sharded_optim_state_dict",
    }
)


def _fsdp1_left(source: str) -> list[str]:
    """Every FSDP1 name and every FSDP1 module call not made through ``fsdp2_port``."""
    left = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.alias) and node.name == "FullyShardedDataParallel":
            left.append(f"import of {node.name}")
        elif isinstance(node, ast.Name) and node.id in ("FSDP", "FullyShardedDataParallel"):
            left.append(f"line {node.lineno}: {node.id}")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in FSDP1_CALLS
            and ast.unparse(node.func.value) not in ("fsdp2_port", "torch.nn.utils")
        ):
            left.append(f"line {node.lineno}: .{node.func.attr}(...)")
    return left


def _migrate(program: str, base: Path) -> tuple[Path, Path, list[dict]]:
    original, migrated = base / "fsdp1" / program, base / "fsdp2" / program
    shutil.copytree(PROGRAMS / program, original)
    shutil.copytree(PROGRAMS / program, migrated)
    done = fsdp2_port_cli("migrate", "--write", "--format", "json", str(migrated))
    assert done.returncode == 0, done.stdout + done.stderr
    again = fsdp2_port_cli("migrate", "--check", str(migrated))
    assert again.returncode == 0, "a second run changes nothing: " + again.stdout + again.stderr
    return original, migrated, [r for r in json.loads(done.stdout) if "code" in r]  # findings


#: compare's relative tolerance on every metric, per --dtype (one fp32 sum order; one bf16
#: rounding, 2^-9).
DEFAULT_RTOL = {"fp32": 1e-5, "bf16": 2e-3}


def _compare(original: Path, migrated: Path, dtype: str, args: list[str], *extra: str) -> dict:
    """``fsdp2-port compare`` of the two programs under torchrun (2 ranks), its temporary
    files in a folder of the test's own, which it must leave as it found it (torchrun's logs
    go to compare's own folder)."""
    temporary = migrated.parent.parent / "tmp"
    temporary.mkdir(exist_ok=True)
    done = fsdp2_port_cli(
        "compare",
        str(original / "train.py"),
        str(migrated / "train.py"),
        "--nproc-per-node",
        "2",
        "--dtype",
        dtype,
        "--format",
        "json",
        "--timeout",
        "240",
        "--forbid-fsdp1",
        *extra,
        "--",
        *args,
        env={**os.environ, "TMPDIR": str(temporary)},
    )
    result = json.loads(done.stdout)
    assert result["exit_code"] == done.returncode, done.stdout + done.stderr
    assert "torch.distributed.run" in result["runs"]["new"]["command"]
    assert set(result["tolerance"].values()) <= {DEFAULT_RTOL[dtype]}, result["tolerance"]
    left = [p.name for p in temporary.iterdir()]  # torch's own caches aside (torchinductor_*)
    assert [n for n in left if n.startswith(("torchelastic_", "fsdp2-port-compare-"))] == []
    return result


@pytest.mark.parametrize(
    "program,dtype,args,extra",
    [
        (
            "base_trainer",
            "fp32",
            ["--steps", "4"],
            ["--metric", r"weight_norm=weight_norm (\S+)", "--resume-at", "2"],
        ),
        (
            "builder_tuple",
            "fp32",
            ["--steps", "4", "--resume-at", "2", "--checkpoint", "{dir}/{run}"],
            [],
        ),
        ("inner_optimizer", "bf16", ["--steps", "4"], ["--resume-at", "2"]),
        ("specforge_prefix", "bf16", ["--steps", "4"], ["--resume-at", "2"]),
        (
            "optim_helpers",
            "fp32",
            ["--steps", "5", "--resume-at", "2", "--checkpoint", "{dir}/{run}.pt"],
            ["--resume-at", "2", "--resume-from-old"],
        ),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_the_migrated_program_trains_like_the_original(program, dtype, args, extra, tmp_path):
    original, migrated, findings = _migrate(program, tmp_path)
    assert [f for f in findings if f["severity"] == "review"] == [], "no finding to review"
    for module in sorted(migrated.rglob("*.py")):
        text = module.read_text()
        assert "TODO(fsdp2-port)" not in text, module
        assert _fsdp1_left(text) == [], module
        assert _fsdp1_imports(text) == [], module
    args = [a.replace("{dir}", str(tmp_path)) for a in args]
    result = _compare(original, migrated, dtype, args, *extra)
    assert result["verdict"] == "same", json.dumps(result, indent=1)
    assert len(result["steps"]) == int(args[args.index("--steps") + 1])
    if "--resume-at" in extra:  # resumed after step K from its own checkpoint (and OLD's)
        # (OLD's full checkpoint shares one step tensor among parameters: each gets its own)
        at, steps = int(extra[extra.index("--resume-at") + 1]), len(result["steps"])
        runs = ["new-from-old", "new-resumed"] if "--resume-from-old" in extra else ["new-resumed"]
        assert sorted(result["continued"]) == runs
        first = min(s["step"] for s in result["steps"])
        later = [step for step in range(first, first + steps) if step > at]
        assert all([s["step"] for s in c] == later for c in result["continued"].values())


def test_values_built_in_one_file_and_read_in_another_lose_fsdp1(tmp_path):
    """values_across: the strategy (a class attribute), the mixed precision and a
    policy whose classes a call finds are built in train.py and read only in
    sharding/wrapping.py's migrated ``wrap``. One plain run writes them without FSDP1 where
    they are built, so no file of the program imports an FSDP1 name, and it trains the same,
    also resumed from the full checkpoint rank 0 saved."""
    original, migrated, findings = _migrate("values_across", tmp_path)
    assert [f for f in findings if f["severity"] == "review"] == [], "no finding to review"
    for module in sorted(migrated.rglob("*.py")):
        assert _fsdp1_imports(module.read_text()) == [], module
    # a full checkpoint saved from rank 0 after step 2; NEW resumed from it goes on alike
    result = _compare(original, migrated, "bf16", ["--steps", "4"], "--resume-at", "2")
    assert result["verdict"] == "same", json.dumps(result, indent=1)
    assert len(result["steps"]) == 4
    assert [s["step"] for s in result["continued"]["new-resumed"]] == [3]


def _fsdp1_imports(source: str) -> list[str]:
    """The names imported from torch.distributed.fsdp that are not FSDP2's."""
    return [
        alias.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom)
        and (node.module or "").startswith("torch.distributed.fsdp")
        for alias in node.names
        if alias.name not in FSDP2_NAMES
    ]


def test_weight_decay_by_ndim_is_marked_and_trains_differently(tmp_path):
    """FSDP1's flat 1-D views decayed nothing; FSDP2 decays every matrix. A marker says so
    where the shape is read, and one where the model is handed to the helper that reads it."""
    original, migrated, findings = _migrate("ndim_decay", tmp_path)
    review = [f for f in findings if f["severity"] == "review"]
    assert [(Path(f["path"]).name, f["code"]) for f in review] == [
        ("optim.py", "F2P011"),
        ("train.py", "F2P011"),
    ]
    markers = {
        module.relative_to(migrated).as_posix(): [
            n
            for n, line in enumerate(module.read_text().splitlines(), 1)
            if "TODO(fsdp2-port)" in line
        ]
        for module in migrated.rglob("*.py")
    }
    assert {k: v for k, v in markers.items() if v} == {
        "recipe/optim.py": [review[0]["marker_line"]],
        "train.py": [review[1]["marker_line"]],
    }
    handed = (migrated / "train.py").read_text().splitlines()[review[1]["marker_line"]]
    assert "build_optimizer(model" in handed
    lines = (migrated / "recipe" / "optim.py").read_text().splitlines()
    marker = review[0]["marker_line"]
    assert "F2P011" in lines[marker - 1] and lines[marker].strip() == "if p.ndim > 1:"
    for module in sorted(migrated.rglob("*.py")):
        assert _fsdp1_left(module.read_text()) == [], module
        assert _fsdp1_imports(module.read_text()) == [], module
    result = _compare(original, migrated, "fp32", ["--steps", "3"])
    assert result["verdict"] == "different", json.dumps(result, indent=1)
    # The first step (no update yet) is the same; the decay shows from the second on.
    rel = [max(step["rel_diff"].values()) for step in result["steps"]]
    assert rel[0] <= 1e-5 and min(rel[1:]) > 1e-4, rel
