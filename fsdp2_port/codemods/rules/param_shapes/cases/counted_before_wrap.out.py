import torch
from torch.distributed.fsdp import fully_shard


class Policy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.vlm = torch.nn.Linear(4, 4)
        self.head = torch.nn.Linear(4, 4)


class Trainer:
    def __init__(self, strategy):
        self.strategy = strategy
        self.policy = None
        self.model = None

    def setup_model(self):
        self.policy = Policy()
        self.policy.vlm = self.policy.vlm.to("cpu")
        if hasattr(self.policy, "vlm"):
            for param in self.policy.vlm.parameters():
                param.requires_grad = False
        # just built, not yet wrapped: whole parameters under FSDP1 and FSDP2 alike
        total = sum(p.numel() for p in self.policy.parameters())
        print(f"{total:,}")
        if self.strategy == "fsdp":
            self._setup_fsdp()
        else:
            self.model = self.policy

    def setup_after_a_method(self):
        self.policy = Policy()
        self._setup_fsdp()  # a method of the instance may wrap it: marked
        # TODO(fsdp2-port): F2P011 p.numel of self.policy's parameters: FSDP1 gave flat 1-D shards here, FSDP2 gives each parameter's full shape; check what this selects (e.g. weight decay by ndim) and read the shapes from the unwrapped module if FSDP1's answer was intended
        return sum(p.numel() for p in self.policy.parameters())

    def setup_after_a_part_is_wrapped(self):
        self.policy = Policy()
        self.policy.head = fully_shard(self.policy.head)
        # TODO(fsdp2-port): F2P011 p.ndim of self.policy's parameters: FSDP1 gave flat 1-D shards here, FSDP2 gives each parameter's full shape; check what this selects (e.g. weight decay by ndim) and read the shapes from the unwrapped module if FSDP1's answer was intended
        return [p for p in self.policy.parameters() if p.ndim > 1]  # marked

    def setup_after_a_hand_over(self, wrap):
        self.policy = Policy()
        wrap(self)  # may rebind or shard self.policy: marked
        # TODO(fsdp2-port): F2P011 p.numel of self.policy's parameters: FSDP1 gave flat 1-D shards here, FSDP2 gives each parameter's full shape; check what this selects (e.g. weight decay by ndim) and read the shapes from the unwrapped module if FSDP1's answer was intended
        return sum(p.numel() for p in self.policy.parameters())

    def _setup_fsdp(self):
        self.model = fully_shard(self.policy)

    def report(self):
        # any method may run after _setup_fsdp: marked
        # TODO(fsdp2-port): F2P011 p.numel of self.policy's parameters: FSDP1 gave flat 1-D shards here, FSDP2 gives each parameter's full shape; check what this selects (e.g. weight decay by ndim) and read the shapes from the unwrapped module if FSDP1's answer was intended
        return sum(p.numel() for p in self.policy.parameters())
