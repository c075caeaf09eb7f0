# fixture: whole-program
"""No file of the run calls a reader (its one model stays FSDP1, a subclass): the member tests
that read the same attribute name in two files take either spelling, but no value is written
for them, and the run adds no fsdp2_port to these files."""
from torch.distributed.fsdp import StateDictType


class Strategy:
    def __init__(self, kind):
        self.state_dict_type = kind

    def full(self):
        return self.state_dict_type == StateDictType.FULL_STATE_DICT
