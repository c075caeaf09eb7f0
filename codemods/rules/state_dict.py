"""F2P008: FSDP1 state-dict plumbing -> ``torch.distributed.checkpoint.state_dict``.

- ``with FSDP.state_dict_type(m, FULL_STATE_DICT[, FullStateDictConfig(...)]):`` is removed (its
  other statements stay) and, in its body, ``m.state_dict()`` -> ``get_model_state_dict(m,
  options=StateDictOptions(full_state_dict=True, cpu_offload=...))``, ``m.load_state_dict(sd)``
  -> ``set_model_state_dict``. With SHARDED_STATE_DICT the plain DTensor state dict is used.
- ``FSDP.optim_state_dict(m, o)`` -> ``get_optimizer_state_dict(m, o, options=...)``;
  ``o.load_state_dict(FSDP.optim_state_dict_to_load(...))`` (either argument order, keywords)
  -> ``set_optimizer_state_dict(m, o, osd, options=...)``. Outside a ``with`` the options are
  FSDP1's defaults (full, not offloaded).
- ``m.state_dict()`` / ``m.load_state_dict(sd)`` on a receiver known to be an FSDP1 module,
  outside a ``with``: FSDP1's default state dict is the full one, FSDP2's is sharded, so these
  become the full-state-dict calls too (flagged instead when the file calls
  ``set_state_dict_type``).
FSDP1's ``rank0_only`` and FSDP2's ``cpu_offload`` differ: with ``full_state_dict`` and
``cpu_offload`` only rank 0 gets the tensors. When ``offload_to_cpu != rank0_only`` the rewrite
is marked for review.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from codemods import arguments
from codemods.bindings import Bindings
from codemods.rule import Rule

_MODULE = "torch.distributed.checkpoint.state_dict"
_FSDP = "FullyShardedDataParallel."


@dataclass(frozen=True)
class _Context:
    """The state-dict kind in force: options source text (None: the plain ``state_dict()``)."""

    module: str | None
    model: str | None
    optim: str | None
    load: str | None
    review: str = ""


_DEFAULT = _Context(
    None,
    "StateDictOptions(full_state_dict=True)",
    "StateDictOptions(full_state_dict=True)",
    "StateDictOptions(full_state_dict=True)",
)


class StateDictRule(Rule):
    CODE = "F2P008"
    SUMMARY = (
        "FSDP.state_dict_type / optim_state_dict / optim_state_dict_to_load "
        "-> get_/set_*_state_dict"
    )
    DESCRIPTION = SUMMARY
    TRIGGERS = ("state_dict",)

    def visit_Module(self, node: cst.Module) -> None:
        self._contexts: list[_Context | None] = []
        self._planned: dict[int, _Context | None] = {}
        self._sets_type = "set_state_dict_type" in self.source
        self._loading = 0
        self._bindings = Bindings(node)
        self._removable: set[int] = set()
        self._pairs: dict[int, list[tuple[int, cst.Call, tuple[str, str, str], _Context]]] = {}
        self._paired: set[int] = set()
        # Contexts are worked out before the transform: a config binding to remove comes first.
        self._prepared = {id(w): self._context(c) for w, c in _PlainWiths.find(node, self)}
        self._find_pairs(node, node.body)

    # -- the with statement ----------------------------------------------------------------------
    def visit_With(self, node: cst.With) -> None:
        call = _state_dict_type_call(self, node)
        if call is None:
            return
        prepared = self._prepared[id(node)]
        context: _Context | None = None
        if isinstance(prepared, str):
            self.flag(call, prepared)
            # context stays None: inside, nothing is rewritten (the state-dict kind is unknown)
        else:
            context = prepared
        self._planned[id(node)] = context
        self._contexts.append(context)

    def leave_With(self, original_node: cst.With, updated_node: cst.With):
        if id(original_node) not in self._planned:
            return updated_node
        context = self._planned.pop(id(original_node))
        self._contexts.pop()
        if context is None:
            return updated_node
        call = original_node.items[0].item
        message = "with FSDP.state_dict_type(...) removed: FSDP2 chooses the state dict per call"
        self.rewritten(
            call, "; ".join(filter(None, [message, context.review])), review=bool(context.review)
        )
        return cst.FlattenSentinel(_unwrapped(updated_node))

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ):
        if id(original_node) not in self._removable:
            return updated_node
        self.rewritten(
            original_node, "state-dict config binding removed (its only use was rewritten)"
        )
        return cst.RemoveFromParent()

    def _context(self, call: cst.Call) -> _Context | str:
        bound = arguments.bind(
            call, ("module", "state_dict_type", "state_dict_config", "optim_state_dict_config")
        )
        if bound is None or "module" not in bound or "state_dict_type" not in bound:
            return "FSDP.state_dict_type(...) with unusual arguments: port by hand"
        if not arguments.is_simple(bound["module"].value):
            return (
                "FSDP.state_dict_type(...) on a module expression: "
                "assign the module to a name first"
            )
        kind = self.fsdp1_name(bound["state_dict_type"].value)
        if kind not in ("StateDictType.FULL_STATE_DICT", "StateDictType.SHARDED_STATE_DICT"):
            return (
                "LOCAL_STATE_DICT or a runtime state-dict type: "
                "pick get_model_state_dict options by hand"
            )
        full = kind == "StateDictType.FULL_STATE_DICT"
        configs = [
            self._bound(bound.get(name))
            for name in ("state_dict_config", "optim_state_dict_config")
        ]
        model = _config(self, configs[0][0], full, "StateDictConfig")
        optim = _config(self, configs[1][0], full, "OptimStateDictConfig")
        if model is None or optim is None:
            return "state-dict config with runtime values: pick StateDictOptions by hand"
        self._removable.update(id(statement) for _, statement in configs if statement is not None)
        review = []
        for what, (offload, rank0_only) in (
            ("state_dict_config", model),
            ("optim_state_dict_config", optim),
        ):
            if full and offload != rank0_only:
                review.append(
                    f"{what}: offload_to_cpu={offload} with rank0_only={rank0_only}; "
                    "FSDP2's cpu_offload gives "
                    "the full state dict to rank 0 only (other ranks get an empty one)"
                )
        return _Context(
            self.code(bound["module"].value),
            _options(full, model[0]),
            _options(full, optim[0]),
            "StateDictOptions(full_state_dict=True)" if full else None,
            "; ".join(review),
        )

    # -- osd = FSDP.optim_state_dict_to_load(...); o.load_state_dict(osd) ------------------------
    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        self._find_pairs(node, node.body)

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        return updated_node.with_changes(body=self._join_pairs(original_node, updated_node.body))

    def leave_IndentedBlock(
        self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock
    ) -> cst.IndentedBlock:
        return updated_node.with_changes(body=self._join_pairs(original_node, updated_node.body))

    def _find_pairs(self, block: cst.CSTNode, body) -> None:
        context = self._contexts[-1] if self._contexts else _DEFAULT
        if context is None:
            return
        found = []
        for index in range(len(body) - 1):
            pair = _load_pair(self, body[index], body[index + 1], body[index + 2 :])
            if pair is not None:
                found.append((index, pair[0], pair[1], context))
                self._paired.add(id(pair[0]))
        if found:
            self._pairs[id(block)] = found

    def _join_pairs(self, original: cst.CSTNode, body) -> list:
        body = list(body)
        for index, call, parts, context in reversed(self._pairs.pop(id(original), [])):
            self.rewritten(
                call, "optim_state_dict_to_load + load_state_dict -> set_optimizer_state_dict(...)"
            )
            joined = cst.SimpleStatementLine(
                body=[cst.Expr(self._call("set_optimizer_state_dict", list(parts), context.optim))],
                leading_lines=body[index].leading_lines,
            )
            body[index : index + 2] = [joined]
        return body

    def _bound(
        self, arg: cst.Arg | None
    ) -> tuple[cst.BaseExpression | None, cst.SimpleStatementLine | None]:
        """A config argument's value, looking through a name bound once in the same scope.

        Also returns the binding statement when the argument is its only use.
        """
        if arg is None or not isinstance(arg.value, cst.Name) or arguments.is_none(arg.value):
            return (None if arg is None else arg.value), None
        found = self._bindings.lookup(self, arg.value)
        if found is None:
            return arg.value, None
        return found.value, found.statement if found.sole_use else None

    # -- calls ---------------------------------------------------------------------------------
    def visit_Call(self, node: cst.Call) -> None:
        self._loading += _to_load(self, node) is not None

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        loading = _to_load(self, original_node) is not None
        self._loading -= loading
        if self.ignored(original_node):
            return updated_node
        context = self._contexts[-1] if self._contexts else _DEFAULT
        if context is None:
            return updated_node
        if loading:
            return self._set_optim(original_node, updated_node, context)
        name = self.fsdp1_name(original_node.func)
        if name == _FSDP + "optim_state_dict":
            return self._get_optim(original_node, updated_node, context)
        if name == _FSDP + "optim_state_dict_to_load":
            if not self._loading and id(original_node) not in self._paired:
                self.flag(
                    original_node,
                    "FSDP.optim_state_dict_to_load(...) outside o.load_state_dict(...): "
                    "use set_optimizer_state_dict",
                )
            return updated_node
        func = original_node.func
        if not isinstance(func, cst.Attribute) or func.attr.value not in (
            "state_dict",
            "load_state_dict",
        ):
            return updated_node
        receiver = self.code(func.value)
        if self._contexts and receiver == context.module:
            return self._model(original_node, updated_node, context)
        if not self._contexts and self.known_fsdp(func.value, fsdp1_only=True):
            if self._sets_type:
                self.flag(
                    original_node,
                    f"{func.attr.value} on an FSDP1 module whose state-dict type is set "
                    "elsewhere: use get_/set_model_state_dict",
                )
                return updated_node
            return self._model(original_node, updated_node, _DEFAULT)
        return updated_node

    def _model(
        self, original: cst.Call, updated: cst.Call, context: _Context
    ) -> cst.BaseExpression:
        func = original.func
        assert isinstance(func, cst.Attribute)
        receiver = self.code(func.value)
        if func.attr.value == "state_dict":
            if original.args:
                self.flag(
                    original, "state_dict(...) with arguments: use get_model_state_dict by hand"
                )
                return updated
            if context.model is None:
                return updated
            self.rewritten(original, "state_dict() -> get_model_state_dict(...)")
            return self._call("get_model_state_dict", [receiver], context.model)
        bound = arguments.bind(original, ("state_dict", "strict", "assign"))
        if bound is None or "state_dict" not in bound or "assign" in bound:
            self.flag(
                original,
                "load_state_dict(...) with unusual arguments: use set_model_state_dict by hand",
            )
            return updated
        if context.load is None:
            return updated
        options = context.load
        if "strict" in bound:
            options = options[:-1] + f", strict={self.code(bound['strict'].value)})"
        self.rewritten(original, "load_state_dict(...) -> set_model_state_dict(...)")
        return self._call(
            "set_model_state_dict", [receiver, self.code(bound["state_dict"].value)], options
        )

    def _get_optim(
        self, original: cst.Call, updated: cst.Call, context: _Context
    ) -> cst.BaseExpression:
        bound = arguments.bind(original, ("model", "optim", "optim_state_dict", "group"))
        if bound is None or set(bound) != {"model", "optim"}:
            self.flag(
                original,
                "FSDP.optim_state_dict(...) with unusual arguments: "
                "use get_optimizer_state_dict by hand",
            )
            return updated
        self.rewritten(original, "FSDP.optim_state_dict(...) -> get_optimizer_state_dict(...)")
        return self._call(
            "get_optimizer_state_dict",
            [self.code(bound["model"].value), self.code(bound["optim"].value)],
            context.optim,
        )

    def _set_optim(
        self, original: cst.Call, updated: cst.Call, context: _Context
    ) -> cst.BaseExpression:
        inner = _to_load(self, original)
        assert inner is not None and isinstance(original.func, cst.Attribute)
        optimizer = self.code(original.func.value)
        parts = _to_load_parts(self, inner, optimizer)
        if parts is None:
            self.flag(
                original,
                "o.load_state_dict(FSDP.optim_state_dict_to_load(...)) with unusual arguments: "
                "use set_optimizer_state_dict",
            )
            return updated
        self.rewritten(
            original, "optim_state_dict_to_load + load_state_dict -> set_optimizer_state_dict(...)"
        )
        return self._call("set_optimizer_state_dict", list(parts), context.optim)

    def _call(self, function: str, args: list[str], options: str | None) -> cst.BaseExpression:
        self.add_needed_import(_MODULE, function)
        if options:
            self.add_needed_import(_MODULE, "StateDictOptions")
            args = [*args, f"options={options}"]
        return cst.parse_expression(
            f"{function}({', '.join(args)})", config=self.module.config_for_parsing
        )


class _PlainWiths(cst.CSTVisitor):
    """``with FSDP.state_dict_type(...):`` statements with a single item and no ``as``."""

    def __init__(self, rule: Rule) -> None:
        self.rule = rule
        self.found: list[tuple[cst.With, cst.Call]] = []

    @classmethod
    def find(cls, module: cst.Module, rule: Rule) -> list[tuple[cst.With, cst.Call]]:
        finder = cls(rule)
        module.visit(finder)
        return finder.found

    def visit_With(self, node: cst.With) -> None:
        item = node.items[0]
        if len(node.items) == 1 and item.asname is None and isinstance(item.item, cst.Call):
            if self.rule.fsdp1_name(
                item.item.func
            ) == _FSDP + "state_dict_type" and not self.rule.ignored(item.item):
                self.found.append((node, item.item))


def _state_dict_type_call(rule: Rule, node: cst.With) -> cst.Call | None:
    if len(node.items) != 1:
        calls = [i.item for i in node.items if isinstance(i.item, cst.Call)]
        for other in calls:
            if rule.fsdp1_name(other.func) == _FSDP + "state_dict_type" and not rule.ignored(other):
                rule.flag(
                    other,
                    "FSDP.state_dict_type(...) among other context managers: "
                    "split the with statement",
                )
        return None
    item = node.items[0]
    call = item.item
    if (
        not isinstance(call, cst.Call)
        or rule.fsdp1_name(call.func) != _FSDP + "state_dict_type"
        or rule.ignored(call)
    ):
        return None
    if item.asname is not None:
        rule.flag(call, "FSDP.state_dict_type(...) as a value: port by hand")
        return None
    return call


def _config(
    rule: Rule, value: cst.BaseExpression | None, full: bool, family: str
) -> tuple[bool, bool] | None:
    """``(offload_to_cpu, rank0_only)`` of a literal config (FSDP1 defaults when absent)."""
    if value is None or arguments.is_none(value):
        return False, False
    call = value
    if not isinstance(call, cst.Call):
        return None
    expected = ("Full" if full else "Sharded") + family
    if rule.fsdp1_name(call.func) != expected:
        return None
    bound = arguments.bind(
        call, ("offload_to_cpu", "rank0_only") if full else ("offload_to_cpu", "_use_dtensor")
    )
    if bound is None:
        return None
    values = {name: arguments.literal_bool(a.value) for name, a in bound.items()}
    if any(v is None for v in values.values()):
        return None
    return bool(values.get("offload_to_cpu")), bool(values.get("rank0_only"))


def _options(full: bool, offload: bool) -> str | None:
    fields = (["full_state_dict=True"] if full else []) + (["cpu_offload=True"] if offload else [])
    return f"StateDictOptions({', '.join(fields)})" if fields else None


def _to_load(rule: Rule, call: cst.Call) -> cst.Call | None:
    """The ``FSDP.optim_state_dict_to_load(...)`` call inside ``o.load_state_dict(<it>)``."""
    func = call.func
    if not (isinstance(func, cst.Attribute) and func.attr.value == "load_state_dict"):
        return None
    if len(call.args) != 1 or call.args[0].keyword is not None:
        return None
    inner = call.args[0].value
    if (
        isinstance(inner, cst.Call)
        and rule.fsdp1_name(inner.func) == _FSDP + "optim_state_dict_to_load"
    ):
        return inner
    return None


def _to_load_parts(rule: Rule, call: cst.Call, optimizer: str) -> tuple[str, str, str] | None:
    """``(model, optimizer, optim_state_dict)`` source, whichever of FSDP1's two orders is used.

    torch >= 2.1: ``(model, optim, optim_state_dict)``;
    before: ``(optim_state_dict, model, optim)``.
    Positional calls are told apart by where the receiver of ``load_state_dict`` appears.
    """
    if any(a.star for a in call.args) or len(call.args) < 3:
        return None
    keywords = {a.keyword.value: rule.code(a.value) for a in call.args if a.keyword is not None}
    positional = [rule.code(a.value) for a in call.args if a.keyword is None]
    if not positional:
        names = ("model", "optim", "optim_state_dict")
        if not all(n in keywords for n in names):
            return None
        return keywords["model"], keywords["optim"], keywords["optim_state_dict"]
    if len(positional) != 3 or keywords:
        return None
    if positional[1] == optimizer and positional[2] != optimizer:
        return positional[0], positional[1], positional[2]
    if positional[2] == optimizer and positional[1] != optimizer:
        return positional[1], positional[2], positional[0]
    return None


def _load_pair(rule: Rule, first, second, rest) -> tuple[cst.Call, tuple[str, str, str]] | None:
    """``(to_load call, parts)``.

    For ``n = FSDP.optim_state_dict_to_load(...)`` followed by ``o.load_state_dict(n)``.

    Only when ``n`` is not used again in the rest of the block.
    """
    if not (
        isinstance(first, cst.SimpleStatementLine) and isinstance(second, cst.SimpleStatementLine)
    ):
        return None
    if len(first.body) != 1 or len(second.body) != 1:
        return None
    assign, load = first.body[0], second.body[0]
    if not (
        isinstance(assign, cst.Assign)
        and len(assign.targets) == 1
        and isinstance(assign.targets[0].target, cst.Name)
    ):
        return None
    call = assign.value
    if not (
        isinstance(call, cst.Call)
        and rule.fsdp1_name(call.func) == _FSDP + "optim_state_dict_to_load"
    ):
        return None
    name = assign.targets[0].target.value
    if not (isinstance(load, cst.Expr) and isinstance(load.value, cst.Call)):
        return None
    func = load.value.func
    args = load.value.args
    if not (
        isinstance(func, cst.Attribute) and func.attr.value == "load_state_dict" and len(args) == 1
    ):
        return None
    if not (
        args[0].keyword is None
        and isinstance(args[0].value, cst.Name)
        and args[0].value.value == name
    ):
        return None
    if rule.ignored(call) or any(name in rule.code(statement) for statement in rest):
        return None
    parts = _to_load_parts(rule, call, rule.code(func.value))
    return None if parts is None else (call, parts)


def _unwrapped(with_node: cst.With) -> list[cst.BaseStatement]:
    """The body of a ``with`` as statements of the enclosing block, comments kept."""
    body = with_node.body
    if isinstance(body, cst.SimpleStatementSuite):
        statements: list[cst.BaseStatement] = [cst.SimpleStatementLine(body=body.body)]
        header = body.trailing_whitespace
    else:
        assert isinstance(body, cst.IndentedBlock)  # the only other suite
        statements = list(body.body)
        header = body.header
    lines = list(with_node.leading_lines)
    if header.comment is not None:
        lines.append(cst.EmptyLine(indent=True, comment=header.comment))
    first = statements[0]
    assert isinstance(first, (cst.SimpleStatementLine, cst.BaseCompoundStatement))  # all are
    statements[0] = first.with_changes(leading_lines=[*lines, *first.leading_lines])
    return statements
