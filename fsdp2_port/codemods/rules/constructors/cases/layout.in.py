import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import MixedPrecision
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import fully_sharded_data_parallel


def lined_up(model, rank):
    # the arguments follow the parenthesis, which moves right
    return FSDP(model,
                mixed_precision=MixedPrecision(param_dtype=torch.bfloat16),
                device_id=rank)


def lined_up_long(model, rank):
    # ... and left
    return fully_sharded_data_parallel.FullyShardedDataParallel(model,
                                                                device_id=rank,
                                                                mixed_precision=MixedPrecision(reduce_dtype=torch.float32))


def hanging(model, rank):
    print("sharding")

    precision = MixedPrecision(param_dtype=torch.bfloat16)

    # a binding alone between blank lines goes with one of them
    return FSDP(
        model,
        mixed_precision=precision,
        device_id=rank,
    )
