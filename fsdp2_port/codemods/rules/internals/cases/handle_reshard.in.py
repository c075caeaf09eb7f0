from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def build(module):
    return FSDP(module, use_orig_params=True)


class Worker:
    def __init__(self, module):
        self.actor_module = build(module)

    def compute_log_prob(self, data):
        output = self.actor_module(data)
        # unshard the root FSDP module (FSDP1 and FSDP2 both keep it unsharded after forward)
        self.actor_module._handle.reshard(True)
        return output

    def elsewhere(self, actor):
        actor.actor_module._handle.reshard(free_unsharded_flat_param=True)  # cannot be tied
