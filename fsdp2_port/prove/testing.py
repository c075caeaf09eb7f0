"""The equivalence check as a pytest helper, for users' own suites and CI.

from fsdp2_port.prove.testing import assert_equivalent

def test_my_model_trains_the_same_on_fsdp2():
    assert_equivalent("my_project.models:build_small", world_size=2, steps=3)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fsdp2_port.prove.verify import Config, Report, format_text, verify
from fsdp2_port.prove.verify_request import DEFAULT_MODEL


def assert_equivalent(
    factory: str | Callable[[], Any] = DEFAULT_MODEL,
    *,
    world_size: int | None = None,
    steps: int = 3,
    **options: Any,
) -> Report:
    """Run ``fsdp2-port verify`` in-process; raise AssertionError with its table if not equal.

    ``factory`` is ``"module:function"`` or a module-level callable returning a model,
    ``(model, batch_fn)`` or ``(model, batch_fn, loss_fn)``. ``world_size``: ranks to spawn
    (default 2); under torchrun, the job's ranks are used. ``options`` are the other
    fields of ``fsdp2_port.prove.verify.Config`` (``strategy``, ``dtype``, ``max_grad_norm``, ...).
    """
    report = verify(Config(model=factory, world_size=world_size, steps=steps, **options))
    if not report.ok:
        raise AssertionError(format_text(report))
    return report
