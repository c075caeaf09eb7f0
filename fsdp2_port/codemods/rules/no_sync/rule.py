"""F2P007: ``m.no_sync()`` on an FSDP1 model -> gradient sync off, FSDP2's way.

- ``with m.no_sync():`` where every model ``m`` can hold is an FSDP1 one built in this run:
  ``m.set_requires_gradient_sync(False)`` / ``try:`` body / ``finally:``
  ``m.set_requires_gradient_sync(True)`` (pure torch; sync is back on even if the block raises).
- Any other use (a receiver that may also hold a DDP model, ``with`` among other context
  managers, ``m.no_sync`` kept as a bound method): ``fsdp2_port.no_sync(m)``, a context manager
  right for FSDP1, FSDP2 and DDP alike, so it needs no model to migrate.
A receiver the run cannot tie to a model gets ``fsdp2_port.no_sync(m)`` too, whenever a model
of the run migrates (it may be one of them); without the runtime dependency it holds the run.
"""

from __future__ import annotations

import ast
from typing import ClassVar

from fsdp2_port.codemods.analysis import FileAnalysis
from fsdp2_port.codemods.plan import Rewrite
from fsdp2_port.codemods.rules.base import Code
from fsdp2_port.codemods.text import Edit


class NoSyncRule:
    STAGE: ClassVar[str] = "analysis"
    CODE: ClassVar[str] = "F2P007"
    CODES: ClassVar[dict[str, Code]] = {
        "F2P007": Code(
            summary="with m.no_sync(): -> m.set_requires_gradient_sync(False) ... finally True",
            topic="`m.no_sync()`",
            rewritten=(
                "`with m.no_sync():` on a model built here → "
                "`m.set_requires_gradient_sync(False)` / `try` / `finally: ...(True)`; other "
                "shapes (a receiver that may be DDP or cannot be tied, a bound method kept in a "
                "variable, among other context managers) → `fsdp2_port.no_sync(m)` (right for "
                "FSDP1, FSDP2, DDP)"
            ),
            marked="untied receivers without the runtime dependency (they hold the run)",
            proven_by=(
                "tests/test_migrated_scripts.py::test_the_migration_trains_like_the_original[bf16_accumulate.py-2-bf16-args3]",
                "tests/test_multifile_programs.py::test_the_migrated_program_trains_like_the_original[base_trainer-fp32--]",
                "tests/test_multifile_programs.py::test_the_migrated_program_trains_like_the_original[builder_tuple-fp32--]",
                "tests/test_demo.py::test_migrated_example_trains_like_the_original",
            ),
        ),
    }
    NEEDS: ClassVar[tuple[str, ...]] = ("F2P002",)
    EMITS: ClassVar[dict[str, str]] = {
        "set_requires_gradient_sync": (
            "torch.distributed.fsdp:FSDPModule.set_requires_gradient_sync"
        ),
        "fsdp2_port.no_sync": "fsdp2_port:no_sync",
    }

    def analyze(self, analysis: FileAnalysis) -> None:
        for node in analysis.names.by_type[ast.Attribute]:
            assert isinstance(node, ast.Attribute)
            if (
                node.attr != "no_sync"
                or not isinstance(node.ctx, ast.Load)  # a wrapper's own: self.no_sync = ...
                or analysis.is_ignored(node)
                or analysis.names.qualified(node)
            ):
                continue
            parent = analysis.names.parent.get(node)
            called = isinstance(parent, ast.Call) and parent.func is node
            if called and (parent.args or parent.keywords):  # type: ignore[union-attr]
                continue
            self._site(analysis, node, parent if called else None)  # type: ignore[arg-type]

    def _site(
        self, analysis: FileAnalysis, attribute: ast.Attribute, call: ast.Call | None
    ) -> None:
        receiver = attribute.value
        text = analysis.source(receiver)
        node = call or attribute
        keep = f"kept: {text}.no_sync() of an FSDP1 model"
        unknown = (
            f"{text} is not known to be an FSDP1 module: if it is, turn gradient sync off with "
            f"{text}.set_requires_gradient_sync(False) (and back on) with the model's migration"
        )
        ties, deferred = analysis.ties.of(receiver)
        statement = _sole_with_item(analysis, call) if call is not None else None
        # the bound method read for an attribute of its own (a mock's ``.side_effect``): no
        # call to stand in for
        read_into = call is None and isinstance(analysis.names.parent.get(attribute), ast.Attribute)
        either = (
            _helper(analysis, attribute, call, text)
            if analysis.options.runtime_dependency and not read_into
            else None
        )
        rewrite: Rewrite | None
        if statement is not None and (either is None or (ties and not deferred)):
            rewrite = _try_finally(analysis, statement, text)
        else:
            rewrite = either
            if either is None:
                keep += " (use set_requires_gradient_sync)"
        site = analysis.add_tied(
            self.CODE,
            node,
            receiver,
            keep,
            rewrite,
            quiet=True,
            unknown=unknown,
            either=either,
            # fsdp2_port.no_sync is right for FSDP1, FSDP2 and DDP alike
            tied_requirement="ALWAYS" if rewrite is either else "MODELS",
        )
        if site is None:
            analysis.hold(self.CODE, node, unknown)


def _helper(
    analysis: FileAnalysis, attribute: ast.Attribute, call: ast.Call | None, text: str
) -> Rewrite:
    """``fsdp2_port.no_sync(m)`` for the call, ``functools.partial(...)`` for a bound method."""
    imports = [analysis.module_import("fsdp2_port")]
    if call is not None:
        edits = analysis.receiver_first(call, "fsdp2_port.no_sync")
    else:
        edits = [analysis.replace(attribute, f"functools.partial(fsdp2_port.no_sync, {text})")]
        imports.append(analysis.module_import("functools"))
    message = "no_sync() -> fsdp2_port.no_sync(...): right for FSDP1, FSDP2 and DDP"
    return Rewrite(edits, message, imports)


def _sole_with_item(analysis: FileAnalysis, call: ast.Call) -> ast.With | None:
    """The ``with`` statement whose only item is ``call`` (no ``as``), if that is its shape."""
    item = analysis.names.parent.get(call)
    statement = analysis.names.parent.get(item) if isinstance(item, ast.withitem) else None
    if isinstance(statement, ast.With) and len(statement.items) == 1 and item.optional_vars is None:  # type: ignore[union-attr]
        return statement
    return None


def _try_finally(analysis: FileAnalysis, statement: ast.With, receiver: str) -> Rewrite:
    newline = analysis.lines.newline()
    start = analysis.lines.start(statement)
    indent = analysis.lines.indent_at(analysis.statement_start(statement))
    colon = _header_colon(analysis, statement)
    header = f"{receiver}.set_requires_gradient_sync(False){newline}{indent}try:"
    last = statement.body[-1]
    end = analysis.lines.line_end(analysis.lines.end(last) - 1)
    inner = analysis.lines.indent_at(analysis.lines.start(statement.body[0]))
    if not inner.startswith(indent) or inner == indent:
        inner = indent + "    "
    tail = "" if analysis.text[:end].endswith(("\n", "\r")) else newline
    restore = f"{inner}{receiver}.set_requires_gradient_sync(True){newline}"
    closing = f"{tail}{indent}finally:{newline}{restore}"
    return Rewrite(
        [Edit(start, colon + 1, header), Edit(end, end, closing)],
        "no_sync() -> set_requires_gradient_sync(False), restored in finally",
    )


def _header_colon(analysis: FileAnalysis, statement: ast.With) -> int:
    """Offset of the ``:`` that ends a ``with`` header (after its items and any parenthesis)."""
    position = analysis.lines.end(statement.items[-1].context_expr)
    while analysis.text[position] != ":":
        position += 1
    return position
