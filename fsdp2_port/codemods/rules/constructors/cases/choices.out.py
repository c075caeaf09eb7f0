
import torch
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor

import fs_init
import fsdp2_port


def setup_fsdp_sync(model, args):
    process_group = fs_init.get_data_parallel_group()
    param_dtype = {
        "fp32": torch.float,
        "bf16": torch.bfloat16,
    }[args.precision]
    mesh = DeviceMesh.from_group(process_group, "cuda")
    for submodule in reversed(list(model.modules())):
        if submodule is not model and isinstance(submodule, torch.nn.modules.batchnorm._BatchNorm):
            for tensor in [*submodule.parameters(), *submodule.buffers()]:  # device_id, sync_module_states
                if not isinstance(tensor, DTensor):  # not sharded yet
                    tensor.data = tensor.to(torch.cuda.current_device())
                    torch.distributed.broadcast(
                        tensor.detach(),
                        group=mesh.get_group(),
                        group_src=0,
                    )
            fully_shard(
                submodule,
                mesh=mesh,
                reshard_after_forward={"fsdp": True, "sdp": False}[args.data_parallel],
                mp_policy=MixedPrecisionPolicy(
                    param_dtype=torch.float32,
                    output_dtype=param_dtype,
                ),
            )
        elif submodule is not model and (submodule in model.get_fsdp_wrap_module_list()):
            for tensor in [*submodule.parameters(), *submodule.buffers()]:  # device_id, sync_module_states
                if not isinstance(tensor, DTensor):  # not sharded yet
                    tensor.data = tensor.to(torch.cuda.current_device())
                    torch.distributed.broadcast(
                        tensor.detach(),
                        group=mesh.get_group(),
                        group_src=0,
                    )
            fully_shard(
                submodule,
                mesh=mesh,
                reshard_after_forward={"fsdp": True, "sdp": False}[args.data_parallel],
                mp_policy=MixedPrecisionPolicy(
                    param_dtype=param_dtype,
                    reduce_dtype=torch.float32,
                    cast_forward_inputs=False,
                ),
            )
    for tensor in [*model.parameters(), *model.buffers()]:  # device_id, sync_module_states
        if not isinstance(tensor, DTensor):  # not sharded yet
            tensor.data = tensor.to(torch.cuda.current_device())
            torch.distributed.broadcast(tensor.detach(), group=mesh.get_group(), group_src=0)
    # limit_all_gathers: dropped; FSDP2 always keeps at most two all-gathers in flight
    model = fully_shard(
        model,
        mesh=mesh,
        reshard_after_forward={"fsdp": True, "sdp": False}[args.data_parallel],
        mp_policy=MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32),
    )
    torch.cuda.synchronize()
    return model


def by_function(model, is_block, shard):
    param_dtype = next(model.parameters()).dtype
    for submodule in reversed(list(model.modules())):
        if submodule is not model and isinstance(submodule, torch.nn.modules.batchnorm._BatchNorm):
            fully_shard(
                submodule,
                reshard_after_forward=True if shard else False,
                mp_policy=MixedPrecisionPolicy(
                    param_dtype=torch.float32,
                    output_dtype=param_dtype,
                ),
            )
        elif submodule is not model and is_block(submodule):
            fully_shard(
                submodule,
                reshard_after_forward=True if shard else False,
                mp_policy=MixedPrecisionPolicy(param_dtype=param_dtype, cast_forward_inputs=False),
            )
    return fully_shard(
        model,
        reshard_after_forward=True if shard else False,
        mp_policy=MixedPrecisionPolicy(param_dtype=param_dtype),
    )


def no_device_type(model, group):
    mesh = fsdp2_port.mesh_like_fsdp1(process_group=group)
    return fully_shard(model, mesh=mesh)
