"""FSDP1 keyword arguments another module spreads (DPO-and-GRPO-implementation's shape)."""

import functools

import torch
from torch.distributed.fsdp import CPUOffload, MixedPrecision
from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

from model import Block

fsdp_kwargs = {
    "auto_wrap_policy": functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={Block}),
    "mixed_precision": MixedPrecision(param_dtype=torch.bfloat16, buffer_dtype=torch.bfloat16),
    "use_orig_params": True,
}

eval_kwargs = dict(cpu_offload=CPUOffload(offload_params=True))
