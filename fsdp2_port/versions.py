"""What moved between torch releases, decided once, with ``packaging.version``.

Every switch of the runtime on the installed torch release lives here: release comparisons,
and probes where the release a feature came with is not pinned. Imports no torch (a probe
imports it when called). Where a *target* release keeps FSDP2 is the codemod's own table
(``fsdp2_port.codemods.options``: the codemods import nothing from here).
"""

from __future__ import annotations

import functools
from importlib import metadata

from packaging.version import Version

#: Before this release FSDP2 on gloo silently scales gradients by the world size.
FSDP2_GLOO_CORRECT = Version("2.9")


def release(version: str | Version) -> Version:
    """``2.13.0+cpu`` -> ``2.13.0``: local tags and pre-releases do not move APIs."""
    return Version(Version(str(version)).base_version)


def installed_torch() -> Version:
    """The installed torch release, read from its metadata (torch is not imported)."""
    return release(metadata.version("torch"))


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


#: The oldest torch the runtime parts (optimizer, clip, verify, compat) run on: the first with
#: ``fully_shard`` in ``torch.distributed.fsdp``.
TORCH_REQUIRED = Version("2.6")


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
