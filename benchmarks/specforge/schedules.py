"""fsdp2_port's LR schedules against a SpecForge checkout's classes, bit for bit.

    python benchmarks/specforge/schedules.py SPECFORGE_CHECKOUT

Loads ``specforge/lr_scheduler.py`` of the checkout by path (it needs only torch; nothing is
fetched) and, for every (kind, total_steps, warmup_ratio) of a grid, steps SpecForge's
``CosineAnnealingWarmupLR`` (and ``ConstantWarmupLR`` where the checkout has it) beside
``fsdp2_port.train.lr_schedules.build_scheduler`` for ``2 * total_steps + 5`` steps, as
SpecForge's ``BF16Optimizer`` builds them (``warmup_steps = int(warmup_ratio * total_steps)``).
Then, from SpecForge's ``state_dict()`` at several steps, a fresh scheduler of ours loads it
and both continue. Prints one line per case with the number of lrs compared and the largest
difference (0.0 is bitwise); exits 1 on any difference.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import sys
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from fsdp2_port.train.lr_schedules import build_scheduler

GRID = [(1, 0.0), (2, 0.5), (20, 0.99), (7, 0.5), (10, 0.0), (10, 0.2), (30, 0.1), (100, 0.015),
        (800, 0.015), (8, 1.5), (4, 1.0)]  # fmt: skip


def load_schedules(checkout: Path) -> ModuleType:
    """The checkout's ``specforge/lr_scheduler.py`` as a module (no ``specforge`` import)."""
    path = checkout / "specforge" / "lr_scheduler.py"
    spec = importlib.util.spec_from_file_location("specforge_lr_scheduler_under_test", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"no SpecForge lr_scheduler.py at {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _theirs(module: ModuleType, kind: str) -> Callable[..., Any] | None:
    return getattr(
        module, {"cosine": "CosineAnnealingWarmupLR", "constant": "ConstantWarmupLR"}[kind], None
    )


def _build_theirs(cls: Any, total: int, warmup: int, opt: torch.optim.Optimizer) -> Any:
    return cls(opt, total_steps=total, warmup_steps=warmup)


def _build_ours(kind: str, total: int, ratio: float, opt: torch.optim.Optimizer) -> Any:
    return build_scheduler(opt, kind, total, ratio)


def _run(
    make: Callable[[torch.optim.Optimizer], Any], steps: int, base: float
) -> tuple[list[Any], Any]:
    """lrs (or the exception that ended them) of ``steps`` steps, and the last state dicts."""
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=base)
    out: list[Any] = []
    try:
        sched = make(opt)
        out.append(opt.param_groups[0]["lr"])
        for _ in range(steps):
            opt.step()
            sched.step()
            out.append(opt.param_groups[0]["lr"])
    except Exception as exc:  # the same error at the same step is the same behaviour
        out.append(type(exc).__name__)
    return out, opt


def _diff(a: list[Any], b: list[Any]) -> float:
    if len(a) != len(b) or any(isinstance(x, str) != isinstance(y, str) for x, y in zip(a, b)):
        return float("inf")
    return max((abs(x - y) for x, y in zip(a, b) if not isinstance(x, str)), default=0.0)


def _resumed(
    module: ModuleType, kind: str, total: int, ratio: float, stop: int, base: float
) -> tuple[list[float], list[float]]:
    """SpecForge run to ``stop``, then (a) it continues, (b) ours loads its state and continues."""
    cls = _theirs(module, kind)
    assert cls is not None
    w = int(ratio * total)
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=base)
    sched = cls(opt, total_steps=total, warmup_steps=w)
    for _ in range(stop):
        opt.step()
        sched.step()
    saved_opt, saved = opt.state_dict(), sched.state_dict()
    mine_opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=base)
    mine = build_scheduler(mine_opt, kind, total, ratio)
    mine_opt.load_state_dict(saved_opt)
    mine.load_state_dict(saved)
    a, b = [], []
    for _ in range(total + 3):
        a.append(opt.param_groups[0]["lr"])
        b.append(mine_opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
        mine_opt.step()
        mine.step()
    return a, b


def compare_with_checkout(
    checkout: Path,
    grid: Iterable[tuple[int, float]] = GRID,
    report: Callable[[str], None] | None = None,
) -> list[str]:
    """Every difference between the checkout's schedules and ours, as lines (none: bitwise)."""
    module = load_schedules(checkout)
    problems: list[str] = []
    base = 2e-4
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for kind in ("cosine", "constant"):
            cls = _theirs(module, kind)
            if cls is None:
                continue
            for total, ratio in grid:
                w = int(ratio * total)
                steps = 2 * total + 5
                theirs, _ = _run(functools.partial(_build_theirs, cls, total, w), steps, base)
                ours, _ = _run(functools.partial(_build_ours, kind, total, ratio), steps, base)
                d = _diff(theirs, ours)
                line = (
                    f"{kind:8} total={total:4} ratio={ratio:<6} steps={len(theirs):4} max|diff|={d}"
                )
                if isinstance(theirs[-1], str):
                    line += f" (both end in {theirs[-1]})" if theirs[-1] == ours[-1] else ""
                resumable = not any(isinstance(x, str) for x in theirs)
                for stop in sorted({0, w, w + 1, total // 2} if resumable else ()):
                    a, b = _resumed(module, kind, total, ratio, stop, base)
                    rd = _diff(a, b)
                    line += f" resume@{stop}={rd}"
                    d = max(d, rd)
                if report:
                    report(line)
                if d != 0.0:
                    problems.append(line)
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkout", type=Path, help="a SpecForge checkout (its root folder)")
    args = parser.parse_args(argv)
    print(f"torch {torch.__version__}; SpecForge at {args.checkout}")
    problems = compare_with_checkout(args.checkout, GRID, print)
    print("bitwise on every case" if not problems else f"{len(problems)} cases differ")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
