"""Settings shared by every rule of one run (picklable: they travel to worker processes)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Options:
    #: Module that exports ``fully_shard`` and the FSDP2 policies for the target torch.
    fsdp2_module: str = "torch.distributed.fsdp"
    #: False: emitted code calls torch only, never ``fsdp2_port``.
    runtime_dependency: bool = True

    @classmethod
    def for_torch(cls, target_torch: str, *, runtime_dependency: bool = True) -> Options:
        """Options for a target torch release; raises ValueError below 2.4."""
        from fsdp2_port.versions import fully_shard_module

        return cls(fully_shard_module(target_torch), runtime_dependency)
