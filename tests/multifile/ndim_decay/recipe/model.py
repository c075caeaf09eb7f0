"""The network and the data: a few residual blocks over token embeddings."""

import torch
from torch import nn

DIM, HIDDEN, VOCAB = 16, 32, 64


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(DIM)
        self.up = nn.Linear(DIM, HIDDEN)
        self.down = nn.Linear(HIDDEN, DIM)

    def forward(self, x):
        return x + self.down(torch.tanh(self.up(self.norm(x))))


class Net(nn.Module):
    def __init__(self, blocks=3):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.blocks = nn.ModuleList(Block() for _ in range(blocks))
        self.head = nn.Linear(DIM, VOCAB)

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def batch(step, rank, world_size, rows=4, length=8):
    """This rank's rows of the global batch of ``step`` (the same for any world size)."""
    g = torch.Generator().manual_seed(step)
    tokens = torch.randint(0, VOCAB, (rows * world_size, length + 1), generator=g)
    mine = tokens[rank * rows : (rank + 1) * rows]
    return mine[:, :-1], mine[:, 1:]
