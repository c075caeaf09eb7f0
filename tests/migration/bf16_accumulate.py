"""bf16 compute with fp32 reduction, SHARD_GRAD_OP, gradient accumulation under ``no_sync``,
and the compat BF16 master optimizer (which clips by the true global norm).

    torchrun --nproc-per-node 2 bf16_accumulate.py --steps 4
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import MixedPrecision, ShardingStrategy
from torch.distributed.fsdp.wrap import ModuleWrapPolicy

from fsdp2_port.prove.launch import exit_now

from common import Block, Net, batch, report
from fsdp2_port.compat import BF16Optimizer


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--accum", type=int, default=2)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = FSDP(
        Net(),
        auto_wrap_policy=ModuleWrapPolicy({Block}),
        mixed_precision=MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32),
        sharding_strategy=ShardingStrategy.SHARD_GRAD_OP,
        device_id=torch.device("cpu"),
        use_orig_params=True,
    )
    optimizer = BF16Optimizer(model, lr=1e-2, max_grad_norm=0.5, total_steps=100, warmup_ratio=0.0)
    for step in range(args.steps):
        total = torch.zeros(())
        for micro in range(args.accum):
            tokens, targets = batch(step * args.accum + micro, rank, world)
            logits = model(tokens).float()
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten()) / args.accum
            if micro < args.accum - 1:
                with model.no_sync():
                    loss.backward()
            else:
                loss.backward()
            total += loss.detach()
        norm = optimizer.step()
        report(rank, step, total, norm)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    exit_now()
