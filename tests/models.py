"""A tiny block model with uneven parameter sizes, and a deterministic global batch."""

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

IN, OUT = 7, 5


class Block(nn.Module):
    def __init__(self, d: int, h: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.up = nn.Linear(d, h)
        self.down = nn.Linear(h, d)

    def forward(self, x):
        return x + self.down(torch.tanh(self.up(self.norm(x))))


class TinyNet(nn.Module):
    def __init__(self, d: int = 12, h: int = 17, n_blocks: int = 2) -> None:
        super().__init__()
        self.embed = nn.Linear(IN, d)
        self.blocks = nn.ModuleList(Block(d, h) for _ in range(n_blocks))
        self.head = nn.Linear(d, OUT)

    def forward(self, x):
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def make_model(dtype: torch.dtype = torch.float32, seed: int = 0, hidden: int = 17) -> TinyNet:
    torch.manual_seed(seed)
    return TinyNet(h=hidden).to(dtype)


def global_batch(step: int, size: int = 8, dtype: torch.dtype = torch.float32):
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randn(size, IN, generator=g).to(dtype), torch.randn(size, OUT, generator=g)


def local_rows(t: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    n = t.shape[0] // world_size
    return t[rank * n : (rank + 1) * n]


def loss_fn(model: nn.Module, x: torch.Tensor, y: torch.Tensor, scale: float = 100.0):
    """Mean squared error, scaled so gradients are large enough for clipping to fire."""
    return ((model(x).float() - y) ** 2).mean() * scale


class GainBlock(Block):
    """A block with a float buffer in its forward (``buffer_dtype`` matters) and its own
    ``reset_parameters`` drawing from the RNG (the order of meta-device init matters)."""

    def __init__(self, d: int, h: int) -> None:
        super().__init__(d, h)
        self.register_buffer("gain", torch.empty(d))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.gain.copy_(1 + 0.1 * torch.randn(self.gain.shape))

    def forward(self, x):
        # in place: the activation keeps its dtype, and a bf16 gain (buffer_dtype) gives
        # other numbers than an fp32 one
        return super().forward(x).mul_(self.gain)


class NormNet(nn.Module):
    """embed, BatchNorm (FSDP1's mixed-precision exception), 3 GainBlocks, head: 1556 params.

    embed has no bias: BatchNorm would cancel it, leaving a gradient of rounding noise that
    Adam scales up to full steps, differently for any two summation orders."""

    def __init__(self, d: int = 12, h: int = 17, n_blocks: int = 3) -> None:
        super().__init__()
        self.embed = nn.Linear(IN, d, bias=False)
        self.bn = nn.BatchNorm1d(d)
        self.blocks = nn.ModuleList(GainBlock(d, h) for _ in range(n_blocks))
        self.head = nn.Linear(d, OUT)

    def forward(self, x):
        x = self.bn(self.embed(x))
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def cpu_mesh() -> DeviceMesh:
    """The world as a 1-D CPU mesh. These tests run gloo ranks on the CPU; ``fully_shard``
    without a mesh takes the accelerator where the machine has one (2 ranks, 1 GPU: rank 1
    asks for ``cuda:1``)."""
    return init_device_mesh("cpu", (dist.get_world_size(),))
