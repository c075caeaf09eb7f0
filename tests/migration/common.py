"""What the migration scripts share: a small block model and a deterministic global batch.

Kept apart so that each script reads like a training script and the codemod sees only the FSDP1
code it has to migrate.
"""

import torch
from torch import nn

DIM, HIDDEN, VOCAB = 16, 32, 64


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(DIM)
        self.up = nn.Linear(DIM, HIDDEN)
        self.down = nn.Linear(HIDDEN, DIM)

    def forward(self, x):
        return x + self.down(torch.tanh(self.up(self.norm(x))))


class Net(nn.Module):
    def __init__(self, blocks: int = 3) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.blocks = nn.ModuleList(Block() for _ in range(blocks))
        self.head = nn.Linear(DIM, VOCAB)

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def batch(step: int, rank: int, world_size: int, rows: int = 4, length: int = 8):
    """Rank ``rank``'s rows of step ``step``'s global batch (the same for any world size)."""
    g = torch.Generator().manual_seed(step)
    tokens = torch.randint(0, VOCAB, (rows * world_size, length + 1), generator=g)
    mine = tokens[rank * rows : (rank + 1) * rows]
    return mine[:, :-1], mine[:, 1:]


def report(rank: int, step: int, loss: torch.Tensor, norm: torch.Tensor) -> None:
    """One ``step N loss X grad_norm Y`` line on rank 0 (the loss averaged over ranks)."""
    import torch.distributed as dist

    loss = loss.detach().clone()
    dist.all_reduce(loss, op=dist.ReduceOp.AVG)
    if rank == 0:
        print(f"step {step} loss {loss.item():.8f} grad_norm {float(norm):.8f}", flush=True)
