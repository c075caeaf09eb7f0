# fixture: drop-fsdp1-branches
from torch import nn
from torch.distributed.fsdp import FSDPModule, StateDictType
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def clip(model, max_norm):
    if isinstance(model, FSDP):
        # FSDP1's own clip
        return model.clip_grad_norm_(max_norm)
    elif isinstance(model, FSDPModule):
        return nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    return nn.utils.clip_grad_norm_(model.parameters(), max_norm)


def local_state(model):
    if model is None:
        return None
    elif isinstance(model, FSDP):
        with FSDP.state_dict_type(model, StateDictType.LOCAL_STATE_DICT):
            return model.state_dict()
    elif isinstance(model, FSDPModule):
        return model.state_dict()
    else:
        return {}


def nested(model):
    if isinstance(model, FSDP):
        return 1
    else:
        if isinstance(model, FSDPModule):
            return 2
    return 3
