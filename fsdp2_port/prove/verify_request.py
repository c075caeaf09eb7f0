"""What a ``verify`` run is asked (``Config`` and its choices), and how a refused one is said:
importable without torch, so that ``fsdp2-port verify --help`` and its usage errors need none."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fsdp2_port.prove.judge import error_payload

DEFAULT_MODEL = "fsdp2_port.prove.tiny_transformer:tiny_transformer"
QUANTITIES = ("loss", "norm", "param")  # what is judged, each a row of ``judge.TOLERANCE``
STRATEGIES = ("full_shard", "shard_grad_op", "hybrid")
LOCAL_WORLD_SIZE = 2  # ranks spawned when neither torchrun nor the caller says


@dataclass(frozen=True)
class Config:
    model: str | Callable[[], Any] = DEFAULT_MODEL
    world_size: int | None = None  # None: torchrun's WORLD_SIZE, or LOCAL_WORLD_SIZE
    steps: int = 3
    strategy: str = "full_shard"
    dtype: str = "bf16"
    max_grad_norm: float = 0.5
    lr: float = 1e-3
    device: str = "cpu"
    batch_per_rank: int = 2
    judge_old_clip: bool = False
    timeout: float = 600.0


def under_torchrun() -> bool:
    """Whether this process is one rank of a job torchrun (or a launcher like it) started."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR"))


def error_json(message: str, code: int, details: str) -> dict[str, Any]:
    """What ``--format json`` prints for an error: ``details``, the user's traceback or usage."""
    return error_payload(message, code, ok=False, details=details)
