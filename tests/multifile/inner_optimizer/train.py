"""Train a bf16 draft model on a frozen target's hidden states (SpecForge's shape).

    torchrun --nproc-per-node 2 train.py --steps 4

The wrapper holding draft and target is what FSDP shards; the BF16 master optimizer is built on
the draft alone, an inner module of the wrapped model.
"""

import argparse

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import ShardingStrategy
from torch.distributed.fsdp.wrap import ModuleWrapPolicy

from fsdp2_port.compat import BF16Optimizer
from fsdp2_port.prove.launch import exit_now

from eagle.modeling import Block, DraftWithTarget, build_models
from eagle.trainer import train


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--max-grad-norm", type=float, default=0.5)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    draft, target = build_models(torch.bfloat16)
    wrapper = DraftWithTarget(draft, target)
    model = FSDP(
        wrapper,
        auto_wrap_policy=ModuleWrapPolicy({Block}),
        sharding_strategy=ShardingStrategy.SHARD_GRAD_OP,
        device_id=torch.device("cpu"),
        use_orig_params=True,
    )
    optimizer = BF16Optimizer(
        draft,
        lr=args.lr,
        max_grad_norm=args.max_grad_norm,
        total_steps=100,
        warmup_ratio=0.02,
    )
    train(model, optimizer, args.steps)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    exit_now()
