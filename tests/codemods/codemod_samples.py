"""Small sources and paths used by several codemod tests."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

FSDP1_SOURCE = """\
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def wrap(model):
    # a comment that must survive
    return FSDP(model)
"""

FSDP2_SOURCE = """\
import torch
from torch.distributed.fsdp import fully_shard


def wrap(model):
    # a comment that must survive
    return fully_shard(model)
"""
