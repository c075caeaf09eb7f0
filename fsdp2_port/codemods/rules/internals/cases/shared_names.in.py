import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def build(net):
    return FSDP(net)


def step(unet_state, model):
    weights = unet_state.params  # a train state's own (Flax)
    flat = model.params  # FSDP1's flat parameters, perhaps
    return weights, flat


def save(ckpt_data, path):
    # a checkpoint record's own field (minllm's), read as nothing FSDP1's enum has
    iteration = ckpt_data.training_state.get("iteration", 0)
    torch.save(ckpt_data.training_state, path)
    return iteration


def busy(model):
    return model.training_state  # FSDP1's TrainingState, perhaps
