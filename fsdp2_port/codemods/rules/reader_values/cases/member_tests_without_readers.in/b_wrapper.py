from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, StateDictType


class Wrapper(FSDP):
    def full(self):
        settings = FSDP.get_state_dict_type(self)
        return settings.state_dict_type == StateDictType.FULL_STATE_DICT
