"""F2P099: every FSDP1 name no other rule handles gets a marker. Runs last.

This is the rule behind "nothing FSDP1 is left behind silently": a reference to an FSDP1 name
(outside imports) that no site covers is marked, string annotations included. FSDP1
*configuration* values (``ShardingStrategy``, ``MixedPrecision``, wrap policies, state-dict
types and configs...) are not: ``fully_shard_like_fsdp1`` takes them as they are, and FSDP1 code
that still consumes them is marked where it consumes them.
"""

from __future__ import annotations

import ast
import bisect
import itertools
from typing import ClassVar

from fsdp2_port.codemods import fsdp1
from fsdp2_port.codemods.analysis import FileAnalysis
from fsdp2_port.codemods.assumptions import (
    FSDP1_CONTEXT_WRAPPING,
    FSDP1_NOT_CONFIGURATION,
    FSDP1_PRIVATE_CONFIGURATION,
)
from fsdp2_port.codemods.rules.base import Code

#: FSDP1's configuration values: every public name but the wrapper, its flat parameter, the
#: grad scaler and the wrap functions, plus the private policy combinators users import.
CONFIGURATION = (
    fsdp1.PUBLIC - FSDP1_NOT_CONFIGURATION.members
) | FSDP1_PRIVATE_CONFIGURATION.members


class LeftoversRule:
    STAGE: ClassVar[str] = "analysis"
    CODE: ClassVar[str] = "F2P099"
    CODES: ClassVar[dict[str, Code]] = {
        "F2P099": Code(
            summary="flag every remaining reference to an FSDP1 name",
            topic="leftovers",
            rewritten="—",
            marked=(
                "any other reference to an FSDP1 name, string annotations included. FSDP1 "
                "*configuration* values (`ShardingStrategy`, `MixedPrecision`, wrap policies, "
                "state-dict types and configs) are not marked: `fully_shard_like_fsdp1` takes "
                "them as they are"
            ),
        ),
    }
    NEEDS: ClassVar[tuple[str, ...]] = ()
    EMITS: ClassVar[dict[str, str]] = {}

    def analyze(self, analysis: FileAnalysis) -> None:
        covered = sorted((s.at.start, s.at.end) for s in analysis.plan.sites)
        starts = [s for s, _ in covered]
        reach = list(itertools.accumulate((e for _, e in covered), max))
        for node in [*analysis.names.by_type[ast.Name], *analysis.names.by_type[ast.Attribute]]:
            assert isinstance(node, (ast.Name, ast.Attribute))
            if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                continue  # an alias's own name (``Wrapper = FSDP``): its value is the reference
            parent = analysis.names.parent.get(node)
            if isinstance(parent, ast.Attribute) and analysis.fsdp1_name(parent) is not None:
                continue  # the longer chain is the reference
            name = analysis.fsdp1_name(node)
            if name is None or name.split(".", 1)[0] in CONFIGURATION or analysis.is_ignored(node):
                continue
            start, end = analysis.span(node)
            before = bisect.bisect_right(starts, start)  # sites starting at or before it
            if before and reach[before - 1] >= end:
                continue  # inside a site
            call = analysis.names.parent.get(node)
            if isinstance(call, ast.Call) and call.func is node and call.args:
                # FSDP1 code run on its first argument (``_lazy_init(model, model)``): it holds
                # that model, or, untied, every model of the run
                analysis.add_tied(
                    self.CODE,
                    node,
                    call.args[0],
                    _message(name),
                    None,
                    known=False,
                    behind_test=False,  # an FSDP1 name: marked even behind a type test
                )
            else:
                analysis.add(self.CODE, node, _message(name))
        for annotation in analysis.names.annotations:
            for constant in ast.walk(annotation):
                if isinstance(constant, ast.Constant) and isinstance(constant.value, str):
                    self._quoted(analysis, constant)

    def _quoted(self, analysis: FileAnalysis, constant: ast.Constant) -> None:
        try:
            parsed = ast.parse(str(constant.value).strip(), mode="eval")
        except SyntaxError:
            return
        scope = analysis.names.scope_of(constant)
        for inner in ast.walk(parsed):
            if isinstance(inner, ast.Name):
                bindings = analysis.names.lookup(inner.id, scope)[1]
                names = {b.qualified for b in bindings if b.qualified}
                found = fsdp1.first(names)
                if found is not None and found.split(".", 1)[0] not in CONFIGURATION:
                    analysis.add(
                        self.CODE,
                        constant,
                        f"FSDP1 name {found} in a string annotation: use FSDPModule "
                        "(or port by hand)",
                    )
                    return


def _message(name: str) -> str:
    if name in FSDP1_CONTEXT_WRAPPING:
        return (
            f"{name}(): FSDP2 has no wrapper to apply; call fully_shard on each module, "
            "children first"
        )
    kind = "private FSDP1 internal" if fsdp1.is_private(name) else "FSDP1 name"
    return f"{kind} {name} has no automatic FSDP2 rewrite: port this line by hand"
