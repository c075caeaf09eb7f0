"""F2P009: the BF16 master-weight optimizer -> ``fsdp2_port.BF16Optimizer``.

No second norm reduction.

``from specforge.optimizer import BF16Optimizer`` / ``from compat import BF16Optimizer`` import
from ``fsdp2_port`` instead (same constructor and API). Its ``step()`` returns the *global*
norm, so a caller-side reduction of that norm -- square, ``dist.all_reduce`` (SUM), square root,
consecutive statements of one block -- would inflate it by sqrt(world size) and is removed.
"""

from __future__ import annotations

import re

import libcst as cst
from libcst.helpers import get_full_name_for_node

from codemods.receivers import KnownReceivers
from codemods.rule import Rule

_SOURCES = ("specforge.optimizer", "compat", "compat.optimizer")
_CLASSES = {f"{module}.BF16Optimizer" for module in (*_SOURCES, "fsdp2_port")}


class OptimizerRule(Rule):
    CODE = "F2P009"
    SUMMARY = (
        "BF16Optimizer from specforge/compat -> fsdp2_port; "
        "drop the caller-side all-reduce of its norm"
    )
    DESCRIPTION = SUMMARY
    TRIGGERS = ("BF16Optimizer",)

    def visit_Module(self, node: cst.Module) -> None:
        is_optimizer = lambda n: bool(self.qualified(n) & _CLASSES)  # noqa: E731
        self._optimizers = KnownReceivers(node, is_optimizer, is_optimizer)

    def leave_ImportFrom(self, original_node: cst.ImportFrom, updated_node: cst.ImportFrom):
        module = get_full_name_for_node(original_node.module) if original_node.module else None
        if (
            original_node.relative
            or module not in _SOURCES
            or isinstance(original_node.names, cst.ImportStar)
        ):
            return updated_node
        ours = [a for a in original_node.names if get_full_name_for_node(a.name) == "BF16Optimizer"]
        if not ours or self.ignored(original_node):
            return updated_node
        self.rewritten(original_node, f"BF16Optimizer imported from fsdp2_port instead of {module}")
        if len(ours) == len(original_node.names):
            return updated_node.with_changes(module=cst.Name("fsdp2_port"))
        self.add_needed_import("fsdp2_port", "BF16Optimizer", ours[0].evaluated_alias)
        assert not isinstance(updated_node.names, cst.ImportStar)  # the original's were not
        names = [a for a in updated_node.names if get_full_name_for_node(a.name) != "BF16Optimizer"]
        names[-1] = names[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return updated_node.with_changes(names=names)

    def leave_IndentedBlock(
        self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock
    ):
        return updated_node.with_changes(
            body=self._without_reduction(original_node.body, updated_node.body)
        )

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        return updated_node.with_changes(
            body=self._without_reduction(original_node.body, updated_node.body)
        )

    def _without_reduction(self, original, updated):
        body = list(updated)
        for index in range(len(original) - 3, -1, -1):
            step = _assigned(original[index])
            if step is None or not self._is_step(step[1]):
                continue
            norm = step[0]
            plan = self._reduction(original, index + 1, norm)
            if plan is None:
                continue
            _square, _reduce, _root, total = plan
            self.rewritten(
                original[index + 2],
                "caller-side all-reduce of BF16Optimizer.step()'s norm removed: "
                "step() already returns the global norm",
            )
            config = self.module.config_for_parsing
            alias = cst.parse_statement(f"{total} = {norm}{config.default_newline}", config=config)
            keep = (
                []
                if total == norm
                else [alias.with_changes(leading_lines=body[index + 3].leading_lines)]
            )
            body[index + 1 : index + 4] = keep
        return body

    def _is_step(self, value: cst.BaseExpression) -> bool:
        return (
            isinstance(value, cst.Call)
            and not value.args
            and isinstance(value.func, cst.Attribute)
            and value.func.attr.value == "step"
            and self._optimizers.known(value.func.value, self.scopes)
        )

    def _reduction(self, statements, start: int, norm: str):
        """``(square, all_reduce, sqrt, result name)``.

        Only when statements[start:start+3] reduce ``norm``.
        """
        if start + 3 > len(statements) or any(
            self.ignored(s) for s in statements[start : start + 3]
        ):
            return None
        square = _assigned(statements[start])
        if square is None or not _squares(self.module.code_for_node(square[1]), norm):
            return None
        reduced = square[0]
        reduce = statements[start + 1]
        call = _expression_call(reduce)
        if call is None or "torch.distributed.all_reduce" not in self.qualified(call.func):
            return None
        if [self.code(a.value) for a in call.args if a.keyword is None] != [reduced]:
            return None
        for arg in call.args:
            if arg.keyword is not None and not (
                arg.keyword.value == "op"
                and self.qualified(arg.value) & {"torch.distributed.ReduceOp.SUM"}
            ):
                return None
        root = _assigned(statements[start + 2])
        if root is None or not _roots(self.module.code_for_node(root[1]), reduced):
            return None
        rest = "".join(self.module.code_for_node(s) for s in statements[start + 3 :])
        if reduced not in (norm, root[0]) and re.search(rf"\b{re.escape(reduced)}\b", rest):
            return None
        return square, reduce, root, root[0]


def _assigned(statement) -> tuple[str, cst.BaseExpression] | None:
    """``(target name, value)`` of ``name = value`` as a whole statement line."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    small = statement.body[0]
    if (
        isinstance(small, cst.Assign)
        and len(small.targets) == 1
        and isinstance(small.targets[0].target, cst.Name)
    ):
        return small.targets[0].target.value, small.value
    return None


def _expression_call(statement) -> cst.Call | None:
    if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
        small = statement.body[0]
        if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
            return small.value
    return None


def _squares(code: str, name: str) -> bool:
    n = re.escape(name)
    base = rf"{n}(?:\.(?:detach|clone|float)\(\))*"
    return bool(
        re.fullmatch(
            rf"{base}\s*\*\*\s*2|{base}\s*\*\s*{base}|{base}\.(?:pow\(2\)|square\(\))|torch\.(?:square\({base}\)|pow\({base},\s*2\))",
            code,
        )
    )


def _roots(code: str, name: str) -> bool:
    n = re.escape(name)
    return bool(
        re.fullmatch(
            rf"{n}\s*\*\*\s*0\.5|{n}\.(?:sqrt\(\)|pow\(0\.5\))|(?:torch|math)\.sqrt\({n}\)", code
        )
    )
