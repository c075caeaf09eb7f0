# fixture: drop-fsdp1-branches
"""A one-armed FSDP1 type test whose models stay FSDP1 (a subclass of FSDP holds the run): it
is not deleted, and the FSDP1 internals behind it keep their markers (Hetu-Galvatron's
``fsdp_reduce_gradients``)."""

from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp._common_utils import TrainingState
from torch.distributed.fsdp._runtime_utils import _unshard


class Wrapper(FSDP):
    pass


def build(net):
    return FSDP(net)


def reduce_gradients(model):
    for m in model.modules():
        if isinstance(m, FSDP):
            m.training_state = TrainingState.FORWARD_BACKWARD
            _unshard(m, m._handles, m._streams["unshard"], m._streams["pre_unshard"])
