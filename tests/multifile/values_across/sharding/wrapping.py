"""The one place that wraps a model: every FSDP1 argument comes from the caller."""

import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def wrap(model, strategy, precision, policy):
    return FSDP(
        model,
        sharding_strategy=strategy,
        mixed_precision=precision,
        auto_wrap_policy=policy,
        device_id=torch.device("cpu"),
    )
