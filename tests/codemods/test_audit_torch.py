"""The audit's name tables (``fsdp2_port.codemods.audit_names``) against the installed torch.

The audit writes out what FSDP1 and FSDP2 are called instead of sharing the codemod's tables;
this checks its list against torch's own modules. Like ``test_emitted_api``, it imports torch
(the codemods never do) and is skipped without it.
"""

from __future__ import annotations

import importlib
import types

import pytest

from fsdp2_port.codemods import audit_names
from fsdp2_port.codemods.assumptions import AUDIT_CONFIGURATION, AUDIT_FSDP2_POLICIES

torch = pytest.importorskip("torch")
fsdp = importlib.import_module("torch.distributed.fsdp")

#: The modules whose public names are FSDP1's.
FSDP1_MODULES = (
    "torch.distributed.fsdp.api",
    "torch.distributed.fsdp.fully_sharded_data_parallel",
    "torch.distributed.fsdp.wrap",
    "torch.distributed.fsdp.sharded_grad_scaler",
)


def _defined_in(module: types.ModuleType) -> set[str]:
    return {
        name
        for name in dir(module)
        if not name.startswith("_")
        and getattr(getattr(module, name), "__module__", None) == module.__name__
    }


def test_the_public_fsdp1_names_are_those_torch_defines():
    torchs = {"FlatParameter"}  # defined in the private _flat_param, exported by the package
    for name in FSDP1_MODULES:
        module = importlib.import_module(name)
        torchs |= _defined_in(module) & set(getattr(module, "__all__", None) or dir(module))
    assert fsdp.FlatParameter.__module__ == "torch.distributed.fsdp._flat_param"
    assert torchs == audit_names.FSDP1_PUBLIC


def test_every_other_name_the_package_exports_is_not_fsdp1():
    for name in fsdp.__all__:
        qualified = f"torch.distributed.fsdp.{name}"
        if getattr(fsdp, name).__module__ in FSDP1_MODULES:
            assert audit_names.fsdp1_name(qualified) == name
        else:
            assert audit_names.fsdp1_name(qualified) is None, name


def test_private_modules_are_fsdp1_but_fully_shard():
    private = [
        name
        for name in dir(fsdp)
        if name.startswith("_")
        and not name.startswith("__")
        and isinstance(getattr(fsdp, name), types.ModuleType)
    ]
    assert "_fully_shard" in private and "_runtime_utils" in private
    for name in private:
        found = audit_names.fsdp1_name(f"torch.distributed.fsdp.{name}.anything")
        assert (found is None) == (name == "_fully_shard"), name


def test_fsdp2_names_resolve_where_torch_defines_them():
    for name in ("fully_shard", "FSDPModule", *AUDIT_FSDP2_POLICIES):
        assert hasattr(fsdp, name)
        assert audit_names.fsdp2_name(f"torch.distributed.fsdp.{name}") == name
    composable = importlib.import_module("torch.distributed._composable.fsdp")
    assert audit_names.fsdp2_name(f"{composable.__name__}.fully_shard") == "fully_shard"


def test_the_private_policies_called_configuration_exist():
    wrap = importlib.import_module("torch.distributed.fsdp.wrap")
    for name in AUDIT_CONFIGURATION:
        module = wrap if name.startswith("_") or "policy" in name.lower() else fsdp
        assert hasattr(module, name), name
