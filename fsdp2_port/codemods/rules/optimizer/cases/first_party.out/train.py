"""SpecForge's optimizer, imported among the program's own modules: its replacement is a
library's, so it moves to the libraries' imports (first-party stays last, as isort has it)."""

import os

import torch
from fsdp2_port import BF16Optimizer as Optimizer
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard


def main(model):
    mesh = init_device_mesh("cpu", (torch.distributed.get_world_size(),))
    model = fully_shard(model, mesh=mesh)
    return Optimizer(model, float(os.environ.get("LR", "1e-4")))
