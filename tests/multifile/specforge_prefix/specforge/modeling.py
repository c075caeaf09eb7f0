"""A frozen target model, a small trainable draft model, and the wrapper that trains one on the other.

The draft reads the target's hidden states and predicts the next token with its own head; only
the draft learns. Both live inside one wrapper module, which is what gets sharded.
"""

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


class TargetModel(nn.Module):
    def __init__(self, blocks=2):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.blocks = nn.ModuleList(Block() for _ in range(blocks))

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return x


class DraftModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2 * DIM, DIM)
        self.block = Block()
        self.head = nn.Linear(DIM, VOCAB)

    def forward(self, hidden, embedded):
        return self.head(self.block(self.fc(torch.cat([hidden, embedded], dim=-1))))


class Eagle3Model(nn.Module):
    def __init__(self, draft, target):
        super().__init__()
        self.draft = draft
        self.target = target

    def forward(self, tokens):
        with torch.no_grad():
            hidden = self.target(tokens)
            embedded = self.target.embed(tokens)
        return self.draft(hidden, embedded)


def build_models(dtype):
    torch.manual_seed(0)
    target = TargetModel().to(dtype).requires_grad_(False)
    draft = DraftModel().to(dtype)
    return draft, target
