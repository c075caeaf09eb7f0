# fixture: drop-fsdp1-branches
"""A one-armed FSDP1 type test (no ``else``) with --drop-fsdp1-branches: no FSDP2 model enters
it, so FSDP1 code no rule rewrites behind it goes with it once the run's models migrate, with a
loop over modules that holds nothing else (Wan's ``free_model``); code the rules rewrite keeps
the test, as ``FSDPModule``."""

from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def build(net):
    return FSDP(net)


def free_model(model):
    for m in model.modules():
        if isinstance(m, FSDP):
            m._handle.flat_param.data = m._handle.flat_param.data.new_empty(0)
    del model


def flat_numel(model):
    if isinstance(model, FSDP):
        return model._handle.flat_param.numel()
    return sum(p.numel() for p in model.parameters())


def summon(model):
    if isinstance(model, FSDP):
        with FSDP.summon_full_params(model):
            print(model)


def only(model):
    if isinstance(model, FSDP):
        print(model._handle)


def free_all(model):
    for m in model.modules():
        if isinstance(m, FSDP):
            m._handle.flat_param.data = m._handle.flat_param.data.new_empty(0)
