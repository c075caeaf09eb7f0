from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, StateDictType
from torch.distributed.fsdp import FullOptimStateDictConfig, FullStateDictConfig
from torch.distributed.fsdp import ShardedOptimStateDictConfig, ShardedStateDictConfig


def save_full(model, trainer):
    """A callee takes the state dicts: the settings stay, said with StateDictOptions."""
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, FullStateDictConfig(offload_to_cpu=True, rank0_only=True), FullOptimStateDictConfig(offload_to_cpu=True, rank0_only=True)):
        trainer.save_model("out")


def save_full_every_rank(model, trainer):
    config = FullStateDictConfig()
    optim_config = FullOptimStateDictConfig(offload_to_cpu=False)
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, config, optim_config):
        trainer.save_model("out")


def rebound(model, trainer):
    """One name, two configs: each read sees the assignment above it."""
    policy = FullStateDictConfig(offload_to_cpu=True, rank0_only=True)
    optim_policy = FullOptimStateDictConfig(offload_to_cpu=True, rank0_only=True)
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, policy, optim_policy):
        trainer.save_model("out")
    policy = ShardedStateDictConfig(offload_to_cpu=True)
    with FSDP.state_dict_type(model, StateDictType.SHARDED_STATE_DICT, state_dict_config=policy):
        trainer.save_model("sharded")


def pure_rebound(model, optimizer):
    """DPO's save: both blocks become DCP calls, both bindings go."""
    save_policy = FullStateDictConfig(offload_to_cpu=True, rank0_only=True)
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, state_dict_config=save_policy):
        policy_state_dict = model.state_dict()
    save_policy = FullOptimStateDictConfig(offload_to_cpu=True, rank0_only=True)
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, optim_state_dict_config=save_policy):
        optimizer_state_dict = FSDP.optim_state_dict(model, optimizer)
    return policy_state_dict, optimizer_state_dict


def persistent_sharded(model):
    FSDP.set_state_dict_type(
        model,
        state_dict_type=StateDictType.SHARDED_STATE_DICT,
        state_dict_config=ShardedStateDictConfig(offload_to_cpu=True),
    )
    return model.state_dict()


def persistent_sharded_on_device(model):
    FSDP.set_state_dict_type(model, StateDictType.SHARDED_STATE_DICT, ShardedStateDictConfig(), ShardedOptimStateDictConfig(offload_to_cpu=False))


def helper(model):
    return FSDP.state_dict_type(model, StateDictType.SHARDED_STATE_DICT, ShardedStateDictConfig(offload_to_cpu=True))


# FSDP1's default optimizer configs offload; one StateDictOptions cannot say it with the model's.
def default_optim_offloads(model):
    """SHARDED: the optimizer's own optim_options. FULL offloads on every rank, which no
    StateDictOptions says (offloaded FULL is rank 0's alone): FSDP1's words stay."""
    FSDP.set_state_dict_type(model, StateDictType.SHARDED_STATE_DICT, ShardedStateDictConfig())
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, FullStateDictConfig(offload_to_cpu=True, rank0_only=True)):
        model.save()


def read_twice(model, trainer):
    config = ShardedStateDictConfig(offload_to_cpu=True)
    with FSDP.state_dict_type(model, StateDictType.SHARDED_STATE_DICT, config):
        trainer.save_model(config)


def in_a_loop(models, trainer):
    for model in models:
        config = ShardedStateDictConfig(offload_to_cpu=True)
        config = ShardedStateDictConfig(offload_to_cpu=True)
        with FSDP.state_dict_type(model, StateDictType.SHARDED_STATE_DICT, config):
            trainer.save_model()


def dtensor_config(model):
    FSDP.set_state_dict_type(model, StateDictType.SHARDED_STATE_DICT, ShardedStateDictConfig(offload_to_cpu=True, _use_dtensor=True))


def run_time_flag(model, offload):
    FSDP.set_state_dict_type(model, StateDictType.SHARDED_STATE_DICT, ShardedStateDictConfig(offload_to_cpu=offload))
