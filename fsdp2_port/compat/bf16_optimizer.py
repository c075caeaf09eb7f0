"""SpecForge's ``BF16Optimizer`` for FSDP1, clipping by the true global norm.

The original clipped each rank's gradient *shard* by its own norm (about 1/sqrt(world) of
the real one, a different coefficient on every rank). Here the norm of all shards is
completed by one all-reduce, with FSDP1's layout found from the model itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch.distributed as dist
from torch import Tensor, nn

from fsdp2_port.compat.fsdp1_layout import copies_in, refuse_dtensors, shard_groups
from fsdp2_port.train.master_weights import MasterWeightOptimizer


class BF16Optimizer(MasterWeightOptimizer):
    """Drop-in for ``specforge.optimizer.BF16Optimizer`` on an FSDP1 model.

    ``model`` is the FSDP1 root or an inner module whose parameters are FSDP1 views; its
    trainable parameters get fp32 masters. ``step()`` returns the pre-clip global norm.
    On an FSDP2 model (DTensor parameters) it *is* ``fsdp2_port.BF16Optimizer`` (same
    constructor and API): right whichever the model turns out to be, which is what the codemod
    needs where it cannot tell (an optimizer built on an inner module of a wrapped model).
    """

    def __new__(cls, model: object = None, *args: object, **kwargs: object) -> BF16Optimizer:
        if cls is BF16Optimizer and _has_dtensors(model):
            from fsdp2_port.train.bf16_optimizer import BF16Optimizer as OnDTensors

            return OnDTensors(model, *args, **kwargs)  # type: ignore[arg-type,return-value]
        return super().__new__(cls)

    def _trainable(self, model: nn.Module, offload_master: bool) -> list[tuple[str, nn.Parameter]]:
        self.model = model
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        refuse_dtensors(
            (p for _, p in named), "fsdp2_port.compat.BF16Optimizer", "fsdp2_port.BF16Optimizer"
        )
        self._shard_groups = shard_groups(model, [p for _, p in named])
        return named

    def _norm_copies(self, group: dist.ProcessGroup) -> list[int]:
        return [copies_in(group, s) for s in self._shard_groups]

    def _unpack(self, masters: Any, optim: dict[str, Any]) -> tuple[list[Tensor], dict[str, Any]]:
        """SpecForge's positional form as it is; the name-keyed one (``fsdp2_port``'s, what
        ``fsdp2-port convert-checkpoint`` writes) cut into this rank's pieces, a collective."""
        if isinstance(masters, Mapping):
            from fsdp2_port.compat.transition import rank_pieces

            return rank_pieces(self, masters, optim)
        for i, (saved, m) in enumerate(zip(masters, self.fp32_params)):
            if isinstance(saved, Tensor) and saved.dim() == m.dim() == 1 and saved.shape != m.shape:
                raise ValueError(
                    f"master {i} ({self.param_names[i]!r}): the checkpoint holds a piece of "
                    f"{saved.numel()} elements, this rank's is {m.numel()}: another rank's FSDP1 "
                    "pieces (SpecForge saves training_state.pt on rank 0 only). Give every rank "
                    "its own file, or convert the files (fsdp2-port convert-checkpoint; "
                    "--rebuild-missing for rank 0's alone) and load the converted state"
                )
        return super()._unpack(masters, optim)


def _has_dtensors(model: object) -> bool:
    from torch.distributed.tensor import DTensor

    parameters = model.parameters() if isinstance(model, nn.Module) else ()
    return any(isinstance(p, DTensor) for p in parameters)
