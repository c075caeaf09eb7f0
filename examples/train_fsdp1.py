"""A legacy FSDP1 training script, in the shape real ones have.

    torchrun --standalone --nproc-per-node 2 examples/train_fsdp1.py --steps 8

A small decoder-only transformer, FSDP1 with transformer_auto_wrap_policy, bf16 mixed
precision, SHARD_GRAD_OP, the SpecForge-style BF16 master optimizer (compat's, which clips by
the true global norm), gradient accumulation under no_sync, and a full state dict saved at
the end. Prints one ``step N loss L grad_norm G`` line per optimizer step on rank 0.
`fsdp2-port migrate` turns it into an FSDP2 script (see the README's demo).

It saves and resumes as a long run does (``--save-at K --checkpoint DIR``, ``--resume-from
DIR --resume-at K``): the model's full state dict from rank 0 and each rank's optimizer state
(SpecForge's form: its own masters and moments). The options default to the variables
``fsdp2-port compare --resume-at`` sets (docs/compare.md).
"""

import argparse
import functools
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.fsdp import (
    FullStateDictConfig,
    MixedPrecision,
    ShardingStrategy,
    StateDictType,
)
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

from fsdp2_port.compat import BF16Optimizer
from fsdp2_port.prove.launch import exit_now

VOCAB, DIM, HEADS, LAYERS, SEQ = 128, 64, 4, 3, 32

# bf16 compute, fp32 gradient reduction: the usual recipe.
MIXED_PRECISION = MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)


class DecoderBlock(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.attn_norm = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.mlp_norm = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        h = self.attn_norm(x)
        mask = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool, device=x.device).triu(1)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.mlp_norm(x))


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.blocks = nn.ModuleList(DecoderBlock(DIM, HEADS) for _ in range(LAYERS))
        self.norm = nn.LayerNorm(DIM)
        self.lm_head = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.norm(x))


def micro_batches(step: int, rank: int, world_size: int, accum: int, batch: int):
    """The same global batch for any world size: rank r takes its rows of every micro-batch."""
    g = torch.Generator().manual_seed(step)
    tokens = torch.randint(0, VOCAB, (accum, batch * world_size, SEQ + 1), generator=g)
    mine = tokens[:, rank * batch : (rank + 1) * batch]
    return [(t[:, :-1], t[:, 1:]) for t in mine]


def save_checkpoint(model: FSDP, optimizer: BF16Optimizer, folder: str) -> None:
    rank = dist.get_rank()
    full_config = FullStateDictConfig(offload_to_cpu=False, rank0_only=True)
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, full_config):
        state = model.state_dict()
    if rank == 0:
        torch.save(state, os.path.join(folder, "model.pt"))
    torch.save(optimizer.state_dict(), os.path.join(folder, f"optim_{rank}.pt"))


def load_checkpoint(model: FSDP, optimizer: BF16Optimizer, folder: str) -> None:
    state = torch.load(os.path.join(folder, "model.pt"))
    full_config = FullStateDictConfig(offload_to_cpu=False, rank0_only=False)
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, full_config):
        model.load_state_dict(state)
    path = os.path.join(folder, f"optim_{dist.get_rank()}.pt")
    optimizer.load_state_dict(torch.load(path, weights_only=False))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--accum", type=int, default=2)
    parser.add_argument("--batch", type=int, default=4, help="sequences per rank per micro-batch")
    parser.add_argument("--save", default=None, help="where rank 0 writes the full state dict")
    env = os.environ.get
    parser.add_argument("--save-at", type=int, default=int(env("FSDP2_PORT_SAVE_AT", -1)))
    parser.add_argument("--checkpoint", default=env("FSDP2_PORT_CHECKPOINT"))
    parser.add_argument("--resume-from", default=env("FSDP2_PORT_RESUME_FROM"))
    parser.add_argument("--resume-at", type=int, default=int(env("FSDP2_PORT_RESUME_AT", -1)))
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)

    wrap_policy = functools.partial(
        transformer_auto_wrap_policy, transformer_layer_cls={DecoderBlock}
    )
    model = TinyLM()
    model = FSDP(
        model,
        auto_wrap_policy=wrap_policy,
        mixed_precision=MIXED_PRECISION,
        sharding_strategy=ShardingStrategy.SHARD_GRAD_OP,
        device_id=torch.device("cpu"),
        use_orig_params=True,
        limit_all_gathers=True,
    )
    optimizer = BF16Optimizer(
        model, lr=3e-3, max_grad_norm=0.25, total_steps=100, warmup_ratio=0.05
    )

    first = 0
    if args.resume_from:
        load_checkpoint(model, optimizer, args.resume_from)
        first = args.resume_at + 1
    for step in range(first, args.steps):
        batches = micro_batches(step, rank, world_size, args.accum, args.batch)
        total = torch.zeros(())
        for i, (tokens, targets) in enumerate(batches):
            logits = model(tokens)
            loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten()) / args.accum
            if i < len(batches) - 1:
                with model.no_sync():
                    loss.backward()
            else:
                loss.backward()
            total += loss.detach()
        grad_norm = optimizer.step()
        dist.all_reduce(total, op=dist.ReduceOp.AVG)
        if rank == 0:
            print(
                f"step {step} loss {total.item():.6f} grad_norm {grad_norm.item():.6f}", flush=True
            )
        if step == args.save_at and args.checkpoint:
            save_checkpoint(model, optimizer, args.checkpoint)

    # On a GPU job this would offload to the CPU; on a CPU run FSDP1's offload_to_cpu=True
    # segfaults (torch 2.13), and the tensors are on the CPU already.
    full_config = FullStateDictConfig(offload_to_cpu=False, rank0_only=True)
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, full_config):
        state = model.state_dict()
    if rank == 0 and args.save:
        torch.save(state, args.save)
        print(f"saved {len(state)} tensors to {os.path.basename(args.save)}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    exit_now()  # torch 2.13 + gloo can abort in the interpreter's shutdown: see its docstring
