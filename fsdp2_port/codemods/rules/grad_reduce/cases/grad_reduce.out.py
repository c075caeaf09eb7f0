import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def local_norm(model):
    total = 0.0
    for p in model.parameters():
        if p.grad is not None:
            total += torch.linalg.vector_norm(p.grad) ** 2
    return total**0.5


def global_norm(model):
    # FSDP1's shards summed: under FSDP2 the grads are DTensors
    norm = local_norm(model).clone() ** 2
    # TODO(fsdp2-port): F2P014 gradients all-reduced by hand: under FSDP2 they are DTensors, whose norms are already global and which dist.all_reduce refuses; use fsdp2_port.global_grad_norm(model.parameters())
    dist.all_reduce(norm)
    return norm**0.5


def train(net):
    # TODO(fsdp2-port): F2P002 FSDP(...) left as is (its model stays FSDP1 because of F2P014 at line 17, F2P014 at line 55 (it may act on any model here))
    model = FSDP(net)
    return global_norm(model)


def dtensor_aware(model):
    norm = sum(p.grad.to_local().pow(2).sum() for p in model.parameters())
    dist.all_reduce(norm)
    return norm


def losses(loss):
    dist.all_reduce(loss)  # not gradients
    return loss


def data_parallel_by_hand(model):
    for param in model.parameters():
        dist.all_reduce(param.grad)  # the gradients themselves: never on an FSDP1 model
        param.grad.div_(dist.get_world_size())


def distilled(model, ids):
    # an input's gradient (grad distillation): a plain tensor under FSDP1 and FSDP2 alike
    embeds = model.embed(ids).detach().requires_grad_(True)
    model(embeds).sum().backward()
    signal = embeds.grad.pow(2).sum()
    dist.all_reduce(signal)
    return signal


def head_weight(model):
    weight = model.head.weight  # a parameter, reached by an attribute chain
    local = weight.grad.pow(2).sum()
    # TODO(fsdp2-port): F2P014 gradients all-reduced by hand: under FSDP2 they are DTensors, whose norms are already global and which dist.all_reduce refuses; use fsdp2_port.global_grad_norm(model.parameters()) (it may act on any model of this run: they all stay FSDP1 until it is ported)
    dist.all_reduce(local)
    return local.sqrt()
