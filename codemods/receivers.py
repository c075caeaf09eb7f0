"""Which expressions are known to hold an FSDP-wrapped module.

Known, per function (and at module level, visible in every function):
- the target of ``x = FSDP(...)`` or ``x = fully_shard(...)``;
- ``x`` in an ``isinstance(x, FSDP)`` / ``isinstance(x, FSDPModule)`` test anywhere in the
  function (a guard's scope is not tracked finer than the function);
- a parameter annotated ``FSDP`` / ``FSDPModule``.
``self.x`` assigned from such a call in any method is known in every method of the class.
Nothing else is: ``no_sync`` and ``clip_grad_norm_`` exist on DDP and other wrappers too.
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst
import libcst.matchers as m

Predicate = Callable[[cst.CSTNode], bool]


class KnownReceivers(cst.CSTVisitor):
    def __init__(
        self, module: cst.Module, is_wrap_call: Predicate, is_fsdp_class: Predicate
    ) -> None:
        self._module = module
        self._is_wrap_call = is_wrap_call
        self._is_fsdp_class = is_fsdp_class
        self._scopes: list[cst.CSTNode | None] = [None]
        self._by_scope: dict[int | None, set[str]] = {None: set()}
        self._by_class: dict[int, set[str]] = {}
        self._classes: list[cst.ClassDef] = []
        module.visit(self)

    def known(self, expr: cst.BaseExpression, scopes: list[cst.CSTNode]) -> bool:
        """Whether ``expr`` is known to be FSDP-wrapped where ``scopes`` (outermost first) nest."""
        text = self._module.code_for_node(expr)
        functions = [s for s in scopes if isinstance(s, cst.FunctionDef)]
        if text in self._by_scope[None]:
            return True
        if functions and text in self._by_scope.get(id(functions[-1]), set()):
            return True
        classes = [s for s in scopes if isinstance(s, cst.ClassDef)]
        return bool(
            classes
            and text.startswith("self.")
            and text in self._by_class.get(id(classes[-1]), set())
        )

    # -- collection ---------------------------------------------------------------------------
    def _add(self, target: cst.CSTNode) -> None:
        if not isinstance(target, (cst.Name, cst.Attribute)):
            return
        text = self._module.code_for_node(target)
        scope = self._scopes[-1]
        self._by_scope.setdefault(None if scope is None else id(scope), set()).add(text)
        if text.startswith("self.") and self._classes:
            self._by_class.setdefault(id(self._classes[-1]), set()).add(text)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._scopes.append(node)
        for param in (*node.params.params, *node.params.kwonly_params, *node.params.posonly_params):
            if param.annotation is not None and self._is_fsdp_class(param.annotation.annotation):
                self._add(param.name)

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self._scopes.pop()

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._classes.append(node)

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self._classes.pop()

    def visit_Assign(self, node: cst.Assign) -> None:
        if isinstance(node.value, cst.Call) and self._is_wrap_call(node.value.func):
            for target in node.targets:
                self._add(target.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if isinstance(node.value, cst.Call) and self._is_wrap_call(node.value.func):
            self._add(node.target)

    def visit_Call(self, node: cst.Call) -> None:
        if not (m.matches(node.func, m.Name("isinstance")) and len(node.args) == 2):
            return
        kinds = node.args[1].value
        elements = [e.value for e in kinds.elements] if isinstance(kinds, cst.Tuple) else [kinds]
        if any(self._is_fsdp_class(e) for e in elements):
            self._add(node.args[0].value)
