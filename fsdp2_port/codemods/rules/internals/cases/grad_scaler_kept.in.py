# fixture: no-runtime-dependency
import torch
import torch.distributed.fsdp.sharded_grad_scaler
from torch.distributed.fsdp import sharded_grad_scaler
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler as Scaler


def make_scaler(fp16: bool, group):
    # ShardedGradScaler's positional order: device, init_scale, backoff_factor, growth_factor
    if fp16:
        return ShardedGradScaler("cuda", 2.0**10, 0.25, 4.0, 100, enabled=True, process_group=group)
    return ShardedGradScaler(enabled=False) if group is None else Scaler(**{"enabled": fp16})


def other_spellings():
    a = sharded_grad_scaler.ShardedGradScaler(enabled=True)
    b = torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler()
    c = ShardedGradScaler()  # fsdp2-port: ignore
    return a, b, c


def step(scaler: ShardedGradScaler, optimizer, loss):
    scaler.scale(loss).backward()
    if isinstance(scaler, ShardedGradScaler):
        scaler.step(optimizer)
    scaler.update()


class LoggingScaler(ShardedGradScaler):
    pass


FACTORY = ShardedGradScaler


def from_factory():
    return FACTORY(enabled=True)
