"""Loops over a module's parameters: the module a parameter variable walks
(``for p in m.parameters()``), for the rules that follow what is done to its parameters."""

from __future__ import annotations

import ast

from fsdp2_port.codemods.analysis import FileAnalysis
from fsdp2_port.codemods.assumptions import PARAMETER_ITERATORS


def parameters_of(analysis: FileAnalysis, tensor: ast.expr) -> ast.expr | None:
    """``m`` when ``tensor`` is ``m.parameters()`` itself, or (its ``.data``) the variable of
    a loop over ``m.parameters()`` (or the parameter of ``m.named_parameters()``), bound
    nowhere else."""
    if isinstance(tensor, ast.Attribute) and tensor.attr == "data":
        tensor = tensor.value
    if not isinstance(tensor, ast.Name):
        return iterated_module(analysis, tensor)
    bindings = analysis.names.bindings_of(tensor)
    loop = loop_binding(analysis, bindings[0].node) if len(bindings) == 1 else None
    return iterated_module(analysis, loop.iter) if loop is not None else None


def loop_binding(
    analysis: FileAnalysis, target: ast.AST
) -> ast.For | ast.AsyncFor | ast.comprehension | None:
    """The loop whose variable (or a part of its tuple) ``target`` is."""
    loop = analysis.names.parent.get(target)
    while isinstance(loop, ast.Tuple):
        loop = analysis.names.parent.get(loop)
    return loop if isinstance(loop, (ast.For, ast.AsyncFor, ast.comprehension)) else None


def iterated_module(analysis: FileAnalysis, value: ast.expr) -> ast.expr | None:
    """``m`` of ``m.parameters()`` (or another of ``PARAMETER_ITERATORS``)."""
    if (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and analysis.assumed.takes(PARAMETER_ITERATORS, value.func.attr, value)
    ):
        return value.func.value
    return None
