"""The policy trainer: wraps the policy network with FSDP and builds its optimizer."""

import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import ShardingStrategy
from torch.distributed.fsdp.wrap import ModuleWrapPolicy

from model import Block, PolicyNet
from trainers.base import BaseTrainer


class PolicyTrainer(BaseTrainer):
    def __init__(self, args):
        super().__init__(args)
        torch.manual_seed(0)
        self.policy = FSDP(
            PolicyNet(),
            auto_wrap_policy=ModuleWrapPolicy({Block}),
            sharding_strategy=ShardingStrategy.FULL_SHARD,
            device_id=torch.device("cpu"),
            use_orig_params=True,
        )
        self.optimizer = torch.optim.AdamW(self.policy.parameters(), lr=args.lr)
