"""FSDP1 shim for the transition: SpecForge's BF16 optimizer and FSDP1's clip, fixed."""

from compat.bf16_optimizer import BF16Optimizer
from compat.clip import clip_grad_norm_
from compat.transition import fsdp2_state_dict

__all__ = ["BF16Optimizer", "clip_grad_norm_", "fsdp2_state_dict"]
