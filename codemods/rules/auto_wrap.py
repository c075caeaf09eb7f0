"""F2P003: ``FSDP(m, auto_wrap_policy=<literal policy>, ...)`` -> ``fully_shard`` per submodule.

The root is sharded last. A literal policy is
``functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={A, B})``
or ``ModuleWrapPolicy({A, B})`` (set, list or tuple of class names), written in the call or bound
to a name once in the same scope. Both FSDP1 policies wrap every submodule that is an instance
of a listed class, never the root twice; the rewrite does the same, children before parents
(reversed pre-order), with the call's keyword arguments. A policy binding that nothing else uses
is removed. Anything else (other policies, policies from another module) is marked.
"""

from __future__ import annotations

import libcst as cst
from libcst.metadata import ScopeProvider

from codemods import arguments, constructor, fsdp1
from codemods.bindings import Bindings
from codemods.rule import Rule
from codemods.rules.fully_shard import rewrite

_PURE_CALLS = {"MixedPrecisionPolicy", "CPUOffloadPolicy", "OffloadPolicy"}
_POLICY_KINDS = ("transformer_auto_wrap_policy", "ModuleWrapPolicy")


class AutoWrapRule(Rule):
    CODE = "F2P003"
    SUMMARY = "literal auto_wrap_policy -> fully_shard on each matching submodule, then on the root"
    DESCRIPTION = SUMMARY
    TRIGGERS = ("auto_wrap_policy",)

    def visit_Module(self, node: cst.Module) -> None:
        self._bindings = Bindings(node)
        self._plans: dict[int, tuple[list[cst.BaseExpression], constructor.Conversion] | str] = {}
        self._removable: set[int] = set()
        node.visit(_Scan(self))

    # -- planning (on the original tree, before anything changes) -----------------------------
    def plan(self, statement: cst.SimpleStatementLine, call: cst.Call) -> None:
        conversion = constructor.convert(self, call)
        if conversion.policy is None:
            return
        classes, binding = self._classes(conversion.policy.value)
        problems = list(conversion.blockers)
        if classes is None:
            problems.append(
                "auto_wrap_policy is not a literal "
                "transformer_auto_wrap_policy/ModuleWrapPolicy class set"
            )
        if conversion.module is not None and not arguments.is_simple(conversion.module.value):
            problems.append("the module expression is used twice: assign it to a name first")
        for arg in conversion.args:
            if not (arguments.is_simple(arg.value) or self._pure_call(arg.value)):
                problems.append(
                    f"{arg.keyword.value if arg.keyword else 'an argument'} would be evaluated "
                    "once per submodule: assign it to a name first"
                )
        if problems:
            self._plans[id(statement)] = "FSDP(...) with auto_wrap_policy left as is: " + "; ".join(
                problems
            )
            return
        self._plans[id(statement)] = (classes, conversion)
        if binding is not None:
            self._removable.add(id(binding))

    def _pure_call(self, expr: cst.BaseExpression) -> bool:
        return isinstance(expr, cst.Call) and (self.fsdp2_name(expr.func) in _PURE_CALLS)

    def _classes(self, policy: cst.BaseExpression):
        """``(classes, removable binding statement or None)``; classes None when not literal."""
        binding = None
        if isinstance(policy, cst.Name):
            found = self._bindings.lookup(self, policy)
            if found is None:
                return None, None
            policy, binding = found.value, found.statement if found.sole_use else None
        if not isinstance(policy, cst.Call):
            return None, None
        kind = fsdp1.first(self.qualified(policy.func))
        if kind == "ModuleWrapPolicy" and len(policy.args) == 1 and policy.args[0].keyword is None:
            return _literal_classes(policy.args[0].value), binding
        if "functools.partial" in self.qualified(policy.func) and policy.args:
            if (
                self.fsdp1_name(policy.args[0].value) != "transformer_auto_wrap_policy"
                or len(policy.args) != 2
            ):
                return None, None
            layers = policy.args[1]
            if layers.keyword is None or layers.keyword.value != "transformer_layer_cls":
                return None, None
            return _literal_classes(layers.value), binding
        return None, None

    # -- rewriting ------------------------------------------------------------------------------
    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement] | cst.RemovalSentinel:
        if id(original_node) in self._removable:
            self.rewritten(
                original_node,
                "auto-wrap policy binding removed (fully_shard is applied explicitly)",
            )
            return cst.RemoveFromParent()
        plan = self._plans.get(id(original_node))
        if plan is None:
            return updated_node
        call = _wrap_call(original_node)
        assert call is not None  # only statements with a wrap call are planned
        if isinstance(plan, str):
            self.flag(call, plan)
            return updated_node
        classes, conversion = plan
        assert conversion.module is not None  # without one, the plan is a blocker message
        module = self.code(conversion.module.value)
        loop = _loop(self.module, self._loop_name(original_node), module, classes, conversion.args)
        updated_call = _wrap_call(updated_node)
        assert updated_call is not None  # this rule changes no call inside the statement
        root = rewrite(self, call, updated_call, conversion)
        small = updated_node.body[0]
        new_statement = updated_node.with_changes(
            body=[small.with_changes(value=root)], leading_lines=[]
        )
        first = loop.with_changes(leading_lines=updated_node.leading_lines)
        return cst.FlattenSentinel([first, new_statement])

    def _loop_name(self, statement: cst.CSTNode) -> str:
        """``submodule``, unless that name is already used where the loop goes."""
        scope = self.get_metadata(ScopeProvider, statement, None)
        taken = scope is not None and bool(
            scope.assignments["submodule"] or scope.accesses["submodule"]
        )
        return "fsdp_submodule" if taken else "submodule"


class _Scan(cst.CSTVisitor):
    """Finds the ``FSDP(..., auto_wrap_policy=...)`` statements."""

    def __init__(self, rule: AutoWrapRule) -> None:
        self.rule = rule

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        call = _wrap_call(node)
        if (
            call is not None
            and self.rule.fsdp1_name(call.func) == "FullyShardedDataParallel"
            and not self.rule.ignored(call)
        ):
            self.rule.plan(node, call)


def _wrap_call(statement: cst.SimpleStatementLine) -> cst.Call | None:
    if len(statement.body) != 1:
        return None
    small = statement.body[0]
    value = getattr(small, "value", None)
    if isinstance(small, (cst.Assign, cst.Return, cst.Expr)) and isinstance(value, cst.Call):
        return value
    return None


def _literal_classes(expr: cst.BaseExpression) -> list[cst.BaseExpression] | None:
    if not isinstance(expr, (cst.Set, cst.List, cst.Tuple)) or not expr.elements:
        return None
    classes = [element.value for element in expr.elements]
    if any(
        element.__class__ is not cst.Element or not arguments.is_simple(c)
        for element, c in zip(expr.elements, classes)
    ):
        return None
    return classes


def _loop(
    module: cst.Module, name: str, root: str, classes: list[cst.BaseExpression], args: list[cst.Arg]
) -> cst.For:
    kinds = ", ".join(module.code_for_node(c) for c in classes)
    kinds = f"({kinds},)" if len(classes) == 1 else f"({kinds})"
    keywords = "".join(
        ", "
        + module.code_for_node(
            a.with_changes(
                comma=cst.MaybeSentinel.DEFAULT, whitespace_after_arg=cst.SimpleWhitespace("")
            )
        )
        for a in args
    )
    tab, newline = module.default_indent, module.default_newline
    code = (
        f"for {name} in reversed(list({root}.modules())):{newline}"
        f"{tab}if {name} is not {root} and isinstance({name}, {kinds}):{newline}"
        f"{tab}{tab}fully_shard({name}{keywords}){newline}"
    )
    return cst.ensure_type(cst.parse_statement(code, config=module.config_for_parsing), cst.For)
