"""Values only the run knows: the plain form reads them with fsdp2_port's readers."""

import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import CPUOffload, MixedPrecision, ShardingStrategy

from trainer.config import get_wrap_policy, precision_of


def worker(model, cfg, device_mesh):
    """verl's shape: every value is computed elsewhere."""
    mixed_precision = precision_of(cfg)
    auto_wrap_policy = get_wrap_policy(model, cfg.wrap)
    cpu_offload = cfg.offload_policy()
    return FSDP(
        model,
        param_init_fn=cfg.init_fn,
        auto_wrap_policy=auto_wrap_policy,
        device_id=cfg.device(),
        sharding_strategy=getattr(ShardingStrategy, cfg.strategy),
        mixed_precision=mixed_precision,
        cpu_offload=cpu_offload,
        sync_module_states=True,
        device_mesh=device_mesh,
    )


def hybrid(model, block):
    """HYBRID_SHARD without a mesh: FSDP1's default groups, built at run time."""
    return FSDP(model, sharding_strategy=ShardingStrategy.HYBRID_SHARD, use_orig_params=True)


def offload_flag(model, offload):
    """A flag only the run knows."""
    return FSDP(model, cpu_offload=offload)


def offload_by_config(model, config):
    """CPUOffload(offload_params=<a run-time flag>) is plain: the flag chooses the policy."""
    cpu_offload = CPUOffload(offload_params=config.fsdp.param_offload)
    return FSDP(model, cpu_offload=cpu_offload)


def offload_by_call(model, config):
    """A flag computed by a call is evaluated once, as FSDP1 evaluated it."""
    return FSDP(model, cpu_offload=CPUOffload(offload_params=config.get("offload")))


def shared_computed_dtype(model, head, get_dtype):
    """A MixedPrecision two constructors share, with a dtype computed by a call: FSDP1 called
    it once, so both read the binding at run time."""
    mp = MixedPrecision(param_dtype=get_dtype())
    model = FSDP(model, mixed_precision=mp)
    head = FSDP(head, mixed_precision=mp)
    return model, head


def offload_chosen(model, config):
    """verl's sft trainer: offload chosen in branches becomes the policy it means there."""
    if not config.cpu_offload:
        cpu_offload = None
    else:
        cpu_offload = CPUOffload(offload_params=config.offload_params)
    return FSDP(model, cpu_offload=cpu_offload)


def mesh_sync(model, device_mesh):
    """sync_module_states within the caller's mesh: a broadcast over each of its groups."""
    return FSDP(model, device_mesh=device_mesh, sync_module_states=True)


def mesh_and_group(model, device_mesh, group):
    """FSDP1 refuses both: so does fully_shard_like_fsdp1."""
    return FSDP(model, device_mesh=device_mesh, process_group=group)


def verl_actor(actor_module, fsdp_config, is_ref, get_fsdp_wrap_policy):
    """verl's actor: dtypes from a config, mixed precision dropped for the reference model."""
    mixed_precision_config = fsdp_config.get("mixed_precision", None)
    if mixed_precision_config is not None:
        param_dtype = mixed_precision_config.param_dtype
        buffer_dtype = mixed_precision_config.buffer_dtype
    else:
        param_dtype = torch.bfloat16
        buffer_dtype = torch.float32
    mixed_precision = MixedPrecision(
        param_dtype=param_dtype, reduce_dtype=torch.float32, buffer_dtype=buffer_dtype
    )
    if is_ref:
        mixed_precision = None
    auto_wrap_policy = get_fsdp_wrap_policy(actor_module)
    actor_module_fsdp = FSDP(
        actor_module,
        auto_wrap_policy=auto_wrap_policy,
        mixed_precision=mixed_precision,
    )
    return actor_module_fsdp


def chain(model, args):
    """fsdp_qlora's chain, without the hybrids, on CUDA: each branch binds the pair it
    means, its mesh built as FSDP1 built its group."""
    if args["sharding_strategy"] == "full_shard":
        sharding_strategy = ShardingStrategy.FULL_SHARD
    elif args["sharding_strategy"] == "shard_grad_op":
        sharding_strategy = ShardingStrategy.SHARD_GRAD_OP
    elif args["sharding_strategy"] == "ddp":
        sharding_strategy = ShardingStrategy.NO_SHARD
    else:
        raise ValueError("Invalid FSDP sharding strategy")
    model = FSDP(
        model,
        sharding_strategy=sharding_strategy,
        device_id=torch.cuda.current_device(),
        sync_module_states=args["low_memory"],
    )
    return model


def no_shard_on_cuda(model):
    """NO_SHARD with the device written: replicas of one rank, as init_device_mesh."""
    return FSDP(model, sharding_strategy=ShardingStrategy.NO_SHARD, device_id=torch.device("cuda"))


def hybrid_on_cuda(model):
    """HYBRID_SHARD: its groups (a node's devices) only the run knows."""
    return FSDP(model, sharding_strategy=ShardingStrategy.HYBRID_SHARD, device_id=torch.device("cuda"))
