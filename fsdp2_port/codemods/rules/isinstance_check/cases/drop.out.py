# fixture: drop-fsdp1-branches
from torch import nn
from torch.distributed.fsdp import FSDPModule
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def clip(model, max_norm):
    # TODO(fsdp2-port): F2P005 FSDP1 branch of a type dispatch deleted (--drop-fsdp1-branches): FSDP1 models no longer have a branch here
    if isinstance(model, FSDPModule):
        return nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    return nn.utils.clip_grad_norm_(model.parameters(), max_norm)


def local_state(model):
    if model is None:
        return None
    # TODO(fsdp2-port): F2P005 FSDP1 branch of a type dispatch deleted (--drop-fsdp1-branches): FSDP1 models no longer have a branch here
    elif isinstance(model, FSDPModule):
        return model.state_dict()
    else:
        return {}


def nested(model):
    # TODO(fsdp2-port): F2P005 FSDP1 branch of a type dispatch that has an FSDP2 branch: it no longer runs once the model is FSDP2; delete it with the last FSDP1 model (--drop-fsdp1-branches)
    if isinstance(model, FSDP):
        return 1
    else:
        if isinstance(model, FSDPModule):
            return 2
    return 3
