"""The model stays FSDP1 (LOCAL_STATE_DICT): SpecForge's optimizer becomes compat's."""

# TODO(fsdp2-port): F2P009 BF16Optimizer imported from fsdp2_port.compat instead of specforge: on FSDP1 it clips by the true global norm (SpecForge's clipped each rank's shard by its own), so wherever the clip acts the run differs from SpecForge's: review
from fsdp2_port.compat import BF16Optimizer
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, StateDictType


def train(net):
    # TODO(fsdp2-port): F2P002 FSDP(...) left as is (its model stays FSDP1 because of F2P008 at line 10)
    model = FSDP(net)
    optimizer = BF16Optimizer(model, lr=1e-4)
    # TODO(fsdp2-port): F2P008 LOCAL_STATE_DICT has no FSDP2 form: save the sharded state dict with DCP instead
    with FSDP.state_dict_type(model, StateDictType.LOCAL_STATE_DICT):
        local = model.state_dict()
    return optimizer, local
