"""Build the sharded model and its optimizer."""

import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import BackwardPrefetch, ShardingStrategy
from torch.distributed.fsdp.wrap import ModuleWrapPolicy

from training.model import Block, Net


def build(lr):
    torch.manual_seed(0)
    model = FSDP(
        Net(),
        auto_wrap_policy=ModuleWrapPolicy({Block}),
        sharding_strategy=ShardingStrategy.FULL_SHARD,
        backward_prefetch=BackwardPrefetch.BACKWARD_PRE,
        device_id=torch.device("cpu"),
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    return model, optimizer
