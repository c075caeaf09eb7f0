"""A size-based wrap policy and a sharded checkpoint saved and resumed in the middle of the run.

    torchrun --nproc-per-node 2 resume.py --steps 6 --resume-at 3 --checkpoint DIR

The run trains ``--resume-at`` steps, saves model and optimizer as a sharded DCP checkpoint,
builds everything anew from another seed, loads the checkpoint and trains on.
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

from common import Net, batch, report


def build(seed):
    torch.manual_seed(seed)
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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--resume-at", type=int, default=3)
    parser.add_argument("--checkpoint", required=True)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model, optimizer = build(seed=0)
    for step in range(args.steps):
        if step == args.resume_at:
            save(model, optimizer, args.checkpoint)
            model, optimizer = build(seed=1)
            load(model, optimizer, args.checkpoint)
        tokens, targets = batch(step, rank, world)
        loss = F.cross_entropy(model(tokens).flatten(0, 1), targets.flatten())
        loss.backward()
        norm = model.clip_grad_norm_(1.0)
        optimizer.step()
        optimizer.zero_grad()
        report(rank, step, loss, norm)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
