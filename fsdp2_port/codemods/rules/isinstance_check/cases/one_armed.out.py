# fixture: drop-fsdp1-branches
"""A one-armed FSDP1 type test (no ``else``) with --drop-fsdp1-branches: no FSDP2 model enters
it, so FSDP1 code no rule rewrites behind it goes with it once the run's models migrate, with a
loop over modules that holds nothing else (Wan's ``free_model``); code the rules rewrite keeps
the test, as ``FSDPModule``."""

import fsdp2_port
from torch.distributed.fsdp import FSDPModule, fully_shard


def build(net):
    return fully_shard(net)


def free_model(model):
    # TODO(fsdp2-port): F2P005 FSDP1 type test and the FSDP1 code behind it deleted (--drop-fsdp1-branches): no FSDP2 model enters it
    del model


def flat_numel(model):
    # TODO(fsdp2-port): F2P005 FSDP1 type test and the FSDP1 code behind it deleted (--drop-fsdp1-branches): no FSDP2 model enters it
    return sum(p.numel() for p in model.parameters())


def summon(model):
    if isinstance(model, FSDPModule):
        with fsdp2_port.summon_full_params(model):
            print(model)


def only(model):
    # TODO(fsdp2-port): F2P005 FSDP1 type test and the FSDP1 code behind it deleted (--drop-fsdp1-branches): no FSDP2 model enters it
    pass


def free_all(model):
    # TODO(fsdp2-port): F2P005 FSDP1 type test and the FSDP1 code behind it deleted (--drop-fsdp1-branches): no FSDP2 model enters it
    pass
