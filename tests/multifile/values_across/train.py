"""Train with FSDP1 values built here and read in another module (sharding/wrapping.py);
save a full checkpoint where ``compare --resume-at`` asks (rank 0 writes it) and resume from
one.

    torchrun --nproc-per-node 2 train.py --steps 3
"""

import argparse
import functools
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import MixedPrecision, ShardingStrategy, StateDictType
from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

from fsdp2_port.prove.launch import exit_now
from model import Net, batch, layer_class
from sharding.wrapping import wrap


class Recipe:
    STRATEGY = ShardingStrategy.SHARD_GRAD_OP

    def build(self, model):
        precision = MixedPrecision(
            param_dtype=torch.bfloat16, reduce_dtype=torch.float32, buffer_dtype=torch.bfloat16
        )
        # the layer class is found by a call: the policy reads it once, where it is built
        policy = functools.partial(
            transformer_auto_wrap_policy, transformer_layer_cls={layer_class(model)}
        )
        return wrap(model, self.STRATEGY, precision, policy)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = Recipe().build(Net())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    start, save_at = 0, int(os.environ.get("FSDP2_PORT_SAVE_AT", -1))
    if os.environ.get("FSDP2_PORT_RESUME_FROM"):
        path = os.path.join(os.environ["FSDP2_PORT_RESUME_FROM"], "checkpoint.pt")
        state = torch.load(path, weights_only=False)
        with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT):
            model.load_state_dict(state["model"])
            optim = FSDP.optim_state_dict_to_load(model, optimizer, state["optim"])
            optimizer.load_state_dict(optim)
        start = int(os.environ["FSDP2_PORT_RESUME_AT"]) + 1
    for step in range(start, args.steps):
        tokens, targets = batch(step, rank, world_size)
        loss = F.cross_entropy(model(tokens).flatten(0, 1).float(), targets.flatten())
        loss.backward()
        grad_norm = model.clip_grad_norm_(1.0)
        optimizer.step()
        optimizer.zero_grad()
        loss = loss.detach().clone()
        dist.all_reduce(loss, op=dist.ReduceOp.AVG)
        if rank == 0:
            print(f"step {step} loss {loss.item():.8f} grad_norm {float(grad_norm):.8f}", flush=True)
        if step == save_at:
            with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT):
                state = {"model": model.state_dict(), "optim": FSDP.optim_state_dict(model, optimizer)}
            if rank == 0:
                torch.save(state, os.path.join(os.environ["FSDP2_PORT_CHECKPOINT"], "checkpoint.pt"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    exit_now()
