"""The training loop every trainer shares; a subclass builds ``self.policy`` and its optimizer.

Micro-batches but the last run backward under ``no_sync`` (no gradient reduction), the policy's
own ``clip_grad_norm_`` clips by the global norm, and every ``log_every`` steps the full weights
are gathered to log their norm (what an EMA or an eval pass would read). Where
``compare --resume-at`` asks, the full model and optimizer state are saved (rank 0 writes one
file) or loaded back.
"""

import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import StateDictType

from model import batch


class BaseTrainer:
    policy = None
    optimizer = None

    def __init__(self, args):
        self.args = args
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()

    def compute_loss(self, tokens, targets):
        logits = self.policy(tokens)
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())

    def train_step(self, step):
        accum = self.args.accum
        total = torch.zeros(())
        for micro in range(accum):
            tokens, targets = batch(step * accum + micro, self.rank, self.world_size)
            loss = self.compute_loss(tokens, targets) / accum
            if micro < accum - 1:
                with self.policy.no_sync():
                    loss.backward()
            else:
                loss.backward()
            total += loss.detach()
        grad_norm = self.policy.clip_grad_norm_(self.args.max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad()
        return total, grad_norm

    @torch.no_grad()
    def full_weight_norm(self):
        """The norm of the whole policy's weights, read from the full (unsharded) parameters."""
        with FSDP.summon_full_params(self.policy):
            squares = [p.detach().float().pow(2).sum() for p in self.policy.parameters()]
            return torch.stack(squares).sum().sqrt()

    def log(self, step, loss, grad_norm):
        line = f"step {step} loss {loss.item():.8f} grad_norm {float(grad_norm):.8f}"
        if step % self.args.log_every == 0:
            line += f" weight_norm {self.full_weight_norm().item():.8f}"
        if self.rank == 0:
            print(line, flush=True)

    def save(self, path):
        with FSDP.state_dict_type(self.policy, StateDictType.FULL_STATE_DICT):
            state = {
                "policy": self.policy.state_dict(),
                "optimizer": FSDP.optim_state_dict(self.policy, self.optimizer),
            }
        if self.rank == 0:
            torch.save(state, path)

    def load(self, path):
        state = torch.load(path, weights_only=False)
        with FSDP.state_dict_type(self.policy, StateDictType.FULL_STATE_DICT):
            self.policy.load_state_dict(state["policy"])
            optim = FSDP.optim_state_dict_to_load(self.policy, self.optimizer, state["optimizer"])
            self.optimizer.load_state_dict(optim)

    def fit(self):
        start, save_at = 0, int(os.environ.get("FSDP2_PORT_SAVE_AT", -1))
        if os.environ.get("FSDP2_PORT_RESUME_FROM"):
            self.load(os.path.join(os.environ["FSDP2_PORT_RESUME_FROM"], "trainer.pt"))
            start = int(os.environ["FSDP2_PORT_RESUME_AT"]) + 1
        for step in range(start, self.args.steps):
            loss, grad_norm = self.train_step(step)
            loss = loss.clone()
            dist.all_reduce(loss, op=dist.ReduceOp.AVG)
            self.log(step, loss, grad_norm)
            if step == save_at:
                self.save(os.path.join(os.environ["FSDP2_PORT_CHECKPOINT"], "trainer.pt"))
