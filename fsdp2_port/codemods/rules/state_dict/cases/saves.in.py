"""What a migrated program saves: a gathering state dict inside a rank-0 branch (the gather
goes before it), an optimizer's own state dict (this rank's shards), save_pretrained (this
rank's shards; not with a state_dict of its own), a state dict per rank (right as it is)."""

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def save_all(states, path):
    torch.save(states, path)


def export(model, path, state=None):
    model.save_pretrained(path)
    model.save_pretrained(path, state_dict=state)


def main(model, path):
    model = FSDP(model, device_id=torch.device("cpu"))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    if dist.get_rank() == 0:
        torch.save(model.state_dict(), path)
        torch.save(optimizer.state_dict(), path + ".optim")
    torch.save(optimizer.state_dict(), f"{path}.{dist.get_rank()}")
    model.save_pretrained(path)
    save_all({"model": model.state_dict()}, path)
    export(model, path)


def save_on_rank_0(model, path):
    if dist.get_rank() != 0:
        return
    torch.save(model.state_dict(), path)


def save_unless_other_rank_without_fsdp(model, path, is_main, is_fsdp):
    if not is_main and not is_fsdp:  # an FSDP model goes on on every rank: no marker
        return
    torch.save(model.state_dict(), path)
