from torch.distributed.fsdp import StateDictType
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
)
from torch.distributed.fsdp import FullStateDictConfig
from torch.distributed.fsdp import ShardedStateDictConfig
import fsdp2_port


def save_full(model, trainer):
    """A callee takes the state dicts: the settings stay, said with StateDictOptions."""
    with fsdp2_port.state_dict_type(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)):
        trainer.save_model("out")


def save_full_every_rank(model, trainer):
    with fsdp2_port.state_dict_type(model, options=StateDictOptions(full_state_dict=True)):
        trainer.save_model("out")


def rebound(model, trainer):
    """One name, two configs: each read sees the assignment above it."""
    with fsdp2_port.state_dict_type(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)):
        trainer.save_model("out")
    with fsdp2_port.state_dict_type(model, options=StateDictOptions(cpu_offload=True)):
        trainer.save_model("sharded")


def pure_rebound(model, optimizer):
    """DPO's save: both blocks become DCP calls, both bindings go."""
    policy_state_dict = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    optimizer_state_dict = get_optimizer_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return policy_state_dict, optimizer_state_dict


def persistent_sharded(model):
    fsdp2_port.set_state_dict_type(
        model, options=StateDictOptions(cpu_offload=True),
    )
    return model.state_dict()


def persistent_sharded_on_device(model):
    fsdp2_port.set_state_dict_type(model, options=StateDictOptions())


def helper(model):
    return fsdp2_port.state_dict_type(model, options=StateDictOptions(cpu_offload=True))


# FSDP1's default optimizer configs offload; one StateDictOptions cannot say it with the model's.
def default_optim_offloads(model):
    """SHARDED: the optimizer's own optim_options. FULL offloads on every rank, which no
    StateDictOptions says (offloaded FULL is rank 0's alone): FSDP1's words stay."""
    fsdp2_port.set_state_dict_type(model, options=StateDictOptions(), optim_options=StateDictOptions(cpu_offload=True))
    with fsdp2_port.state_dict_type(model, StateDictType.FULL_STATE_DICT, FullStateDictConfig(offload_to_cpu=True, rank0_only=True)):
        model.save()


def read_twice(model, trainer):
    config = ShardedStateDictConfig(offload_to_cpu=True)
    with fsdp2_port.state_dict_type(model, StateDictType.SHARDED_STATE_DICT, config):
        trainer.save_model(config)


def in_a_loop(models, trainer):
    for model in models:
        config = ShardedStateDictConfig(offload_to_cpu=True)
        config = ShardedStateDictConfig(offload_to_cpu=True)
        with fsdp2_port.state_dict_type(model, StateDictType.SHARDED_STATE_DICT, config):
            trainer.save_model()


def dtensor_config(model):
    fsdp2_port.set_state_dict_type(model, StateDictType.SHARDED_STATE_DICT, ShardedStateDictConfig(offload_to_cpu=True, _use_dtensor=True))


def run_time_flag(model, offload):
    fsdp2_port.set_state_dict_type(model, StateDictType.SHARDED_STATE_DICT, ShardedStateDictConfig(offload_to_cpu=offload))
