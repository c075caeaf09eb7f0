"""FSDP1 arguments in a kwargs dict with a policy chosen at run time, a frozen module kept out
of sharding with ``ignored_modules``, and the wrapped module reached through ``.module``; the
dict also holds FSDP1's configs and enums (and is logged), and a full state dict is taken at
the end.

    torchrun --nproc-per-node 2 kwargs_policy.py --steps 4
"""

import argparse
import functools

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.fsdp import (
    BackwardPrefetch,
    CPUOffload,
    FullStateDictConfig,
    MixedPrecision,
    ShardingStrategy,
    StateDictType,
)
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import ModuleWrapPolicy, size_based_auto_wrap_policy

from fsdp2_port.prove.launch import exit_now

from common import Block, Net, batch, report


def fsdp_kwargs(args, frozen):
    kwargs = dict(
        device_id=torch.device("cpu"),
        sharding_strategy=ShardingStrategy.FULL_SHARD,
        use_orig_params=True,
        backward_prefetch=BackwardPrefetch.BACKWARD_PRE,
        cpu_offload=CPUOffload(offload_params=False),
    )
    if args.size_policy:
        kwargs["auto_wrap_policy"] = functools.partial(size_based_auto_wrap_policy, min_num_params=500)
        kwargs["mixed_precision"] = MixedPrecision(reduce_dtype=torch.float32, buffer_dtype=torch.float32)
    else:
        kwargs["auto_wrap_policy"] = ModuleWrapPolicy({Block})
    kwargs["ignored_modules"] = [frozen]
    if dist.get_rank() == 0:
        print("FSDP kwargs:", kwargs)
    return kwargs


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--size-policy", action="store_true")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    net = Net()
    net.embed.requires_grad_(False)  # a frozen, pretrained embedding
    shapes = {name: value.shape for name, value in net.state_dict().items()}
    model = FSDP(net, **fsdp_kwargs(args, net.embed))
    vocab = model.module.head.out_features
    optimizer = torch.optim.AdamW((p for p in model.parameters() if p.requires_grad), lr=1e-2)
    for step in range(args.steps):
        tokens, targets = batch(step, rank, world)
        logits = model(tokens)
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten() % vocab)
        loss.backward()
        norm = model.clip_grad_norm_(1.0)
        optimizer.step()
        optimizer.zero_grad()
        report(rank, step, loss, norm)
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, FullStateDictConfig()):
        state = model.state_dict()
    assert {name: value.shape for name, value in state.items()} == shapes
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    exit_now()
