"""The bundled model of ``fsdp2-port verify``: a small pre-norm decoder on random tokens.

``tiny_transformer()`` is a verify factory: it returns the model and a batch function
``batch(step, size) -> (tokens, next_tokens)``, deterministic in ``step``.
"""

from __future__ import annotations

import torch
from torch import nn

VOCAB, DIM, HEADS, LAYERS, SEQ = 96, 32, 4, 2, 16


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.attn_norm = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.mlp_norm = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.attn_norm(x)
        causal = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool, device=x.device).triu(1)
        x = x + self.attn(h, h, h, attn_mask=causal, need_weights=False)[0]
        return x + self.mlp(self.mlp_norm(x))


class TinyTransformer(nn.Module):
    def __init__(
        self, vocab: int = VOCAB, dim: int = DIM, heads: int = HEADS, layers: int = LAYERS
    ):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(SEQ, dim) * 0.02)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.out = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.pos[: tokens.shape[1]].to(self.embed.weight.dtype)
        for block in self.blocks:
            x = block(x)
        return self.out(self.norm(x))


def batch(step: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(10_000 + step)
    tokens = torch.randint(0, VOCAB, (size, SEQ + 1), generator=g)
    return tokens[:, :-1], tokens[:, 1:]


def tiny_transformer() -> tuple[nn.Module, object]:
    torch.manual_seed(0)
    return TinyTransformer(), batch
