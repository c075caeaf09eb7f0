"""FSDP1 shim for the transition: SpecForge's BF16 optimizer and FSDP1's clip, fixed."""

from fsdp2_port.versions import require_torch

require_torch()

from fsdp2_port.compat.bf16_optimizer import BF16Optimizer  # noqa: E402  (after the torch check)
from fsdp2_port.compat.clip import clip_grad_norm_  # noqa: E402
from fsdp2_port.compat.transition import fsdp2_state_dict  # noqa: E402

__all__ = ["BF16Optimizer", "clip_grad_norm_", "fsdp2_state_dict"]
