"""torch's clip on a migrated model's parameters is marked (its norm becomes the global one);
in the else of ``isinstance(model, FSDP)`` (krayF1sh/ecot-prm's dispatch), no sharded model
gets there, before the migration or after it (the test migrates with the model): nothing to
mark."""

import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
import fsdp2_port
from torch.distributed.fsdp import fully_shard


def step(net, optimizer, max_norm):
    model = fully_shard(net)
    # TODO(fsdp2-port): F2P006 torch's clip_grad_norm_ on model's parameters: on FSDP1 shards it clipped each rank by its own shards' norm (a different coefficient per rank); on FSDP2's DTensors the norm is global. The migrated run clips by the true norm: expect other grad norms and updates than the FSDP1 run logged
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return norm


def dispatch(net, max_norm):
    model = fully_shard(net)
    if isinstance(model, FSDP):
        return fsdp2_port.clip_grad_norm_(model.parameters(), max_norm)
    else:
        return torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
