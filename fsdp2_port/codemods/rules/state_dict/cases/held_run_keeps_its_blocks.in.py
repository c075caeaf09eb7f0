"""LOCAL_STATE_DICT has no FSDP2 form and may meet any model here, so the run's model stays
FSDP1; the blocks that would take a form right on either stay as they are with it, unmarked
while no model of the run migrates (the constructor's marker and LOCAL's say why)."""
from torch.distributed.fsdp import FullStateDictConfig, StateDictType
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def local(model):
    with FSDP.state_dict_type(model, StateDictType.LOCAL_STATE_DICT):
        return model.state_dict()


def runtime(model, kind):
    with FSDP.state_dict_type(model, kind):
        return model.state_dict()


def full(model):
    config = FullStateDictConfig(offload_to_cpu=True, rank0_only=True)
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, config):
        return model.state_dict()


def build(module):
    return FSDP(module)
