"""Train with weight decay on the weight matrices, the groups built from the sharded model.

    torchrun --nproc-per-node 2 train.py --steps 4
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F

from fsdp2_port.prove.launch import exit_now

from recipe.distributed import shard
from recipe.model import Net, batch
from recipe.optim import build_optimizer


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--weight-decay", type=float, default=0.5)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = shard(Net())
    optimizer = build_optimizer(model, args.lr, args.weight_decay)
    for step in range(args.steps):
        tokens, targets = batch(step, rank, world_size)
        loss = F.cross_entropy(model(tokens).flatten(0, 1), targets.flatten())
        loss.backward()
        grad_norm = model.clip_grad_norm_(1.0)
        optimizer.step()
        optimizer.zero_grad()
        loss = loss.detach()
        dist.all_reduce(loss, op=dist.ReduceOp.AVG)
        if rank == 0:
            print(f"step {step} loss {loss.item():.8f} grad_norm {grad_norm.item():.8f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    exit_now()
