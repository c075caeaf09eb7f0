"""The code the rules emit calls APIs that exist, with arguments they accept, in installed torch
and in fsdp2_port.

The codemods never import torch; this test does (and is skipped without it): it collects every
call to an FSDP2 / state-dict / fsdp2_port API in the fixture outputs and binds its arguments
to the real signature.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path

import pytest

from fsdp2_port.codemods import registry

ROOTS = (Path(__file__).parent / "fixtures", Path(registry.__file__).parent / "rules")
OUTPUTS = sorted(p for root in ROOTS for p in root.rglob("*.out*"))
#: Every API a rule's rewrites may call, from the rules themselves.
APIS = registry.EMITS


def _calls(text: str):
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, ast.Call):
            continue
        name = ast.unparse(node.func)
        keywords = [k.arg for k in node.keywords if k.arg is not None]
        if name.endswith(".set_requires_gradient_sync"):
            yield "set_requires_gradient_sync", len(node.args) + 1, keywords, False
        elif name in APIS or re.fullmatch(r"fsdp2_port\.\w+", name):  # new ones must be listed
            yield name, len(node.args), keywords, False
        elif name == "functools.partial" and node.args and ast.unparse(node.args[0]) in APIS:
            yield ast.unparse(node.args[0]), len(node.args) - 1, keywords, True


def _resolve(target: str):
    module, _, attribute = target.partition(":")
    value = importlib.import_module(module)
    for part in attribute.split("."):
        value = getattr(value, part)
    return value


def test_emitted_calls_bind_to_the_installed_signatures() -> None:
    pytest.importorskip("torch")
    found = []
    for output in OUTPUTS:
        for path in [output] if output.is_file() else sorted(output.rglob("*.py")):
            found += list(_calls(path.read_text()))
    assert {key for key, *_ in found} == set(APIS), "every API the rules emit is in a fixture"
    for key, positional, keywords, partial in found:
        signature = inspect.signature(_resolve(APIS[key]))
        bind = signature.bind_partial if partial else signature.bind
        bind(*([None] * positional), **dict.fromkeys(keywords))  # TypeError if not
