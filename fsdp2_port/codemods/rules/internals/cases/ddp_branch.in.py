# fixture: no-runtime-dependency
# .module where a DDP type test holds is DDP's attribute: nothing to mark there; elsewhere it
# may be FSDP1's wrapped module, and stays marked.
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.nn.parallel import DistributedDataParallel as DDP


class Trainer:
    def __init__(self, model, use_fsdp):
        self.model = FSDP(model) if use_fsdp else DDP(model)

    def inner(self):
        if isinstance(self.model, DDP):
            return self.model.module
        return self.model

    def wrapped(self):
        return self.model.module
