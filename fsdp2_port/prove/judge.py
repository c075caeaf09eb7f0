"""The one judge of ``verify`` and ``compare``: a relative difference, the tolerance table, the
per-step verdict, exit codes, and the JSON and HTML payloads both print. Imports no torch.

- ``value`` departs from ``baseline`` when ``|value - baseline| / |baseline|`` exceeds the
  tolerance; against a zero baseline any other value departs, and so does a NaN on either side
  (NaN against NaN is *not comparable*, never the same);
- a metric logged on one side only departs;
- exit 0: the same (equivalent); 1: different; 2: an error (bad request, failed run, nothing
  to compare); 128 + n: interrupted by signal n (``launch.Interrupted``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fsdp2_port.prove import report_html

DTYPES = ("bf16", "fp32")
# Relative tolerances, TOLERANCE[quantity][dtype]. A real change moves far more: the rank-local
# clip moves a 2-rank grad norm by 25-60%.
# fp32: a faithful migration changes only the order of fp32 sums (FSDP1 reduces flat parameters,
# FSDP2 each one; the norm adds its pieces in another order), a few ulps (1.2e-7) per operation;
# 1e-5 leaves ~100 ulps to compound over layers and steps.
# bf16, ``metric`` (compare: two runs of one job, the same ranks and batches): when a sum's order
# flips a rounding, a value moves by one bf16 step, 2^-9 ~ 2e-3; a loss or norm averages many
# values (~1e-4 on the demo), so beyond 2e-3 is not rounding noise.
# bf16, ``loss``/``norm``/``param`` (verify: N ranks against one process on the whole batch): a
# different computation, each rank's gradient rounded to 8 bits over its part of the batch and
# again in the bf16 reduction, carried by Adam into every later step (the norm sits nearest the
# rounded gradients). Measured on the bundled model, 2 ranks, 3 steps: loss 4e-5, norm 1.4e-4,
# parameters 2.3e-4; the bounds leave room for deeper models and longer runs.
TOLERANCE: dict[str, dict[str, float]] = {
    "metric": {"fp32": 1e-5, "bf16": 2e-3},  # compare: a metric NEW logs vs OLD's, per step
    "loss": {"fp32": 1e-5, "bf16": 1e-2},  # verify: an arm's loss vs the reference's, per step
    "norm": {"fp32": 1e-5, "bf16": 2e-2},  # verify: the pre-clip grad norm, per step
    "param": {"fp32": 1e-5, "bf16": 1e-2},  # verify: ||arm - ref|| / ||ref|| after the last step
}
# verdict -> exit code; every other verdict ("error") exits 2
EXIT_CODES = {"same": 0, "equivalent": 0, "elsewhere": 0, "different": 1, "not-equivalent": 1}


def relative_difference(baseline: float, value: float) -> float:
    """``|value - baseline| / |baseline|``: 0 when equal, inf against a zero or a NaN."""
    if baseline == value:
        return 0.0
    if baseline == 0 or math.isnan(baseline) or math.isnan(value):
        return math.inf
    return abs(value - baseline) / abs(baseline)


def check_dtype(dtype: object, error: type[Exception]) -> None:
    if dtype not in DTYPES:
        raise error(f"--dtype must be one of {list(DTYPES)}, got {dtype!r}")


def check_timeout(timeout: object, error: type[Exception]) -> None:
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, (int, float))
        or not 0 < timeout < math.inf
    ):
        raise error(f"--timeout must be a finite number of seconds > 0, got {timeout!r}")


# -- the per-step verdict ---------------------------------------------------------------------


@dataclass(frozen=True)
class Departure:
    """Where a run leaves its baseline at ``step`` in ``metric``; a value is None on the side
    that did not log it."""

    step: int
    metric: str
    baseline: float | None
    value: float | None
    rtol: float

    @property
    def difference(self) -> float:
        if self.baseline is None or self.value is None:
            return math.inf
        return relative_difference(self.baseline, self.value)

    @property
    def not_comparable(self) -> bool:
        """NaN on both sides: two runs that diverged prove nothing."""
        return all(v is not None and math.isnan(v) for v in (self.baseline, self.value))


def departures_at(
    step: int,
    baseline: Mapping[str, float],
    value: Mapping[str, float],
    tolerance: Mapping[str, float],
) -> list[Departure]:
    """The metrics of ``tolerance``, in its order, in which ``value`` departs from
    ``baseline`` at ``step`` (see the module's rules); a metric neither side logged is none."""
    found = []
    for metric, rtol in tolerance.items():
        d = Departure(step, metric, baseline.get(metric), value.get(metric), rtol)
        logged = d.baseline is not None or d.value is not None
        if logged and not d.difference <= rtol:
            found.append(d)
    return found


def exit_code(verdict: str) -> int:
    return EXIT_CODES.get(verdict, 2)


# -- payloads ---------------------------------------------------------------------------------


def relative_differences(
    series: Mapping[str, Sequence[float | None]], baseline: str
) -> dict[str, list[float | None]]:
    """Each series but ``baseline``'s, step by step relative to it (None where either side
    has no value): what the HTML report draws against the tolerance."""
    return {
        name: [
            None if a is None or b is None else relative_difference(a, b)
            for a, b in zip(series[baseline], values)
        ]
        for name, values in series.items()
        if name != baseline
    }


def outcome(verdict: str) -> str:
    """The HTML report's colour: ``pass``, ``fail`` or ``error``."""
    return {0: "pass", 1: "fail"}.get(exit_code(verdict), "error")


def json_text(payload: Any) -> str:
    """Strict JSON (no NaN/Infinity tokens): a non-finite float becomes "nan"/"inf"/"-inf"."""

    def clean(x: Any) -> Any:
        if isinstance(x, float) and not math.isfinite(x):
            return str(x)
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [clean(v) for v in x]
        return x

    return json.dumps(clean(payload), indent=2, allow_nan=False)


def error_payload(message: str, code: int, **fields: Any) -> dict[str, Any]:
    """The JSON object of an error, for every command: verdict, exit code, message, ``fields``."""
    return {"verdict": "error", "exit_code": code, "error": message, **fields}


def error_page(command: str, message: str, details: str) -> str:
    """The HTML page of an error (``--html``), for every command."""
    return report_html.render(
        title=f"fsdp2-port {command}",
        verdict=f"ERROR: {message}",
        outcome="error",
        details=details.splitlines(),
    )
