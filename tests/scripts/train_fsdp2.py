"""train_fsdp1.py migrated by hand: fully_shard + fsdp2_port.BF16Optimizer (see _tiny.py)."""

import argparse

import _tiny
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from fsdp2_port import BF16Optimizer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    model = _tiny.model()
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = BF16Optimizer(
        model, lr=_tiny.LR, max_grad_norm=_tiny.MAX_GRAD_NORM, total_steps=100, warmup_ratio=0.0
    )
    _tiny.train(model, optimizer, args.steps)


if __name__ == "__main__":
    _tiny.launch(main)
