"""`fsdp2-port verify` and fsdp2_port.testing: its verdicts, its exit codes, and its refusals."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fsdp2_port.testing import assert_equivalent
from fsdp2_port.verify import Config, VerifyError, verify

ROOT = Path(__file__).resolve().parents[1]


def _cli(*args, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "fsdp2_port", "verify", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_default_model_bf16_two_ranks_is_equivalent_text():
    run = _cli("--world-size", "2", "--dtype", "bf16", "--steps", "3")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "EQUIVALENT: FSDP1 + compat and FSDP2 + fsdp2_port match the reference" in run.stdout
    assert "tolerances (bf16)" in run.stdout
    table = [line for line in run.stdout.splitlines() if line.strip()[:1].isdigit()]
    assert len(table) == 3


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
def test_other_strategies_are_equivalent(strategy, world, dtype):
    report = assert_equivalent(world_size=world, steps=2, strategy=strategy, dtype=dtype)
    assert report.ok and len(report.losses["fsdp2"]) == 2


def test_the_harness_can_say_no():
    run = _cli("--world-size", "2", "--dtype", "fp32", "--steps", "2", "--judge-old-clip")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "NOT EQUIVALENT" in run.stdout and "old_clip: step 0 grad norm" in run.stdout
    assert "fsdp1:" not in run.stdout.split("NOT EQUIVALENT")[1]  # the fixed arms still pass
    with pytest.raises(AssertionError, match="NOT EQUIVALENT"):
        assert_equivalent(world_size=2, steps=1, dtype="fp32", judge_old_clip=True)


def test_a_users_factory_by_module_path():
    report = assert_equivalent("tests.verify_factories:stack", world_size=2, steps=2, dtype="fp32")
    assert report.losses["reference"][0] > 0


@pytest.mark.parametrize(
    "model,message",
    [
        ("tests.no_such_module:f", "cannot import 'tests.no_such_module'"),
        ("tests.verify_factories:missing", "has no callable 'missing'"),
        ("tests.verify_factories:not_a_model", "must return a module"),
        ("no_colon", "MODULE:FACTORY"),
    ],
)
def test_bad_factories_are_one_line_errors(model, message):
    run = _cli("--model", model, timeout=60)
    assert run.returncode == 2
    errors = [line for line in run.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and message in errors[0], run.stderr
    assert "Traceback" not in run.stderr


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
