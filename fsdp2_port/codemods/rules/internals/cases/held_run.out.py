"""check_is_root may meet any model here and has no FSDP2 form: every model stays FSDP1, and
the calls that would take a form right on either stay as they are with them, marked."""
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler


def build(net):
    # TODO(fsdp2-port): F2P002 FSDP(...) left as is (its model stays FSDP1 because of F2P010 at line 21 (it may act on any model here))
    return FSDP(net)


def gather(model):
    # TODO(fsdp2-port): F2P010 summon_full_params: FSDP2 parameters are DTensors; read p.full_tensor(), or unshard()/reshard() the FSDPModule (note: in the compute dtype) (its model stays FSDP1: FSDP(...) at line 8)
    with FSDP.summon_full_params(model, writeback=False):
        return {k: v.clone() for k, v in model.state_dict().items()}


def scaler():
    # TODO(fsdp2-port): F2P010 ShardedGradScaler: with FSDP2 use torch.amp.GradScaler (check that the inf/NaN verdict is reduced across ranks) (its model stays FSDP1: FSDP(...) at line 8)
    return ShardedGradScaler()


def roots(model: FSDP):
    # TODO(fsdp2-port): F2P010 FSDP.fsdp_modules(m): use [x for x in m.modules() if isinstance(x, FSDPModule)] (its model stays FSDP1: FSDP(...) at line 8)
    return [m for m in FSDP.fsdp_modules(model) if m.check_is_root()]
