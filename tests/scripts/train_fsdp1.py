"""FSDP1 + fsdp2_port.compat.BF16Optimizer: the "before" of a migration (see _tiny.py)."""

import argparse

import _tiny
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import ModuleWrapPolicy

from fsdp2_port.compat import BF16Optimizer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    model = FSDP(
        _tiny.model(),
        auto_wrap_policy=ModuleWrapPolicy({_tiny.Block}),
        device_id=torch.device("cpu"),
        use_orig_params=True,
    )
    optimizer = BF16Optimizer(
        model, lr=_tiny.LR, max_grad_norm=_tiny.MAX_GRAD_NORM, total_steps=100, warmup_ratio=0.0
    )
    _tiny.train(model, optimizer, args.steps)


if __name__ == "__main__":
    _tiny.launch(main)
