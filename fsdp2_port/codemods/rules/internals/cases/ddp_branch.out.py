# fixture: no-runtime-dependency
# .module where a DDP type test holds is DDP's attribute: nothing to mark there; elsewhere it
# may be FSDP1's wrapped module, and stays marked.
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.nn.parallel import DistributedDataParallel as DDP


class Trainer:
    def __init__(self, model, use_fsdp):
        # TODO(fsdp2-port): F2P002 FSDP(...) left as is (its model stays FSDP1 because of F2P010 at line 18)
        self.model = FSDP(model) if use_fsdp else DDP(model)

    def inner(self):
        if isinstance(self.model, DDP):
            return self.model.module
        return self.model

    def wrapped(self):
        # TODO(fsdp2-port): F2P010 self.model.module: FSDP2 does not wrap; use self.model itself once it is FSDP2
        return self.model.module
