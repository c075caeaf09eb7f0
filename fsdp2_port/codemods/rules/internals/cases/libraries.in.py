from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.nn.parallel import DistributedDataParallel as DDP
from transformer_engine.pytorch.distributed import prepare_te_modules_for_fsdp


def te(net):
    model = FSDP(net)
    prepare_te_modules_for_fsdp(model)
    return model


def ddp_only(net):
    model = DDP(net)
    return model.module
