# fixture: no-runtime-dependency
import torch
import torch.distributed.fsdp.sharded_grad_scaler
from torch.distributed.fsdp import sharded_grad_scaler
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler as Scaler


def make_scaler(fp16: bool, group):
    # ShardedGradScaler's positional order: device, init_scale, backoff_factor, growth_factor
    if fp16:
        # TODO(fsdp2-port): F2P010 ShardedGradScaler: with FSDP2 use torch.amp.GradScaler (check that the inf/NaN verdict is reduced across ranks)
        return ShardedGradScaler("cuda", 2.0**10, 0.25, 4.0, 100, enabled=True, process_group=group)
    # TODO(fsdp2-port): F2P010 ShardedGradScaler: with FSDP2 use torch.amp.GradScaler (check that the inf/NaN verdict is reduced across ranks)
    return ShardedGradScaler(enabled=False) if group is None else Scaler(**{"enabled": fp16})


def other_spellings():
    # TODO(fsdp2-port): F2P010 ShardedGradScaler: with FSDP2 use torch.amp.GradScaler (check that the inf/NaN verdict is reduced across ranks)
    a = sharded_grad_scaler.ShardedGradScaler(enabled=True)
    # TODO(fsdp2-port): F2P010 ShardedGradScaler: with FSDP2 use torch.amp.GradScaler (check that the inf/NaN verdict is reduced across ranks)
    b = torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler()
    c = ShardedGradScaler()  # fsdp2-port: ignore
    return a, b, c


# TODO(fsdp2-port): F2P010 ShardedGradScaler: with FSDP2 use torch.amp.GradScaler (check that the inf/NaN verdict is reduced across ranks)
def step(scaler: ShardedGradScaler, optimizer, loss):
    scaler.scale(loss).backward()
    # TODO(fsdp2-port): F2P010 ShardedGradScaler: with FSDP2 use torch.amp.GradScaler (check that the inf/NaN verdict is reduced across ranks)
    if isinstance(scaler, ShardedGradScaler):
        scaler.step(optimizer)
    scaler.update()


# TODO(fsdp2-port): F2P010 ShardedGradScaler: with FSDP2 use torch.amp.GradScaler (check that the inf/NaN verdict is reduced across ranks)
class LoggingScaler(ShardedGradScaler):
    pass


# TODO(fsdp2-port): F2P010 ShardedGradScaler: with FSDP2 use torch.amp.GradScaler (check that the inf/NaN verdict is reduced across ranks)
FACTORY = ShardedGradScaler


def from_factory():
    # TODO(fsdp2-port): F2P010 ShardedGradScaler: with FSDP2 use torch.amp.GradScaler (check that the inf/NaN verdict is reduced across ranks)
    return FACTORY(enabled=True)
