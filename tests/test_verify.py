"""`fsdp2-port verify` and fsdp2_port.prove.testing: verdicts, exit codes, refusals."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from fsdp2_port.cli import main
from fsdp2_port.prove.testing import assert_equivalent
from fsdp2_port.prove.verify import Config, VerifyError, verify

ROOT = Path(__file__).resolve().parents[1]


def _cli(*args, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "fsdp2_port", "verify", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _in_process(capsys, *args):
    """``fsdp2-port verify ARGS`` in this process (for requests refused before any rank)."""
    code = main(["verify", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.slow
def test_default_model_bf16_two_ranks_is_equivalent_text():
    run = _cli("--world-size", "2", "--dtype", "bf16", "--steps", "3")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "EQUIVALENT: FSDP1 + compat and FSDP2 + fsdp2_port match the reference" in run.stdout
    assert "tolerances (bf16)" in run.stdout
    table = [line for line in run.stdout.splitlines() if line.strip()[:1].isdigit()]
    assert len(table) == 3


@pytest.mark.slow
def test_default_model_fp32_four_ranks_json():
    run = _cli("--world-size", "4", "--dtype", "fp32", "--steps", "2", "--format", "json")
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads(run.stdout)
    assert report["ok"] and report["failures"] == []
    ref = report["norms"]["reference"]
    for arm in ("fsdp1", "fsdp2"):
        assert all(abs(a - b) <= 1e-5 * b for a, b in zip(report["norms"][arm], ref))
        assert report["param_diff"][arm] <= report["tolerance"]["param"]
    # the old clip's norm is a shard's: well below the global one on every step
    assert all(o < 0.9 * r for o, r in zip(report["norms"]["old_clip"], ref))


@pytest.mark.parametrize(
    "strategy,world,dtype", [("hybrid", 4, "fp32"), ("shard_grad_op", 2, "bf16")]
)
@pytest.mark.slow
def test_other_strategies_are_equivalent(strategy, world, dtype):
    report = assert_equivalent(world_size=world, steps=2, strategy=strategy, dtype=dtype)
    assert report.ok and len(report.losses["fsdp2"]) == 2


@pytest.mark.slow
def test_the_harness_can_say_no():
    run = _cli("--world-size", "2", "--dtype", "fp32", "--steps", "2", "--judge-old-clip")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "NOT EQUIVALENT" in run.stdout and "old_clip: step 0 grad norm" in run.stdout
    assert "fsdp1:" not in run.stdout.split("NOT EQUIVALENT")[1]  # the fixed arms still pass
    with pytest.raises(AssertionError, match="NOT EQUIVALENT"):
        assert_equivalent(world_size=2, steps=1, dtype="fp32", judge_old_clip=True)


@pytest.mark.slow
def test_a_users_factory_by_module_path():
    report = assert_equivalent("tests.verify_factories:stack", world_size=2, steps=2, dtype="fp32")
    assert report.losses["reference"][0] > 0


@pytest.mark.slow
def test_a_token_lm_needs_no_batch_function(tmp_path):
    """First module an nn.Embedding: token batches; bf16 here, fp32 in the torchrun test."""
    html = tmp_path / "verify.html"
    run = _cli(
        "--model",
        "tests.verify_factories:token_lm",
        "--steps",
        "2",
        "--format",
        "json",
        "--html",
        html,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads(run.stdout)
    assert report["verdict"] == "equivalent" and report["config"]["dtype"] == "bf16"
    # cross-entropy over 50 tokens from a fresh model: about ln(50), not a regression loss
    assert abs(report["losses"]["reference"][0] - math.log(50)) < 0.5
    page = html.read_text()
    assert "EQUIVALENT" in page and page.count("<polyline") >= 8


@pytest.mark.slow
def test_torchrun_started_verify_uses_the_jobs_ranks():
    """The same request, spawned and under torchrun: the same verdict and figures."""
    args = ["--model", "tests.verify_factories:token_lm", "--dtype", "fp32", "--steps", "2"]
    spawned = verify(Config(model=args[1], dtype="fp32", steps=2))
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            "-m",
            "fsdp2_port",
            "verify",
            *args,
            "--format",
            "json",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads(run.stdout)  # rank 0 alone prints: one object
    assert report["config"]["ranks"] == "torchrun" and spawned.config["ranks"] == "spawned"
    assert report["verdict"] == spawned.verdict == "equivalent"
    for arm in ("reference", "fsdp1", "fsdp2", "old_clip"):
        assert report["losses"][arm] == pytest.approx(spawned.losses[arm], rel=1e-5)
        assert report["norms"][arm] == pytest.approx(spawned.norms[arm], rel=1e-5)


@pytest.mark.parametrize(
    "model,message",
    [
        ("tests.no_such_module:f", "cannot import 'tests.no_such_module': ModuleNotFoundError"),
        ("tests.verify_factories:missing", "has no callable 'missing'"),
        ("tests.verify_factories:not_a_model", "not_a_model() returned int: the factory must"),
        ("tests.verify_factories:frozen", "frozen() returned Linear with no trainable parameter"),
        ("no_colon", "MODULE:FACTORY"),
    ],
)
def test_bad_factories_say_what_failed_in_the_last_line(model, message, capsys):
    code, _, err = _in_process(capsys, "--model", model)
    assert code == 2
    last = err.strip().splitlines()[-1]
    assert last.startswith("fsdp2-port verify: ") and message in last, err
    assert "Traceback" not in err  # nothing of the user's raised


@pytest.mark.parametrize(
    "model,frame,last",
    [
        (
            "tests.verify_factories:raises",
            "in _load_weights",
            "calling tests.verify_factories:raises(): "
            "FileNotFoundError: no weights at /nonexistent/weights.pt",
        ),
        (
            "tests.verify_broken:f",
            'verify_broken.py", line 3, in <module>',
            "cannot import 'tests.verify_broken': RuntimeError: config.yaml not found",
        ),
    ],
)
def test_a_factory_that_raises_shows_the_users_frames(model, frame, last, capsys):
    code, _, err = _in_process(capsys, "--model", model)
    assert code == 2
    assert err.strip().splitlines()[-1] == f"fsdp2-port verify: {last}", err
    assert "Traceback (most recent call last):" in err and frame in err
    assert "fsdp2_port" not in err and "importlib" not in err  # not our frames
    code, out, _ = _in_process(capsys, "--model", model, "--format", "json")
    report = json.loads(out)
    assert code == 2 and report["verdict"] == "error" and report["error"] == last
    assert frame in report["details"]


def test_json_for_a_usage_error(capsys):
    code, out, _ = _in_process(capsys, "--steps", "many", "--format", "json")
    assert code == 2 and json.loads(out)["verdict"] == "error"


def test_bad_requests_are_refused_before_any_rank_starts():
    with pytest.raises(VerifyError, match="hybrid needs an even"):
        verify(Config(strategy="hybrid", world_size=2))
    with pytest.raises(VerifyError, match="world-size"):
        verify(Config(world_size=1))


def test_torch_older_than_2_9_is_refused_on_the_cpu(monkeypatch):
    """FSDP2 on gloo scales grads by the world size before 2.9: verify must not run there."""
    from packaging.version import Version

    from fsdp2_port import versions

    monkeypatch.setattr(versions, "installed_torch", lambda: Version("2.8.0"))
    with pytest.raises(VerifyError, match=r"torch 2\.8\.0 scales FSDP2 gradients .* >= 2\.9"):
        verify(Config())
