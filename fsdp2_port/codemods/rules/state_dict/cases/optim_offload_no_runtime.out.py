# fixture: no-runtime-dependency
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def build(module):
    # TODO(fsdp2-port): F2P002 FSDP(...) left as is (its model stays FSDP1 because of F2P008 at line 15)
    return FSDP(module)


def save(module, optimizer):
    """Outside a block FSDP1 is FULL with its default configs: the model's state on every
    rank's device (DCP's full_state_dict), the optimizer's offloaded on every rank (no DCP
    form: marked, and the model stays FSDP1)."""
    model = build(module)
    model_state = model.state_dict()
    # TODO(fsdp2-port): F2P008 FSDP.optim_state_dict(...): port with get_/set_*_state_dict and StateDictOptions
    optim_state = FSDP.optim_state_dict(model, optimizer)
    return model_state, optim_state


def load(model, optimizer, osd):
    optimizer.load_state_dict(FSDP.optim_state_dict_to_load(model, optimizer, osd))
