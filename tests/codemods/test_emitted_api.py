"""The code the rules emit calls APIs that exist, with arguments they accept, in installed torch.

The codemods never import torch; this test does (and is skipped without it): it collects every
call to an FSDP2 / state-dict / fsdp2_port API in the fixture outputs and binds its arguments
to the real signature.
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import libcst as cst
import pytest

OUTPUTS = sorted((Path(__file__).parent / "fixtures").glob("*/*.out.py"))
APIS = {
    "fully_shard": "torch.distributed.fsdp:fully_shard",
    "MixedPrecisionPolicy": "torch.distributed.fsdp:MixedPrecisionPolicy",
    "CPUOffloadPolicy": "torch.distributed.fsdp:CPUOffloadPolicy",
    "OffloadPolicy": "torch.distributed.fsdp:OffloadPolicy",
    "StateDictOptions": "torch.distributed.checkpoint.state_dict:StateDictOptions",
    "get_model_state_dict": "torch.distributed.checkpoint.state_dict:get_model_state_dict",
    "set_model_state_dict": "torch.distributed.checkpoint.state_dict:set_model_state_dict",
    "get_optimizer_state_dict": "torch.distributed.checkpoint.state_dict:get_optimizer_state_dict",
    "set_optimizer_state_dict": "torch.distributed.checkpoint.state_dict:set_optimizer_state_dict",
    "fsdp2_port.clip_grad_norm_": "fsdp2_port:clip_grad_norm_",
    "torch.nn.utils.clip_grad_norm_": "torch.nn.utils:clip_grad_norm_",
    "set_requires_gradient_sync": "torch.distributed.fsdp:FSDPModule.set_requires_gradient_sync",
}


class _Calls(cst.CSTVisitor):
    def __init__(self) -> None:
        self.found: list[tuple[str, int, list[str]]] = []

    def visit_Call(self, node: cst.Call) -> None:
        name = cst.helpers.get_full_name_for_node(node.func) or ""
        key = "set_requires_gradient_sync" if name.endswith(".set_requires_gradient_sync") else name
        if key in APIS:
            positional = sum(1 for a in node.args if a.keyword is None) + (
                key == "set_requires_gradient_sync"
            )
            self.found.append(
                (key, positional, [a.keyword.value for a in node.args if a.keyword is not None])
            )


def _resolve(target: str):
    module, _, attribute = target.partition(":")
    value = importlib.import_module(module)
    for part in attribute.split("."):
        value = getattr(value, part)
    return value


def test_emitted_calls_bind_to_the_installed_signatures() -> None:
    pytest.importorskip("torch")
    calls = _Calls()
    for output in OUTPUTS:
        cst.parse_module(output.read_text()).visit(calls)
    assert {key for key, _, _ in calls.found} == set(APIS), (
        "every API the rules emit appears in a fixture"
    )
    for key, positional, keywords in calls.found:
        signature = inspect.signature(_resolve(APIS[key]))
        signature.bind(*([None] * positional), **dict.fromkeys(keywords))  # raises TypeError if not
