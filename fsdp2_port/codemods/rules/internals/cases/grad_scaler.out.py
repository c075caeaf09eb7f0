import torch
import torch.distributed.fsdp.sharded_grad_scaler
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
import fsdp2_port


def make_scaler(fp16: bool, group):
    # ShardedGradScaler's positional order: device, init_scale, backoff_factor, growth_factor
    if fp16:
        return fsdp2_port.GradScaler(
            "cuda",
            2.0**10,
            0.25,
            4.0,
            100,
            enabled=True,
            process_group=group,
        )
    return fsdp2_port.GradScaler(enabled=False) if group is None else fsdp2_port.GradScaler(
        **{"enabled": fp16},
    )


def other_spellings():
    a = fsdp2_port.GradScaler(enabled=True)
    b = fsdp2_port.GradScaler()
    c = ShardedGradScaler()  # fsdp2-port: ignore
    return a, b, c


# TODO(fsdp2-port): F2P010 ShardedGradScaler: its calls become fsdp2_port.GradScaler (a torch.amp.GradScaler, not a ShardedGradScaler): test, annotate or subclass fsdp2_port.GradScaler instead
def step(scaler: ShardedGradScaler, optimizer, loss):
    scaler.scale(loss).backward()
    # TODO(fsdp2-port): F2P010 ShardedGradScaler: its calls become fsdp2_port.GradScaler (a torch.amp.GradScaler, not a ShardedGradScaler): test, annotate or subclass fsdp2_port.GradScaler instead
    if isinstance(scaler, ShardedGradScaler):
        scaler.step(optimizer)
    scaler.update()


# TODO(fsdp2-port): F2P010 ShardedGradScaler: its calls become fsdp2_port.GradScaler (a torch.amp.GradScaler, not a ShardedGradScaler): test, annotate or subclass fsdp2_port.GradScaler instead
class LoggingScaler(ShardedGradScaler):
    pass


# TODO(fsdp2-port): F2P010 ShardedGradScaler: its calls become fsdp2_port.GradScaler (a torch.amp.GradScaler, not a ShardedGradScaler): test, annotate or subclass fsdp2_port.GradScaler instead
FACTORY = ShardedGradScaler


def from_factory():
    return fsdp2_port.GradScaler(enabled=True)


def chosen_by_flag(use_fsdp, loss_scale):
    if use_fsdp:
        scaler_type = fsdp2_port.GradScaler
    else:
        scaler_type = torch.amp.GradScaler
    if loss_scale == "dynamic":
        return scaler_type()
    return scaler_type(init_scale=loss_scale)


def chosen_inline(use_fsdp):
    # TODO(fsdp2-port): F2P010 ShardedGradScaler: its calls become fsdp2_port.GradScaler (a torch.amp.GradScaler, not a ShardedGradScaler): test, annotate or subclass fsdp2_port.GradScaler instead
    make = ShardedGradScaler if use_fsdp else torch.amp.GradScaler
    # TODO(fsdp2-port): F2P010 ShardedGradScaler: its calls become fsdp2_port.GradScaler (a torch.amp.GradScaler, not a ShardedGradScaler): test, annotate or subclass fsdp2_port.GradScaler instead
    return make(enabled=True), make  # returned as a value too: marked
