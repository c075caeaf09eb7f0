"""Train an Eagle3 draft model, SpecForge's way before its fix.

    torchrun --nproc-per-node 2 train.py --steps 4

The draft and the frozen target are wrapped together with FSDP; the BF16 optimizer holds the
draft's parameters. Its clip is rank-local (each rank clips its shard by its own norm); the
default ``--max-grad-norm`` is far above any norm here, so it never clips and this run is
correct: the backend turns the rank-local norms into the job's norm for the log.
"""

import argparse
import os

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import ShardingStrategy
from torch.distributed.fsdp.wrap import ModuleWrapPolicy

from fsdp2_port.prove.launch import exit_now

from specforge.backend import FSDPBackend
from specforge.data import batch
from specforge.modeling import Block, Eagle3Model, build_models
from specforge.optimizer import BF16Optimizer


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--learning-rate", type=float, default=1e-2)
    parser.add_argument("--max-grad-norm", type=float, default=1e4)
    parser.add_argument("--warmup-ratio", type=float, default=0.02)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()

    draft_model, target_model = build_models(torch.bfloat16)
    eagle3_model = FSDP(
        Eagle3Model(draft_model, target_model),
        auto_wrap_policy=ModuleWrapPolicy({Block}),
        sharding_strategy=ShardingStrategy.SHARD_GRAD_OP,
        device_id=torch.device("cpu"),
        use_orig_params=True,
    )
    optimizer = BF16Optimizer(
        draft_model,
        lr=args.learning_rate,
        max_grad_norm=args.max_grad_norm,
        total_steps=100,
        warmup_ratio=args.warmup_ratio,
    )
    backend = FSDPBackend(eagle3_model, optimizer)

    start, save_at = 0, int(os.environ.get("FSDP2_PORT_SAVE_AT", -1))
    if os.environ.get("FSDP2_PORT_RESUME_FROM"):
        path = os.path.join(os.environ["FSDP2_PORT_RESUME_FROM"], "training_state.pt")
        optimizer.load_state_dict(torch.load(path, weights_only=False))
        start = int(os.environ["FSDP2_PORT_RESUME_AT"]) + 1
    for step in range(start, args.steps):
        loss = backend.forward_backward(*batch(step, rank, world_size))
        grad_norm = backend.step()
        dist.all_reduce(loss, op=dist.ReduceOp.AVG)
        if rank == 0:
            print(f"step {step} loss {loss.item():.8f} grad_norm {grad_norm.item():.8f}", flush=True)
        if step == save_at:  # SpecForge's: every rank takes the state, rank 0 writes it
            state = {"global_step": step, **optimizer.state_dict()}
            if rank == 0:
                directory = os.environ["FSDP2_PORT_CHECKPOINT"]
                torch.save(state, os.path.join(directory, "training_state.pt"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    exit_now()
