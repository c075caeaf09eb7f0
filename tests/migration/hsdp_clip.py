"""HSDP on a 2x2 mesh (HYBRID_SHARD) with FSDP1's own ``clip_grad_norm_``.

    torchrun --nproc-per-node 4 hsdp_clip.py --steps 4
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import ShardingStrategy
from torch.distributed.fsdp.wrap import ModuleWrapPolicy

from fsdp2_port.prove.launch import exit_now

from common import Block, Net, batch, report


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--max-norm", type=float, default=0.5)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (2, world // 2), mesh_dim_names=("replicate", "shard"))
    torch.manual_seed(0)
    model = FSDP(
        Net(),
        device_mesh=mesh,
        sharding_strategy=ShardingStrategy.HYBRID_SHARD,
        auto_wrap_policy=ModuleWrapPolicy({Block}),
        device_id=torch.device("cpu"),
        use_orig_params=True,
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for step in range(args.steps):
        tokens, targets = batch(step, rank, world)
        loss = F.cross_entropy(model(tokens).flatten(0, 1), targets.flatten())
        loss.backward()
        norm = model.clip_grad_norm_(args.max_norm)
        optimizer.step()
        optimizer.zero_grad()
        report(rank, step, loss, norm)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    exit_now()
