"""The one judge of `verify` and `compare`: its rules, its table, its exit codes, its JSON."""

import json
import math

from fsdp2_port.prove.judge import (
    DTYPES,
    TOLERANCE,
    departures_at,
    error_payload,
    exit_code,
    json_text,
    outcome,
    relative_differences,
)

NAN = math.nan


def test_every_quantity_has_a_tolerance_for_every_dtype():
    assert all(set(row) == set(DTYPES) for row in TOLERANCE.values())
    assert all(row["fp32"] < row["bf16"] for row in TOLERANCE.values())


def test_departures_at_one_step():
    tol = {"loss": 1e-3, "norm": 1e-3, "lr": 1e-3}
    found = departures_at(4, {"loss": 2.0, "norm": NAN}, {"loss": 2.5, "norm": NAN}, tol)
    assert [(d.step, d.metric, d.not_comparable) for d in found] == [
        (4, "loss", False),
        (4, "norm", True),  # NaN against NaN departs, never "same"; lr: logged by neither
    ]
    assert found[0].difference == 0.25
    alone = departures_at(0, {"loss": 1.0}, {}, tol)
    assert [(d.baseline, d.value, d.difference) for d in alone] == [(1.0, None, math.inf)]
    assert departures_at(0, {"loss": 0.0}, {"loss": 1e-12}, tol)[0].difference == math.inf
    assert departures_at(0, {"loss": 1.0}, {"loss": 1.0 + 1e-4}, tol) == []


def test_exit_codes_and_outcomes():
    for verdict, code, colour in [
        ("same", 0, "pass"),
        ("equivalent", 0, "pass"),
        ("elsewhere", 0, "pass"),
        ("different", 1, "fail"),
        ("not-equivalent", 1, "fail"),
        ("error", 2, "error"),
    ]:
        assert (exit_code(verdict), outcome(verdict)) == (code, colour)


def test_payloads():
    text = json_text({"x": [NAN, math.inf, -math.inf, 1.5], **error_payload("boom", 2)})
    assert json.loads(text) == {
        "x": ["nan", "inf", "-inf", 1.5],
        "verdict": "error",
        "exit_code": 2,
        "error": "boom",
    }
    series = {"old": [1.0, None, 2.0], "new": [1.0, 3.0, 3.0]}
    assert relative_differences(series, "old") == {"new": [0.0, None, 0.5]}
