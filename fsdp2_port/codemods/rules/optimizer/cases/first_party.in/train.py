"""SpecForge's optimizer, imported among the program's own modules: its replacement is a
library's, so it moves to the libraries' imports (first-party stays last, as isort has it)."""

import os

import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

from specforge.optimizer import BF16Optimizer as Optimizer


def main(model):
    model = FSDP(model, device_id=torch.device("cpu"))
    return Optimizer(model, float(os.environ.get("LR", "1e-4")))
