"""F2P002 / F2P003 / F2P004: FSDP1 constructors become FSDP2 (what becomes what: ``CODES``).

Invariants: the pure rewrite is exact (children get ``cast_forward_inputs=False``, as FSDP1
casts only the root's inputs; ``device_id`` moves the module first, as FSDP1 does); anything
it cannot prove goes to ``fully_shard_like_fsdp1`` with the same arguments (or, without the
runtime dependency, a marker naming what blocks it). FSDP1 subclasses and ``wrapper_cls=FSDP``
are marked and keep the run's other models honest.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import ClassVar

from codemods import calls
from codemods.analysis import FileAnalysis
from codemods.plan import Rewrite
from codemods.rules import Code
from codemods.text import Edit

#: ``FullyShardedDataParallel.__init__`` parameters, in positional order.
PARAMETERS = (
    "module",
    "process_group",
    "sharding_strategy",
    "cpu_offload",
    "auto_wrap_policy",
    "backward_prefetch",
    "mixed_precision",
    "ignored_modules",
    "param_init_fn",
    "device_id",
    "sync_module_states",
    "forward_prefetch",
    "limit_all_gathers",
    "use_orig_params",
    "ignored_states",
    "device_mesh",
)
_RESHARD = {
    "FULL_SHARD": True,
    "SHARD_GRAD_OP": False,
    "HYBRID_SHARD": True,
    "_HYBRID_SHARD_ZERO2": False,
}
_MIXED = (
    "param_dtype",
    "reduce_dtype",
    "buffer_dtype",
    "keep_low_precision_grads",
    "cast_forward_inputs",
    "cast_root_forward_inputs",
    "_module_classes_to_ignore",
)
#: Accepted by FSDP1 with no effect on the numbers; FSDP2 has no such argument.
#: Emitted lines longer than this are split, one argument a line.
_LINE_LENGTH = 100
_DEVICE_FUNCTIONS = (
    "torch.device",
    "torch.cuda.current_device",
    "torch.accelerator.current_device_index",
)
_NO_EFFECT = ("limit_all_gathers", "use_orig_params", "forward_prefetch", "backward_prefetch")
RUNTIME = "fully_shard_like_fsdp1"


@dataclass
class _Pure:
    """A pure-torch rewrite in the making, or why there is none."""

    blockers: list[str] = field(default_factory=list)
    #: keyword text for fully_shard on the root and on the policy's submodules
    root: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    classes: list[str] | None = None
    #: sole-use bindings (policy, mixed precision, offload) the rewrite inlines and removes
    bindings: list[tuple[str, ast.stmt]] = field(default_factory=list)
    names: set[str] = field(default_factory=set)
    #: ``sync_module_states``: None (off), "" (on), or the run-time flag's text
    sync: str | None = None


class ConstructorRule:
    CODE: ClassVar[str] = "F2P002"
    CODES: ClassVar[dict[str, Code]] = {
        "F2P002": Code(
            summary=(
                "FSDP(module, ...) -> fully_shard(...) (literal arguments) or "
                "fully_shard_like_fsdp1"
            ),
            topic="constructors",
            rewritten=(
                "literal arguments: `FSDP(m, ...)` → `fully_shard(m, ...)` (`sharding_strategy` "
                "→ `reshard_after_forward`, HYBRID + `device_mesh` → 2-D `mesh`, "
                "`MixedPrecision` → `MixedPrecisionPolicy` (children get "
                "`cast_forward_inputs=False`: FSDP1 casts only the root's inputs), `CPUOffload` "
                "→ `CPUOffloadPolicy`, `device_id` → `.to()` first (a name, `torch.device(...)`, "
                "`torch.cuda.current_device()`), `sync_module_states` → a broadcast of every "
                "parameter and buffer from rank 0 before sharding (under `if <flag>:` when it is "
                "chosen at run time), module-level constants of a script followed and inlined, "
                "no-effect arguments dropped); **anything else** → "
                "`fsdp2_port.fully_shard_like_fsdp1(<the same arguments>)` (runtime strategies, "
                "any wrap policy, `**kwargs`, process groups, `ignored_modules`, "
                "`sync_module_states`, `param_init_fn`...); `functools.partial(FSDP, ...)` → "
                "`partial(fully_shard_like_fsdp1, ...)`"
            ),
            marked=(
                "FSDP1 subclasses, `wrapper_cls=FSDP` (`enable_wrap`/`wrap`); with "
                "`--no-runtime-dependency`, what is not literal"
            ),
        ),
        "F2P003": Code(
            summary=(
                "FSDP(..., auto_wrap_policy=<literal>) -> fully_shard on each selected "
                "submodule, then the root"
            ),
            topic="literal wrap policies",
            rewritten=(
                "`auto_wrap_policy=partial(transformer_auto_wrap_policy, "
                "transformer_layer_cls={A})` / `ModuleWrapPolicy({A})` (inline, or bound once in "
                "the scope for this call) → a loop applying `fully_shard` to each matching "
                "submodule, children first, then the root"
            ),
            marked="—",
        ),
        "F2P004": Code(
            summary=(
                "MixedPrecision/CPUOffload bound for a pure rewrite -> inlined "
                "MixedPrecisionPolicy/CPUOffloadPolicy"
            ),
            topic="policy objects of a pure rewrite",
            rewritten=(
                "a `MixedPrecision(...)`/`CPUOffload(...)` bound once for the call is inlined as "
                "its FSDP2 policy and the binding removed"
            ),
            marked="—",
        ),
    }
    NEEDS: ClassVar[tuple[str, ...]] = ()
    EMITS: ClassVar[dict[str, str]] = {
        "fully_shard": "torch.distributed.fsdp:fully_shard",
        "MixedPrecisionPolicy": "torch.distributed.fsdp:MixedPrecisionPolicy",
        "CPUOffloadPolicy": "torch.distributed.fsdp:CPUOffloadPolicy",
        "fully_shard_like_fsdp1": "fsdp2_port:fully_shard_like_fsdp1",
    }

    def analyze(self, analysis: FileAnalysis) -> None:
        for call, cid in analysis.ties.constructors.items():
            if analysis.is_ignored(call):
                analysis.add(self.CODE, call, "", constructor=cid, silent=True)
            elif call in analysis.ties.factories:
                self._factory(analysis, call, cid)
            else:
                self._constructor(analysis, call, cid)
        self._class_as_value(analysis)

    # -- FSDP(...) ---------------------------------------------------------------------------
    def _constructor(self, analysis: FileAnalysis, call: ast.Call, cid: str) -> None:
        owner = _fsdp1_subclass_around(analysis, call)
        if owner is not None:
            message = (
                f"FSDP(...) inside class {owner.name}(FSDP): its units stay FSDP1 with the "
                "subclass (FSDP2 units cannot live inside an FSDP1 model)"
            )
            analysis.add(self.CODE, call, message, constructor=cid)
            return
        pure = _pure(analysis, call)
        device = _bound(call).get("device_id")
        needs_lines = pure.classes is not None or (
            device is not None and not calls.is_none(device.value)
        )
        if needs_lines and not _stands_alone(analysis, analysis.names.statement(call)):
            pure.blockers.append("the call shares its line with other code: put it on its own")
        if not pure.blockers:
            self._pure_rewrite(analysis, call, cid, pure)
            return
        if analysis.options.runtime_dependency:
            rewrite = Rewrite(
                [analysis.replace(call.func, RUNTIME)],
                f"FSDP(...) -> {RUNTIME}(...): the same arguments, applied with fully_shard",
                [analysis.import_for(call.func, "fsdp2_port", RUNTIME)],
            )
            analysis.add(self.CODE, call, "FSDP(...) left as is", rewrite, constructor=cid)
            return
        analysis.add(
            self.CODE,
            call,
            "FSDP(...) left as is (--no-runtime-dependency): " + "; ".join(pure.blockers),
            constructor=cid,
        )

    def _factory(self, analysis: FileAnalysis, call: ast.Call, cid: str) -> None:
        if not analysis.options.runtime_dependency:
            analysis.add(
                self.CODE,
                call,
                "functools.partial(FSDP, ...) left as is (--no-runtime-dependency): "
                f"use fsdp2_port.{RUNTIME}, or call fully_shard on each module",
                constructor=cid,
            )
            return
        target = call.args[0]
        rewrite = Rewrite(
            [analysis.replace(target, RUNTIME)],
            f"functools.partial(FSDP, ...) -> functools.partial({RUNTIME}, ...)",
            [analysis.import_for(target, "fsdp2_port", RUNTIME)],
        )
        analysis.add(
            self.CODE, call, "functools.partial(FSDP, ...) left as is", rewrite, constructor=cid
        )

    def _pure_rewrite(self, analysis: FileAnalysis, call: ast.Call, cid: str, pure: _Pure) -> None:
        module = _module(call)
        statement = analysis.names.statement(call)
        edits = [analysis.replace(call.func, "fully_shard")]
        edits += _argument_edits(analysis, call, pure)
        prefix = ""
        indent = analysis.lines.indent_at(analysis.statement_start(statement))
        newline = analysis.lines.newline()
        device = _bound(call).get("device_id")
        if device is not None and not calls.is_none(device.value):
            prefix += (
                f"{indent}{analysis.source(module)}.to({analysis.source(device.value)}){newline}"
            )
        imports = [
            analysis.import_for(call.func, analysis.options.fsdp2_module, n)
            for n in sorted(pure.names)
        ]
        if pure.sync is not None:
            prefix += _broadcast(analysis, module, pure.sync, indent, newline)
            imports.append(analysis.module_import("torch.distributed"))
        code = "F2P002"
        if pure.classes is not None:
            code = "F2P003"
            prefix += _loop(analysis, statement, module, pure, indent, newline)
        if prefix:
            edits.append(
                Edit(
                    analysis.statement_start(statement), analysis.statement_start(statement), prefix
                )
            )
        message = "FSDP(...) -> fully_shard(...)"
        if code == "F2P003":
            message = (
                "FSDP(..., auto_wrap_policy=<literal>) -> fully_shard on each submodule it "
                "selects, then on the root"
            )
        analysis.add(
            code, call, "FSDP(...) left as is", Rewrite(edits, message, imports), constructor=cid
        )
        for what, binding in pure.bindings:
            start = analysis.statement_start(binding)
            end = analysis.lines.line_end(analysis.lines.end(binding) - 1)
            code = "F2P003" if what == "auto_wrap_policy" else "F2P004"
            analysis.add(
                code,
                binding,
                f"{what} binding kept: its FSDP(...) stays FSDP1",
                Rewrite(
                    [Edit(start, end, "")], f"{what} binding removed: inlined into the FSDP2 calls"
                ),
                "MODELS",
                ties=frozenset({cid}),
            )

    # -- the FSDP1 class as a value ------------------------------------------------------------
    def _class_as_value(self, analysis: FileAnalysis) -> None:
        for node in analysis.names.by_type[ast.ClassDef]:
            assert isinstance(node, ast.ClassDef)
            for base in node.bases:
                if analysis.is_fsdp_class(base) and not analysis.is_ignored(base):
                    analysis.add(
                        self.CODE,
                        base,
                        f"class {node.name}(FSDP): FSDP2 has no wrapper class to subclass; apply "
                        "fully_shard to the module and move the overrides onto it",
                        constructor=analysis.site_id(base),
                    )
        for node in analysis.names.by_type[ast.keyword]:
            assert isinstance(node, ast.keyword)
            if (
                node.arg == "wrapper_cls"
                and analysis.is_fsdp_class(node.value)
                and not analysis.is_ignored(node)
            ):
                analysis.add(
                    self.CODE,
                    node.value,
                    "wrapper_cls=FSDP (enable_wrap/wrap): FSDP2 has no wrapper class; call "
                    "fully_shard on each module the wrap() calls select, children first",
                    constructor=analysis.site_id(node.value),
                )


def _fsdp1_subclass_around(analysis: FileAnalysis, call: ast.Call) -> ast.ClassDef | None:
    """The FSDP1 subclass whose body (methods included) holds ``call``, if any."""
    for ancestor in analysis.names.ancestors(call):
        if isinstance(ancestor, ast.ClassDef) and any(
            analysis.is_fsdp_class(b) for b in ancestor.bases
        ):
            return ancestor
    return None


def _stands_alone(analysis: FileAnalysis, statement: ast.stmt) -> bool:
    """A simple statement that starts its own line: code can be put on lines before it."""
    if not isinstance(statement, (ast.Assign, ast.AnnAssign, ast.Return, ast.Expr)):
        return False
    start = analysis.lines.start(statement)
    return not analysis.text[analysis.lines.line_start(start) : start].strip()


def _bound(call: ast.Call) -> dict[str, calls.Argument]:
    return calls.bind(call, PARAMETERS) or {}


def _module(call: ast.Call) -> ast.expr:
    return _bound(call)["module"].value


def _pure(analysis: FileAnalysis, call: ast.Call) -> _Pure:
    """The pure-torch conversion of a constructor call, or what blocks it."""
    pure = _Pure()
    bound = calls.bind(call, PARAMETERS)
    if bound is None:
        pure.blockers.append("*args/**kwargs (or unknown arguments): spell the arguments out")
        return pure
    if "module" not in bound:
        pure.blockers.append("no module argument")
        return pure
    if any(arg.keyword is None for name, arg in bound.items() if name != "module"):
        pure.blockers.append("arguments by position: pass them by keyword")
        return pure
    pure.names.add("fully_shard")
    strategy = bound.get("sharding_strategy")
    mesh = bound.get("device_mesh")
    kind = "FULL_SHARD"
    if strategy is not None and not calls.is_none(strategy.value):
        name = analysis.fsdp1_name(strategy.value) or ""
        kind = name.removeprefix("ShardingStrategy.")
        if kind not in _RESHARD:
            pure.blockers.append(
                "sharding_strategy is not a literal FULL_SHARD/SHARD_GRAD_OP/HYBRID_SHARD"
            )
        elif kind.startswith(("HYBRID", "_HYBRID")) and (mesh is None or calls.is_none(mesh.value)):
            pure.blockers.append(f"{kind} without device_mesh: FSDP2 needs a 2-D mesh")
        else:
            text = f"reshard_after_forward={_RESHARD[kind]}"
            pure.root.append(text)
            pure.children.append(text)
    if mesh is not None and not calls.is_none(mesh.value):
        if not calls.is_simple(mesh.value):
            pure.blockers.append("device_mesh is an expression: assign it to a name first")
        text = f"mesh={analysis.source(mesh.value)}"
        pure.root.insert(0, text)
        pure.children.insert(0, text)
    group = bound.get("process_group")
    if group is not None and not (
        calls.is_none(group.value)
        or analysis.resolves_to(group.value, "torch.distributed.group.WORLD")
    ):
        pure.blockers.append("process_group other than WORLD")
    _mixed_precision(analysis, bound.get("mixed_precision"), pure)
    _offload(analysis, bound.get("cpu_offload"), pure)
    _wrap_policy(analysis, bound.get("auto_wrap_policy"), pure)
    for name in ("ignored_modules", "ignored_states", "param_init_fn"):
        if name in bound and not calls.is_none(bound[name].value):
            pure.blockers.append(f"{name} is set")
    sync = bound.get("sync_module_states")
    if sync is not None and not calls.is_none(sync.value):
        flag = calls.literal_bool(sync.value)
        if flag is None and not calls.is_simple(sync.value):
            pure.blockers.append("sync_module_states is an expression: assign it to a name first")
        elif flag is not False:
            pure.sync = "" if flag else analysis.source(sync.value)
    for name in _NO_EFFECT:
        arg = bound.get(name)
        if arg is None or calls.is_none(arg.value) or calls.literal_bool(arg.value) is not None:
            continue
        if name == "backward_prefetch" and (analysis.fsdp1_name(arg.value) or "").startswith(
            "BackwardPrefetch."
        ):
            continue
        pure.blockers.append(f"{name} is a runtime value")
    device = bound.get("device_id")
    needs_simple = pure.classes is not None or (
        device is not None and not calls.is_none(device.value)
    )
    if needs_simple and not calls.is_simple(bound["module"].value):
        pure.blockers.append("the module expression is used twice: assign it to a name first")
    if device is not None and not (
        calls.is_simple(device.value) or _device_call(analysis, device.value)
    ):
        pure.blockers.append("device_id is an expression")
    return pure


def _value(
    analysis: FileAnalysis, arg: calls.Argument | None, pure: _Pure, what: str
) -> ast.expr | None:
    """An argument's value, looking through a name bound once, used once, in the same scope."""
    if arg is None or calls.is_none(arg.value):
        return None
    value = arg.value
    if isinstance(value, ast.Name):
        binding = analysis.sole_binding(value)
        if binding is None or len(analysis.uses_of(binding)) != 1:
            pure.blockers.append(f"{what} is not written at the call")
            return None
        statement = analysis.names.statement(binding.node)
        same_scope = analysis.names.scope_of(statement) is analysis.names.scope_of(value)
        if not isinstance(statement, ast.Assign) or not (
            same_scope or _private_constant(analysis, statement, value.id)
        ):
            pure.blockers.append(f"{what} is not written at the call")
            return None
        pure.bindings.append((what, statement))
        assert binding.value is not None
        return binding.value
    return value


def _private_constant(analysis: FileAnalysis, statement: ast.stmt, name: str) -> bool:
    """A module-level constant no other module can import: ``_NAME``, or any name of a script
    (a file that runs ``if __name__ == "__main__"``). Inlining it and removing it is safe."""
    if not isinstance(analysis.names.parent.get(statement), ast.Module):
        return False
    return name.startswith("_") or any(
        isinstance(node, ast.If)
        and isinstance(node.test, ast.Compare)
        and isinstance(node.test.left, ast.Name)
        and node.test.left.id == "__name__"
        for node in analysis.tree.body
    )


def _device_call(analysis: FileAnalysis, node: ast.expr) -> bool:
    """``torch.device("cuda", 0)``, ``torch.cuda.current_device()``: a value with no side
    effect, safe to evaluate earlier."""
    return (
        isinstance(node, ast.Call)
        and analysis.resolves_to(node.func, *_DEVICE_FUNCTIONS)
        and all(calls.is_simple(x) for x in node.args)
        and not node.keywords
    )


def _mixed_precision(analysis: FileAnalysis, arg: calls.Argument | None, pure: _Pure) -> None:
    value = _value(analysis, arg, pure, "mixed_precision")
    if value is None:
        return
    if not (isinstance(value, ast.Call) and analysis.fsdp1_name(value.func) == "MixedPrecision"):
        pure.blockers.append("mixed_precision is not a literal MixedPrecision(...)")
        return
    bound = calls.bind(value, _MIXED)
    if bound is None:
        pure.blockers.append("MixedPrecision(...) with unusual arguments")
        return
    fields = []
    for name in ("param_dtype", "reduce_dtype"):
        if name in bound and not calls.is_none(bound[name].value):
            if not calls.is_simple(bound[name].value):
                pure.blockers.append(f"MixedPrecision {name} is an expression")
            fields.append(f"{name}={analysis.source(bound[name].value)}")
    flags = {n: calls.literal_bool(bound[n].value) for n in bound if n.startswith(("cast", "keep"))}
    if any(v is None for v in flags.values()):
        pure.blockers.append("MixedPrecision flags are runtime values")
        return
    if flags.get("keep_low_precision_grads"):
        pure.blockers.append("keep_low_precision_grads=True")
    if "buffer_dtype" in bound and not calls.is_none(bound["buffer_dtype"].value):
        pure.blockers.append("buffer_dtype is set (FSDP2 does not cast buffers)")
    if "_module_classes_to_ignore" in bound:
        pure.blockers.append("_module_classes_to_ignore is set")
    root_cast = flags.get("cast_root_forward_inputs", True) or flags.get(
        "cast_forward_inputs", False
    )
    child_cast = flags.get("cast_forward_inputs", False)
    if not fields:
        return
    pure.names.add("MixedPrecisionPolicy")
    root = ", ".join(fields + ([] if root_cast else ["cast_forward_inputs=False"]))
    child = ", ".join(fields + ([] if child_cast else ["cast_forward_inputs=False"]))
    pure.root.append(f"mp_policy=MixedPrecisionPolicy({root})")
    pure.children.append(f"mp_policy=MixedPrecisionPolicy({child})")


def _offload(analysis: FileAnalysis, arg: calls.Argument | None, pure: _Pure) -> None:
    value = _value(analysis, arg, pure, "cpu_offload")
    if value is None:
        return
    if not (isinstance(value, ast.Call) and analysis.fsdp1_name(value.func) == "CPUOffload"):
        pure.blockers.append("cpu_offload is not a literal CPUOffload(...)")
        return
    bound = calls.bind(value, ("offload_params",))
    offload = False
    if bound is None:
        pure.blockers.append("CPUOffload(...) with unusual arguments")
        return
    if "offload_params" in bound:
        flag = calls.literal_bool(bound["offload_params"].value)
        if flag is None:
            pure.blockers.append("CPUOffload(offload_params=<runtime value>)")
            return
        offload = flag
    if offload:
        pure.names.add("CPUOffloadPolicy")
        pure.root.append("offload_policy=CPUOffloadPolicy()")
        pure.children.append("offload_policy=CPUOffloadPolicy()")


def _wrap_policy(analysis: FileAnalysis, arg: calls.Argument | None, pure: _Pure) -> None:
    value = _value(analysis, arg, pure, "auto_wrap_policy")
    if value is None:
        return
    classes = None
    if isinstance(value, ast.Call):
        if (
            analysis.fsdp1_name(value.func) == "ModuleWrapPolicy"
            and len(value.args) == 1
            and not value.keywords
        ):
            classes = _literal_classes(analysis, value.args[0])
        elif (
            analysis.resolves_to(value.func, "functools.partial")
            and len(value.args) == 1
            and analysis.fsdp1_name(value.args[0]) == "transformer_auto_wrap_policy"
            and len(value.keywords) == 1
            and value.keywords[0].arg == "transformer_layer_cls"
        ):
            classes = _literal_classes(analysis, value.keywords[0].value)
    if classes is None:
        pure.blockers.append(
            "auto_wrap_policy is not a literal transformer_auto_wrap_policy/ModuleWrapPolicy "
            "class set"
        )
        return
    pure.classes = classes


def _literal_classes(analysis: FileAnalysis, node: ast.AST) -> list[str] | None:
    if not isinstance(node, (ast.Set, ast.List, ast.Tuple)) or not node.elts:
        return None
    if not all(calls.is_simple(e) and not isinstance(e, ast.Starred) for e in node.elts):
        return None
    return [analysis.source(e) for e in node.elts]


def _argument_edits(analysis: FileAnalysis, call: ast.Call, pure: _Pure) -> list[Edit]:
    """Every FSDP1 keyword goes; the FSDP2 keywords take the place of the first of them."""
    dropped = [arg.node for name, arg in _bound(call).items() if name != "module"]
    if not dropped:
        return []
    first = analysis.lines.start(dropped[0])
    own_line = not analysis.text[analysis.lines.line_start(first) : first].strip()
    separator = (
        f",{analysis.lines.newline()}{analysis.lines.indent_at(first)}" if own_line else ", "
    )
    replace = {dropped[0]: separator.join(pure.root)} if pure.root else {}
    return calls.edit_arguments(analysis.lines, call, set(dropped) - set(replace), replace)


def _loop(
    analysis: FileAnalysis,
    statement: ast.stmt,
    module: ast.expr,
    pure: _Pure,
    indent: str,
    newline: str,
) -> str:
    unit = _indent_unit(analysis)
    name = "submodule"
    scope = analysis.names.scope_of(statement)
    if analysis.names.lookup(name, scope)[0] is not None:
        name = "fsdp_submodule"
    root = analysis.source(module)
    assert pure.classes is not None
    kinds = ", ".join(pure.classes) + ("," if len(pure.classes) == 1 else "")
    inner = indent + unit + unit
    call = f"{inner}fully_shard({name}{''.join(', ' + k for k in pure.children)})"
    if len(call) > _LINE_LENGTH:  # one argument a line, as a formatter would
        arguments = "".join(f"{inner}{unit}{x},{newline}" for x in [name, *pure.children])
        call = f"{inner}fully_shard({newline}{arguments}{inner})"
    return (
        f"{indent}for {name} in reversed(list({root}.modules())):{newline}"
        f"{indent}{unit}if {name} is not {root} and isinstance({name}, ({kinds})):{newline}"
        f"{call}{newline}"
    )


def _broadcast(
    analysis: FileAnalysis, module: ast.expr, flag: str, indent: str, newline: str
) -> str:
    """FSDP1's ``sync_module_states``: every parameter and buffer from rank 0, before
    sharding (under ``if <flag>:`` when the choice is made at run time)."""
    unit = _indent_unit(analysis)
    root = analysis.source(module)
    inner = indent + (unit if flag else "")
    lines = [f"{indent}if {flag}:{newline}"] if flag else []
    lines += [
        f"{inner}for tensor in [*{root}.parameters(), *{root}.buffers()]:  # sync_module_states"
        f"{newline}",
        f"{inner}{unit}torch.distributed.broadcast(tensor.detach(), src=0){newline}",
    ]
    return "".join(lines)


def _indent_unit(analysis: FileAnalysis) -> str:
    """The file's own indentation step (four spaces when it has no indented line)."""
    for statement in analysis.names.by_type[ast.FunctionDef] + analysis.names.by_type[ast.ClassDef]:
        body = getattr(statement, "body", None)
        if body:
            outer = analysis.lines.indent_at(analysis.statement_start(statement))  # type: ignore[arg-type]
            inner = analysis.lines.indent_at(analysis.lines.start(body[0]))
            if inner.startswith(outer) and len(inner) > len(outer):
                return inner[len(outer) :]
    return "    "
