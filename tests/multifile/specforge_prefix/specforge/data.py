"""Deterministic token batches: the same global batch for any world size."""

import torch

VOCAB = 64


def batch(step, rank, world_size, rows=4, length=8):
    g = torch.Generator().manual_seed(step)
    tokens = torch.randint(0, VOCAB, (rows * world_size, length + 1), generator=g)
    mine = tokens[rank * rows : (rank + 1) * rows]
    return mine[:, :-1], mine[:, 1:]
