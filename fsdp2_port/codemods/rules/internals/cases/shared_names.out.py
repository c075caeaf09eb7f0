import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def build(net):
    # TODO(fsdp2-port): F2P002 FSDP(...) left as is (its model stays FSDP1 because of F2P010 at line 11 (it may act on any model here), F2P010 at line 23 (it may act on any model here))
    return FSDP(net)


def step(unet_state, model):
    weights = unet_state.params  # a train state's own (Flax)
    # TODO(fsdp2-port): F2P010 params: FSDP1 internal; FSDP2 keeps the original modules and parameters (no wrapper, no flat parameter) (it may act on any model of this run: they all stay FSDP1 until it is ported)
    flat = model.params  # FSDP1's flat parameters, perhaps
    return weights, flat


def save(ckpt_data, path):
    # a checkpoint record's own field (minllm's), read as nothing FSDP1's enum has
    iteration = ckpt_data.training_state.get("iteration", 0)
    torch.save(ckpt_data.training_state, path)
    return iteration


def busy(model):
    # TODO(fsdp2-port): F2P010 training_state: FSDP1 internal; FSDP2 keeps the original modules and parameters (no wrapper, no flat parameter) (it may act on any model of this run: they all stay FSDP1 until it is ported)
    return model.training_state  # FSDP1's TrainingState, perhaps
