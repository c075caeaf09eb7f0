"""The training loop: the optimizer holds the draft's parameters only. Where
``compare --resume-at`` asks, the optimizer's state (its masters hold the weights) is saved,
rank 0 writing it as SpecForge did, or loaded back."""

import os

import torch
import torch.distributed as dist
import torch.nn.functional as F

VOCAB = 64


def batch(step, rank, world_size, rows=4, length=8):
    g = torch.Generator().manual_seed(step)
    tokens = torch.randint(0, VOCAB, (rows * world_size, length + 1), generator=g)
    mine = tokens[rank * rows : (rank + 1) * rows]
    return mine[:, :-1], mine[:, 1:]


def train(model, optimizer, steps):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    start, save_at = 0, int(os.environ.get("FSDP2_PORT_SAVE_AT", -1))
    if os.environ.get("FSDP2_PORT_RESUME_FROM"):
        path = os.path.join(os.environ["FSDP2_PORT_RESUME_FROM"], "optimizer.pt")
        optimizer.load_state_dict(torch.load(path, weights_only=False))
        start = int(os.environ["FSDP2_PORT_RESUME_AT"]) + 1
    for step in range(start, steps):
        tokens, targets = batch(step, rank, world_size)
        logits = model(tokens).float()
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        loss.backward()
        grad_norm = optimizer.step()
        loss = loss.detach().clone()
        dist.all_reduce(loss, op=dist.ReduceOp.AVG)
        if rank == 0:
            print(f"step {step} loss {loss.item():.8f} grad_norm {float(grad_norm):.8f}", flush=True)
        if step == save_at:
            state = optimizer.state_dict()
            if rank == 0:
                torch.save(state, os.path.join(os.environ["FSDP2_PORT_CHECKPOINT"], "optimizer.pt"))
