"""Settings shared by every rule of one run (picklable: they travel to worker processes), and
where the target torch release keeps FSDP2."""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import Version

#: ``fully_shard`` and its policies live in ``torch.distributed.fsdp`` from this release on...
FSDP2_PUBLIC = Version("2.6")
#: ...and in ``torch.distributed._composable.fsdp`` from this one up to the public release.
FSDP2_COMPOSABLE = Version("2.4")


def fully_shard_module(torch_version: str | Version) -> str:
    """The module of a torch release that exports ``fully_shard``, ``FSDPModule`` and the
    FSDP2 policies (local tags and pre-releases do not move APIs)."""
    v = Version(Version(str(torch_version)).base_version)
    if v >= FSDP2_PUBLIC:
        return "torch.distributed.fsdp"
    if v >= FSDP2_COMPOSABLE:
        return "torch.distributed._composable.fsdp"
    raise ValueError(f"FSDP2 (fully_shard) needs torch >= {FSDP2_COMPOSABLE}, not {torch_version}")


@dataclass(frozen=True)
class Options:
    #: Module that exports ``fully_shard`` and the FSDP2 policies for the target torch.
    fsdp2_module: str = "torch.distributed.fsdp"
    #: False: emitted code calls torch only, never ``fsdp2_port``.
    runtime_dependency: bool = True
    #: True: the FSDP1 branch of a dispatch that also has an FSDP2 branch is deleted.
    drop_fsdp1_branches: bool = False
    #: True: the files given are the whole program, no code outside them imports their
    #: module-level names (``visibility``).
    whole_program: bool = False
    #: True: no decision rests on a name (``assumed``): each takes its conservative answer.
    strict: bool = False

    @classmethod
    def for_torch(
        cls,
        target_torch: str,
        *,
        runtime_dependency: bool = True,
        drop_fsdp1_branches: bool = False,
        whole_program: bool = False,
        strict: bool = False,
    ) -> Options:
        """Options for a target torch release; raises ValueError below 2.4."""
        return cls(
            fully_shard_module(target_torch),
            runtime_dependency,
            drop_fsdp1_branches,
            whole_program,
            strict,
        )
