import torch
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard


def lined_up(model, rank):
    # the arguments follow the parenthesis, which moves right
    return fully_shard(model,
                       mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16))


def lined_up_long(model, rank):
    # ... and left
    return fully_shard(model,
                       mp_policy=MixedPrecisionPolicy(reduce_dtype=torch.float32))


def hanging(model, rank):
    print("sharding")

    # a binding alone between blank lines goes with one of them
    return fully_shard(
        model,
        mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16),
    )
