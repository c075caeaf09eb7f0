"""What moved between torch releases, decided once, with ``packaging.version``.

Every switch on the torch release lives here: release comparisons, and the probes of the
installed torch where the release a feature came with is not pinned. Imports no torch: the
codemods read the import paths of a *target* release from here on machines that have no torch
at all (a probe imports it when called).
"""

from __future__ import annotations

import functools
from importlib import metadata

from packaging.version import Version

#: ``fully_shard`` and its policies live in ``torch.distributed.fsdp`` from this release on.
FSDP2_PUBLIC = Version("2.6")
#: ...and in ``torch.distributed._composable.fsdp`` from this one up to the public release.
FSDP2_COMPOSABLE = Version("2.4")
#: Before this release FSDP2 on gloo silently scales gradients by the world size.
FSDP2_GLOO_CORRECT = Version("2.9")


def release(version: str | Version) -> Version:
    """``2.13.0+cpu`` -> ``2.13.0``: local tags and pre-releases do not move APIs."""
    return Version(Version(str(version)).base_version)


def installed_torch() -> Version:
    """The installed torch release, read from its metadata (torch is not imported)."""
    return release(metadata.version("torch"))


def fully_shard_module(torch_version: str | Version) -> str:
    """The module that exports ``fully_shard``, ``FSDPModule`` and the FSDP2 policies."""
    v = release(torch_version)
    if v >= FSDP2_PUBLIC:
        return "torch.distributed.fsdp"
    if v >= FSDP2_COMPOSABLE:
        return "torch.distributed._composable.fsdp"
    raise ValueError(f"FSDP2 (fully_shard) needs torch >= {FSDP2_COMPOSABLE}, not {torch_version}")


@functools.cache
def mesh_knows_its_root() -> bool:
    """Whether the installed torch's ``DeviceMesh`` knows the mesh it was sliced from
    (``torch_internals`` entry ``device_mesh_root``); older releases keep that in torch's mesh
    environment (entry ``mesh_resources``, deprecated where the method exists).

    A probe of the installed torch, not a release number: the release the method came with is
    not pinned here. Torch is imported when this is first called, not before.
    """
    from fsdp2_port.fsdp1 import torch_internals

    return torch_internals.has("device_mesh_root")


#: The oldest torch the runtime parts (optimizer, clip, verify, compat) run on: public FSDP2.
TORCH_REQUIRED = FSDP2_PUBLIC


def require_torch() -> Version:
    """The installed torch release; ImportError, in one line, when it is missing or too old.

    Called before the runtime parts import torch: the project does not declare torch (the
    user's own build must not be replaced), so this is where a missing one is reported.
    """
    try:
        found = installed_torch()
    except metadata.PackageNotFoundError:
        raise ImportError(
            f"fsdp2-port's runtime needs torch >= {TORCH_REQUIRED}, and none is installed: "
            f"pip install 'torch>={TORCH_REQUIRED}' (or `pip install fsdp2-port[torch]`); "
            "`fsdp2-port migrate` runs without it"
        ) from None
    if found < TORCH_REQUIRED:
        raise ImportError(
            f"fsdp2-port's runtime needs torch >= {TORCH_REQUIRED} (FSDP2's fully_shard), "
            f"found {found}"
        )
    return found
