"""check_is_root may meet any model here and has no FSDP2 form: every model stays FSDP1, and
the calls that would take a form right on either stay as they are with them, unmarked while
no model of the run migrates (the constructor's marker and check_is_root's say why)."""
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler


def build(net):
    return FSDP(net)


def gather(model):
    with FSDP.summon_full_params(model, writeback=False):
        return {k: v.clone() for k, v in model.state_dict().items()}


def scaler():
    return ShardedGradScaler()


def roots(model: FSDP):
    return [m for m in FSDP.fsdp_modules(model) if m.check_is_root()]
