import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
import fsdp2_port
from torch.distributed.fsdp import fully_shard


class Trainer:
    def __init__(self, net, cfg):
        self.model = fully_shard(net)
        self.cfg = cfg

    def step(self, optimizer, metrics):
        if self.cfg.clip:
            metrics["grad_norm"] = (
                fsdp2_port.clip_grad_norm_(self.model.parameters(), self.cfg.max_norm).item()
            )
        total = fsdp2_port.clip_grad_norm_(
            self.model.parameters(),
            max_norm=1.0,
            norm_type=2.0,
        )
        optimizer.step()
        return total


def other(accelerator, model):
    accelerator.clip_grad_norm_(model.parameters(), 1.0)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    fsdp2_port.module_clip_grad_norm_(model, 1.0)


def typed(model: FSDP):
    return fsdp2_port.module_clip_grad_norm_(model, 0.5)
