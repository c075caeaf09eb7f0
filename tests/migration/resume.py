"""A size-based wrap policy and a sharded checkpoint saved and resumed in the middle of the run.

    torchrun --nproc-per-node 2 resume.py --steps 6 --resume-at 3 --checkpoint DIR

At step ``--resume-at`` the run saves model and optimizer as a sharded DCP checkpoint, takes a
step it should not have (a wrong batch, as a run that crashed half-way would), loads the
checkpoint back into the same model and optimizer, and trains on: the losses after that are the
uninterrupted run's only if the checkpoint restored everything.
"""

import argparse
import functools

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn.functional as F
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import ShardingStrategy, StateDictType
from torch.distributed.fsdp.wrap import size_based_auto_wrap_policy

from fsdp2_port.prove.launch import exit_now

from common import Net, batch, report


def build():
    torch.manual_seed(0)
    policy = functools.partial(size_based_auto_wrap_policy, min_num_params=1_000)
    model = FSDP(
        Net(),
        auto_wrap_policy=policy,
        sharding_strategy=ShardingStrategy.FULL_SHARD,
        device_id=torch.device("cpu"),
        use_orig_params=True,
    )
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2)


def save(model, optimizer, path):
    with FSDP.state_dict_type(model, StateDictType.SHARDED_STATE_DICT):
        state = {"model": model.state_dict(), "optim": FSDP.optim_state_dict(model, optimizer)}
        dcp.save(state, checkpoint_id=path)


def load(model, optimizer, path):
    with FSDP.state_dict_type(model, StateDictType.SHARDED_STATE_DICT):
        state = {"model": model.state_dict(), "optim": FSDP.optim_state_dict(model, optimizer)}
        dcp.load(state, checkpoint_id=path)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(FSDP.optim_state_dict_to_load(model, optimizer, state["optim"]))


def train_step(model, optimizer, tokens, targets):
    loss = F.cross_entropy(model(tokens).flatten(0, 1), targets.flatten())
    loss.backward()
    norm = model.clip_grad_norm_(1.0)
    optimizer.step()
    optimizer.zero_grad()
    return loss, norm


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--resume-at", type=int, default=3)
    parser.add_argument("--checkpoint", required=True)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model, optimizer = build()
    for step in range(args.steps):
        if step == args.resume_at:
            save(model, optimizer, args.checkpoint)
            train_step(model, optimizer, *batch(1000 + step, rank, world))  # lost by the crash
            load(model, optimizer, args.checkpoint)
        loss, norm = train_step(model, optimizer, *batch(step, rank, world))
        report(rank, step, loss, norm)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    exit_now()
