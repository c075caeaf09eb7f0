from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def build(net):
    return FSDP(net)


def step(unet_state, model):
    weights = unet_state.params  # a train state's own (Flax)
    flat = model.params  # FSDP1's flat parameters, perhaps
    return weights, flat
