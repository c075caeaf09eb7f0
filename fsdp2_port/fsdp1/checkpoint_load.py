"""Reading what an FSDP1 rank saved without its process group and without running pickled code.

``load_offline(path)`` is ``torch.load`` of one file, its ``ShardedTensor`` values as
``OfflineShardedTensor``. Unless ``TRUSTED`` is set (``convert_checkpoint(trust_pickle=True)``,
``--trust-pickle``), the pickle builds only what torch's weights-only loading builds and the
parts of FSDP1's and DCP's state conversion reads; ``check_pickle`` / ``check_saved`` refuse a
DCP pickle that names anything else. ``rank_files``: the per-rank files ``SRC`` names.
"""

from __future__ import annotations

import argparse
import contextvars
import functools
import io
import math
import pathlib
import pickle
import types
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from fsdp2_port.fsdp1 import torch_internals
from fsdp2_port.fsdp1.checkpoint_formats import ConversionError

# -- reading per-rank files without a process group -----------------------------------------


@dataclass
class OfflineShardedTensor:
    """A pickled FSDP1 ``ShardedTensor``, read without a process group: its global size and
    this rank's shards, each as ``(offsets, tensor)``."""

    size: torch.Size
    shards: list[tuple[list[int], Tensor]]
    world_size: int


def _rebuild_offline(func: Any, new_type: type, args: Any, state: Any) -> Any:
    if _dotted(new_type) == _SHARDED_TENSOR:
        local_shards, metadata, pg_state = state[0], state[1], state[2]
        return OfflineShardedTensor(
            torch.Size(metadata.size),
            [(list(s.metadata.shard_offsets), s.tensor) for s in local_shards],
            int(pg_state.local_world_size),  # its process group: one replica under HSDP
        )
    if isinstance(new_type, type) and issubclass(new_type, _Inert):
        return new_type()
    return torch_internals.load("rebuild_from_type_v2")(func, new_type, args, state)


def _rebuild_tensor_offline(storage: Any, storage_offset: int, size: Any, *args: Any) -> Any:
    """A tensor; one whose storage FSDP1 had freed (0 bytes) comes back empty. An fp32 FSDP1
    flat parameter is its own master, and pickling it pickles the views into its unsharded
    storage with it: ``torch.load`` fails on them ("Trying to resize storage that is not
    resizable"). Nothing converted reads them; a master that came back empty would not fit
    its parameter and be refused."""
    with warnings.catch_warnings():  # torch.load hands it a TypedStorage, deprecated
        warnings.filterwarnings("ignore", "TypedStorage is deprecated", UserWarning)
        freed = storage.nbytes() == 0
    if freed and math.prod(size) > 0:
        return torch.empty(0, dtype=storage.dtype)
    rebuild = torch_internals.load("rebuild_tensor_v2")
    return rebuild(storage, storage_offset, size, *args)


# -- loading without running code -------------------------------------------------------------
#
# A pickle names functions and classes that unpickling calls: a checkpoint from someone else
# can name os.system. Unless the caller trusts it (``--trust-pickle``), a checkpoint builds
# only what torch's own weights-only loading builds and the pieces of FSDP1's ShardedTensor
# and of DCP's metadata that conversion reads (``_allowed``). Anything else it names becomes
# an inert stand-in that calls nothing: a checkpoint of these formats may carry such objects
# where conversion never looks (an fp32 flat parameter pickles the modules it came from), and
# one that conversion would read is refused. DCP's own pickles (its metadata, its non-tensor
# items) are checked strictly, every name allowed, before torch unpickles them.

#: Whether loads trust the pickle; ``convert_checkpoint`` sets it for one conversion.
TRUSTED: contextvars.ContextVar[bool] = contextvars.ContextVar("trust_pickle", default=False)
_SHARDED_TENSOR = ".".join((torch_internals.ENTRY_POINTS["sharded_tensor"].module, "ShardedTensor"))
_TRUST_HINT = "pass --trust-pickle to load it anyway, only for a checkpoint you trust"


class _Inert:
    """What a name outside ``_allowed`` unpickles to: a class that builds nothing and takes
    whatever unpickling hands it. ``name``: the dotted name the pickle asked for."""

    name = ""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        return object.__new__(cls)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        pass

    def __setitem__(self, key: Any, value: Any) -> None:
        pass

    def append(self, item: Any) -> None:
        pass

    def extend(self, items: Any) -> None:
        pass


@functools.cache
def _inert(name: str) -> type[_Inert]:
    return type(name.rpartition(".")[2] or "inert", (_Inert,), {"name": name})


def _dotted(value: Any) -> str:
    if isinstance(value, type) and issubclass(value, _Inert):
        return value.name
    module = getattr(value, "__module__", None) or ""
    return f"{module}.{getattr(value, '__qualname__', '')}"


@functools.cache
def _allowed() -> dict[str, Any]:
    """Dotted name -> what a pickle not trusted may build: what torch's weights-only loading
    builds, the parts of a ShardedTensor conversion reads (not the tensor itself: see
    ``_rebuild_offline``), and DCP's metadata classes."""
    from torch.distributed.checkpoint import metadata

    allowed = dict(torch_internals.call("weights_only_globals"))
    allowed.update(
        [
            _entry("sharded_tensor_pg_state"),
            _entry("sharded_tensor_shard"),
            _entry("shard_metadata"),
            _entry("sharded_tensor_metadata"),
            _entry("dcp_storage_info"),
            _entry("dcp_memory_format_encoding"),
        ]
    )
    for name in (
        "Metadata",
        "MetadataIndex",
        "StorageMeta",
        "TensorProperties",
        "TensorStorageMetadata",
        "BytesStorageMetadata",
        "ChunkStorageMetadata",
    ):
        allowed[f"{metadata.__name__}.{name}"] = getattr(metadata, name)
    # SpecForge saves its command line (``"args": args``) beside the state: a bag of
    # attributes, built without running code (``__new__``, then its ``__dict__``)
    allowed["argparse.Namespace"] = argparse.Namespace
    allowed["pathlib.PosixPath"] = pathlib.PosixPath
    allowed["pathlib.PurePosixPath"] = pathlib.PurePosixPath
    allowed["builtins.frozenset"] = frozenset
    allowed["builtins.getattr"] = _getattr
    for key, replacement in (
        ("rebuild_from_type_v2", _rebuild_offline),
        ("rebuild_tensor_v2", _rebuild_tensor_offline),
    ):
        entry = torch_internals.ENTRY_POINTS[key]
        allowed[f"{entry.module}.{entry.name}"] = replacement
    return allowed


def _entry(key: str) -> tuple[str, Any]:
    """``(dotted name, object)`` of a torch_internals entry."""
    entry = torch_internals.ENTRY_POINTS[key]
    return f"{entry.module}.{entry.name}", torch_internals.load(key)


def _getattr(owner: Any, name: str) -> Any:
    """``getattr`` as a pickle uses it (a nested class): only for an allowed name."""
    dotted = f"{_dotted(owner)}.{name}"
    return _allowed().get(dotted, _inert(dotted))


class _OfflineUnpickler(pickle.Unpickler):
    """``mode``: "trusted" (Python's unpickler; only the two rebuild functions replaced),
    "inert" (names outside ``_allowed`` become ``_Inert``) or "strict" (they are refused)."""

    mode = "inert"
    source = ""

    def find_class(self, module: str, name: str) -> Any:
        module = "builtins" if module == "__builtin__" else module
        dotted = f"{module}.{name}"
        if self.mode == "trusted":
            for key, replacement in (
                ("rebuild_from_type_v2", _rebuild_offline),
                ("rebuild_tensor_v2", _rebuild_tensor_offline),
            ):
                entry = torch_internals.ENTRY_POINTS[key]
                if (module, name) == (entry.module, entry.name):
                    return replacement
            return super().find_class(module, name)
        found = _allowed().get(dotted)
        if found is not None:
            return found
        if self.mode == "strict":
            raise ConversionError(
                f"{self.source}: refused: its pickle names {dotted}, which a checkpoint of "
                f"these formats never holds and which could run code ({_TRUST_HINT})"
            )
        return _inert(dotted)


@functools.cache
def _pickle_module(mode: str, source: str = "") -> types.ModuleType:
    """A module ``torch.load`` takes as ``pickle_module``: ``_OfflineUnpickler`` in ``mode``
    for the data and for every header a legacy file pickles."""
    unpickler = type("Unpickler", (_OfflineUnpickler,), {"mode": mode, "source": source})
    module = types.ModuleType(f"fsdp2_port_offline_pickle_{mode}")
    module.Unpickler = unpickler  # type: ignore[attr-defined]
    module.load = lambda file, **kwargs: unpickler(file, **kwargs).load()  # type: ignore[attr-defined]
    return module


def _refuse_inert(value: Any, path: str | Path) -> None:
    """Raise when a stand-in (``_Inert``) sits where conversion reads: in the dicts, lists,
    tuples and sets of the loaded value (not inside tensors)."""
    stack = [value]
    while stack:
        item = stack.pop()
        stand_in = type(item) if isinstance(item, _Inert) else item
        if isinstance(stand_in, type) and issubclass(stand_in, _Inert):
            raise ConversionError(
                f"{path}: refused: it holds a {stand_in.name} object, which a checkpoint of "
                f"these formats never holds and whose loading could run code ({_TRUST_HINT})"
            )
        if isinstance(item, dict):
            stack += [*item.keys(), *item.values()]
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack += list(item)


def load_offline(path: str | Path, *, trust_pickle: bool | None = None) -> Any:
    """``torch.load`` of a file written by an FSDP1 rank; ``ShardedTensor`` values come back
    as ``OfflineShardedTensor`` (loading them as torch does needs the job's process group).
    Nothing in the file runs unless ``trust_pickle`` (None: as ``convert_checkpoint`` was
    told); see above."""
    trusted = TRUSTED.get() if trust_pickle is None else trust_pickle
    try:
        loaded = torch.load(
            path,
            map_location="cpu",
            weights_only=False,
            pickle_module=_pickle_module("trusted" if trusted else "inert"),
        )
    except (FileNotFoundError, ConversionError):
        raise
    except Exception as e:
        raise ConversionError(f"cannot read {path}: {type(e).__name__}: {e}") from e
    if not trusted:
        _refuse_inert(loaded, path)
    return loaded


def check_pickle(data: bytes, source: str) -> None:
    """Refuse (``ConversionError``) a pickle that names anything outside ``_allowed``."""
    try:
        _pickle_module("strict", source).Unpickler(io.BytesIO(data)).load()
    except ConversionError:
        raise
    except Exception as e:
        raise ConversionError(f"cannot read {source}: {type(e).__name__}: {e}") from e


def check_saved(data: bytes, source: str) -> None:
    """Refuse a ``torch.save`` blob whose pickle names anything outside ``_allowed``."""
    try:
        torch.load(
            io.BytesIO(data), weights_only=False, pickle_module=_pickle_module("strict", source)
        )
    except ConversionError:
        raise
    except Exception as e:
        raise ConversionError(f"cannot read {source}: {type(e).__name__}: {e}") from e


def rank_files(src: str) -> list[Path]:
    """``src`` with ``{rank}`` replaced by 0, 1, ... while the file exists (at least rank 0)."""
    found: list[Path] = []
    while Path(src.replace("{rank}", str(len(found)))).is_file():
        found.append(Path(src.replace("{rank}", str(len(found)))))
    if not found:
        raise ConversionError(f"no rank files {src} (looked for {src.replace('{rank}', '0')})")
    return found
