import fsdp2_port
from torch.distributed.fsdp import fully_shard


def build(module):
    return fully_shard(module)


class Worker:
    def __init__(self, module):
        self.actor_module = build(module)

    def compute_log_prob(self, data):
        output = self.actor_module(data)
        # unshard the root FSDP module (FSDP1 and FSDP2 both keep it unsharded after forward)
        fsdp2_port.reshard(self.actor_module, True)
        return output

    def elsewhere(self, actor):
        fsdp2_port.reshard(actor.actor_module, free_unsharded_flat_param=True)  # cannot be tied
