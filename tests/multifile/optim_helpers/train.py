"""Train with full checkpoints; save one at ``--resume-at`` and resume from it.

    torchrun --nproc-per-node 2 train.py --steps 5 --resume-at 3 --checkpoint FILE

At ``--resume-at`` the run saves, takes a step it should not have (as a run that crashed after
saving would have), loads the checkpoint back and trains on: the later losses are the
uninterrupted run's only if the checkpoint restored the model and the optimizer's moments.
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F

from fsdp2_port.prove.launch import exit_now

from training.checkpoint import load_checkpoint, save_checkpoint
from training.model import batch
from training.setup import build


def train_step(model, optimizer, tokens, targets):
    loss = F.cross_entropy(model(tokens).flatten(0, 1), targets.flatten())
    loss.backward()
    grad_norm = model.clip_grad_norm_(1.0)
    optimizer.step()
    optimizer.zero_grad()
    return loss.detach(), grad_norm


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--resume-at", type=int, default=3)
    parser.add_argument("--checkpoint", required=True)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    model, optimizer = build(args.lr)
    step, save_at = 0, int(os.environ.get("FSDP2_PORT_SAVE_AT", -1))
    if os.environ.get("FSDP2_PORT_RESUME_FROM"):  # fsdp2-port compare --resume-at
        step = 1 + load_checkpoint(
            model, optimizer, os.path.join(os.environ["FSDP2_PORT_RESUME_FROM"], "full.pt")
        )
    while step < args.steps:
        if step == args.resume_at:
            save_checkpoint(model, optimizer, args.checkpoint, step)
            train_step(model, optimizer, *batch(1000 + step, rank, world_size))  # lost
            step = load_checkpoint(model, optimizer, args.checkpoint)
            args.resume_at = -1
        loss, grad_norm = train_step(model, optimizer, *batch(step, rank, world_size))
        dist.all_reduce(loss, op=dist.ReduceOp.AVG)
        if rank == 0:
            print(f"step {step} loss {loss.item():.8f} grad_norm {float(grad_norm):.8f}", flush=True)
        if step == save_at:
            path = os.path.join(os.environ["FSDP2_PORT_CHECKPOINT"], "full.pt")
            save_checkpoint(model, optimizer, path, step)
        step += 1
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    exit_now()
