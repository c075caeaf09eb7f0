"""The trainer: ``build_model`` returns the wrapped model and its optimizer as one tuple."""

import functools

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import ShardingStrategy
from torch.distributed.fsdp.wrap import size_based_auto_wrap_policy

from lm.checkpointing import load_checkpoint, save_checkpoint
from lm.model import TinyLM, batch


class Trainer:
    def __init__(self, args):
        self.args = args
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self.model, self.optimizer = self.build_model()

    def build_model(self):
        torch.manual_seed(0)
        policy = functools.partial(size_based_auto_wrap_policy, min_num_params=1_000)
        model = FSDP(
            TinyLM(),
            auto_wrap_policy=policy,
            sharding_strategy=ShardingStrategy.FULL_SHARD,
            device_id=torch.device("cpu"),
            use_orig_params=True,
        )
        optimizer = torch.optim.AdamW(model.parameters(), lr=self.args.lr, weight_decay=0.01)
        return model, optimizer

    def train_step(self, step):
        accum = self.args.accum
        total = torch.zeros(())
        for micro in range(accum):
            tokens, targets = batch(step * accum + micro, self.rank, self.world_size)
            logits = self.model(tokens)
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten()) / accum
            if micro < accum - 1:
                with self.model.no_sync():
                    loss.backward()
            else:
                loss.backward()
            total += loss.detach()
        norm = self.model.clip_grad_norm_(1.0)
        self.optimizer.step()
        self.optimizer.zero_grad()
        return total, norm

    def fit(self):
        for step in range(self.args.steps):
            if step == self.args.resume_at:
                save_checkpoint(self.model, self.optimizer, self.args.checkpoint)
                self.train_step(1000 + step)  # a step the crash loses
                load_checkpoint(self.model, self.optimizer, self.args.checkpoint)
            loss, norm = self.train_step(step)
            dist.all_reduce(loss, op=dist.ReduceOp.AVG)
            if self.rank == 0:
                print(f"step {step} loss {loss.item():.8f} grad_norm {norm.item():.8f}", flush=True)
