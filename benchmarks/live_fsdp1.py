"""An independent reading of migrated code: which FSDP1 calls could still run on a model.

It shares nothing with the codemod (no plan, no ties, no rule code): plain ``ast`` and a
file-wide table of imported names. A run over a repository is judged as a whole:

- *constructors*: calls of the FSDP1 class (and ``partial(FSDP, ...)``) left, FSDP2 ones
  (``fully_shard``, ``fully_shard_like_fsdp1``) made;
- *live FSDP1 calls*: ``FSDP.<api>(...)`` static calls, and FSDP1's module methods and
  attributes on any receiver but ``self`` (``no_sync()``, ``clip_grad_norm_(max_norm)``,
  ``summon_full_params``, ``check_is_root``, ``_handle``, ``_all_handles``, ``_is_root``,
  ``_fsdp_wrapped_module``, ``_flat_param``), marked or not, unless no FSDP2 model can get there:
  behind ``isinstance(x, FSDP)`` or ``hasattr(x, "_fsdp_wrapped_module")`` (an ``if`` body,
  the rest of an ``and``, the ``else`` of a negation, or after ``if not ...: return``), or on
  a name bound to a ``DistributedDataParallel`` (``.to(...)`` of one too). A
  ``clip_grad_norm_`` whose first argument is parameters is torch's signature, not FSDP1's
  method.

In a run where every constructor migrated, each live call is on a migrated model: a defect.
Where some stay FSDP1, a live call may be theirs; those are listed for a person to judge.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Mapping
from dataclasses import dataclass, field

_FSDP1_MODULES = (
    "torch.distributed.fsdp",
    "torch.distributed.fsdp.fully_sharded_data_parallel",
    "torch.distributed.fsdp.api",
)
_FSDP1_CLASS = {f"{m}.FullyShardedDataParallel" for m in _FSDP1_MODULES}
_FSDP2_BUILDERS = {
    "torch.distributed.fsdp.fully_shard",
    "torch.distributed._composable.fsdp.fully_shard",
    "fsdp2_port.fully_shard_like_fsdp1",
}
_BRIDGE = {
    "fsdp2_port.fully_shard_like_fsdp1",
    "fsdp2_port.fsdp1.like_fsdp1.fully_shard_like_fsdp1",
}
_DDP = {
    "torch.nn.parallel.DistributedDataParallel",
    "torch.nn.parallel.distributed.DistributedDataParallel",
}
#: ``nn.Module`` methods that return the module itself.
_RETURN_SELF = {"to", "cuda", "cpu", "train", "eval", "half", "float", "bfloat16", "requires_grad_"}
_METHODS = {"no_sync", "clip_grad_norm_", "summon_full_params", "check_is_root"}
_ATTRIBUTES = {"_handle", "_fsdp_wrapped_module", "_flat_param", "_all_handles", "_is_root"}
_JUMPS = (ast.Return, ast.Raise, ast.Continue, ast.Break)
#: What ``torch.distributed.fsdp`` exports that is FSDP2's (importing these is no FSDP1 name).
_FSDP2_NAMES = {
    "fully_shard",
    "FSDPModule",
    "MixedPrecisionPolicy",
    "CPUOffloadPolicy",
    "OffloadPolicy",
    "UnshardHandle",
    "register_fsdp_forward_method",
    "FullyShardedDataParallel2",
}


@dataclass
class Reading:
    fsdp1_constructors: int = 0
    fsdp2_constructors: int = 0
    #: calls of the bridge (``fully_shard_like_fsdp1``, or a ``partial`` of it)
    bridges: int = 0
    live: list[str] = field(default_factory=list)
    #: FSDP1 names the file imports (``ShardingStrategy``, ``wrap.transformer_auto_wrap_policy``,
    #: the ``torch.distributed.fsdp`` module used for FSDP1 names...), as ``qualified`` names,
    #: less those of ``fsdp1_dual``
    fsdp1_imports: list[str] = field(default_factory=list)
    #: FSDP1 names read only where code serves both versions on purpose: an ``isinstance`` /
    #: ``issubclass`` tuple that also names an FSDP2 class, or the branch of an ``if`` (or
    #: conditional expression) whose other branch uses FSDP2's names (the dispatch the codemod
    #: keeps without ``--drop-fsdp1-branches``)
    fsdp1_dual: list[str] = field(default_factory=list)


def read(path: str, text: str, handed_on: Mapping[str, str] | None = None) -> Reading:
    """What one file holds (raises ``SyntaxError`` when it does not parse); ``handed_on``: the
    FSDP1 names other modules of the run import (``from pkg import FSDP`` is torch's)."""
    tree = ast.parse(text)
    handed_on = handed_on or {}
    names = {local: handed_on.get(q, q) for local, q in _imported(tree).items()}
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    reading = Reading()
    for qualified, local in _fsdp1_imports(tree, handed_on):
        dual = _only_in_dual_dispatch(tree, local, names, parents)
        (reading.fsdp1_dual if dual else reading.fsdp1_imports).append(qualified)
    ddp_names = _bound_to(tree, names, _DDP)
    helpers = _version_helpers(tree, names)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            qualified = _qualified(node.func, names)
            if qualified in _FSDP1_CLASS or (
                qualified == "functools.partial"
                and node.args
                and _qualified(node.args[0], names) in _FSDP1_CLASS
            ):
                reading.fsdp1_constructors += 1
            elif qualified in _FSDP2_BUILDERS:
                reading.fsdp2_constructors += 1
            if qualified in _BRIDGE or (
                qualified == "functools.partial"
                and node.args
                and _qualified(node.args[0], names) in _BRIDGE
            ):
                reading.bridges += 1
        what = _fsdp1_use(node, names, parents.get(node))
        if what is None:
            continue
        if isinstance(getattr(node, "ctx", None), (ast.Store, ast.Del)):
            continue  # an attribute set or deleted is no call: nn.Module takes it on FSDP2 too
        receiver = node.value if isinstance(node, ast.Attribute) else None
        if receiver is not None and isinstance(receiver, ast.Name) and receiver.id in ddp_names:
            continue
        if not _behind_fsdp1_test(node, parents, names, helpers):
            reading.live.append(f"{path}:{node.lineno}: {what}")  # type: ignore[attr-defined]
    return reading


def _fsdp1_use(node: ast.AST, names: dict[str, str], parent: ast.AST | None) -> str | None:
    """``FSDP.x`` static use, or an FSDP1 method/attribute on a receiver other than self."""
    if not isinstance(node, ast.Attribute):
        return None
    if _qualified(node.value, names) in _FSDP1_CLASS:
        return f"FSDP.{node.attr}"
    receiver = node.value
    if isinstance(receiver, ast.Name) and receiver.id in ("self", "cls"):
        return None
    if _qualified(receiver, names) is not None:  # a module or class imported here
        return None
    if node.attr in _ATTRIBUTES:
        return f".{node.attr}"
    if node.attr not in _METHODS:
        return None
    call = parent if isinstance(parent, ast.Call) and parent.func is node else None
    if node.attr == "clip_grad_norm_" and _takes_parameters(call):
        return None  # torch's signature (parameters, max_norm): not FSDP1's method
    return f".{node.attr}()"


def _takes_parameters(call: ast.Call | None) -> bool:
    if call is None or not call.args:
        return any(k.arg == "parameters" for k in call.keywords) if call else False
    first = call.args[0]
    if isinstance(first, (ast.List, ast.ListComp, ast.GeneratorExp, ast.Tuple)):
        return True
    return not isinstance(first, ast.Constant) and "param" in ast.unparse(first).lower()


def _behind_fsdp1_test(
    node: ast.AST,
    parents: dict[ast.AST, ast.AST],
    names: dict[str, str],
    helpers: dict[str, dict[str, object]],
) -> bool:
    """Behind a test no FSDP2 model passes (``_no_fsdp2``)."""

    def passes(test: ast.AST, holds: bool) -> bool:
        return _no_fsdp2(test, names, holds, helpers)

    child = node
    while child in parents:
        parent = parents[child]
        if isinstance(parent, ast.BoolOp) and isinstance(parent.op, ast.And):
            earlier = parent.values[: parent.values.index(child)]  # type: ignore[arg-type]
            if any(passes(v, True) for v in earlier):
                return True
        if isinstance(parent, (ast.If, ast.IfExp)) and child is parent.body:
            if passes(parent.test, True):
                return True
        if isinstance(parent, ast.If):
            if child in parent.body and passes(parent.test, True):
                return True
            if child in parent.orelse and passes(parent.test, False):
                return True
        for block in (getattr(parent, "body", None), getattr(parent, "orelse", None)):
            if isinstance(block, list) and child in block:
                for earlier in block[: block.index(child)]:
                    if (
                        isinstance(earlier, ast.If)
                        and not earlier.orelse
                        and isinstance(earlier.body[-1], _JUMPS)
                        and passes(earlier.test, False)
                    ):
                        return True
        child = parent
    return False


def _no_fsdp2(
    test: ast.AST, names: dict[str, str], holds: bool, helpers: dict[str, dict[str, object]]
) -> bool:
    """``test`` being ``holds`` implies that something is no FSDP2 module: an FSDP1 test
    (``_asserts``), a denied ``isinstance(x, FSDPModule)``, or a comparison of a version
    helper's answer (``_version_helpers``) that the FSDP2 answer fails."""
    if _asserts(test, names, holds):
        return True
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _no_fsdp2(test.operand, names, not holds, helpers)
    if isinstance(test, ast.BoolOp):
        wanted = ast.And if holds else ast.Or
        return isinstance(test.op, wanted) and any(
            _no_fsdp2(v, names, holds, helpers) for v in test.values
        )
    if isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and len(test.args) == 2:
        if test.func.id == "isinstance" and not holds:
            return _type_kind(test.args[1], names) == "fsdp2"
        return False
    if not (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.left, ast.Call)
        and isinstance(test.left.func, ast.Name)
        and test.left.func.id in helpers
        and isinstance(test.comparators[0], ast.Constant)
    ):
        return False
    operation = _OPERATORS.get(type(test.ops[0]))
    if operation is None:
        return False
    try:
        result = operation(helpers[test.left.func.id]["fsdp2"], test.comparators[0].value)
    except TypeError:
        return False
    return bool(result) != holds


#: How a version helper's answer is compared.
_OPERATORS = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Is: operator.is_,
    ast.IsNot: operator.is_not,
}


def _version_helpers(tree: ast.AST, names: dict[str, str]) -> dict[str, dict[str, object]]:
    """Module-level functions of one parameter, defined once, that only return a constant per
    type: ``if isinstance(p, FSDP): return 1 / elif isinstance(p, FSDPModule): return 2 /
    else: return 0`` -> ``{"fsdp1": 1, "fsdp2": 2, "other": 0}`` (the FSDP1 test may be
    missing: only FSDP2's answer matters here)."""
    body = getattr(tree, "body", [])
    defined = [s.name for s in body if isinstance(s, (ast.FunctionDef, ast.ClassDef))]
    assigned = {
        t.id
        for s in body
        if isinstance(s, ast.Assign)
        for t in s.targets
        if isinstance(t, ast.Name)
    }
    out = {}
    for function in body:
        if not (
            isinstance(function, ast.FunctionDef)
            and not function.decorator_list
            and len(function.args.args) == 1
            and not (function.args.vararg or function.args.kwarg or function.args.kwonlyargs)
            and defined.count(function.name) == 1
            and function.name not in assigned
        ):
            continue
        answers = _answers(function.body, function.args.args[0].arg, names)
        if answers is not None and {"fsdp2", "other"} <= set(answers):
            out[function.name] = answers
    return out


def _answers(
    statements: list[ast.stmt], parameter: str, names: dict[str, str]
) -> dict[str, object] | None:
    """The constants a chain of ``if isinstance(<parameter>, T): return c`` returns per type."""
    found: dict[str, object] = {}
    rest = [
        s for s in statements if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
    ]
    while rest:
        statement = rest.pop(0)
        if isinstance(statement, ast.Return) and isinstance(statement.value, ast.Constant):
            found.setdefault("other", statement.value.value)
            return found
        test = getattr(statement, "test", None)
        if not (
            isinstance(statement, ast.If)
            and isinstance(test, ast.Call)
            and isinstance(test.func, ast.Name)
            and test.func.id == "isinstance"
            and len(test.args) == 2
            and isinstance(test.args[0], ast.Name)
            and test.args[0].id == parameter
            and len(statement.body) == 1
            and isinstance(statement.body[0], ast.Return)
            and isinstance(statement.body[0].value, ast.Constant)
        ):
            return None
        kind = _type_kind(test.args[1], names)
        if kind is None or kind in found:
            return None
        found[kind] = statement.body[0].value.value
        rest = [*statement.orelse, *rest]
    return None


def _type_kind(kinds: ast.AST, names: dict[str, str]) -> str | None:
    """ "fsdp1" for FSDP1's class (or a tuple of its spellings), "fsdp2" for ``FSDPModule``."""
    elements = kinds.elts if isinstance(kinds, ast.Tuple) else [kinds]
    qualified = [_qualified(e, names) or "" for e in elements]
    if elements and all(q in _FSDP1_CLASS for q in qualified):
        return "fsdp1"
    if elements and all(q.rsplit(".", 1)[-1] == "FSDPModule" and "fsdp" in q for q in qualified):
        return "fsdp2"
    return None


def _asserts(test: ast.AST, names: dict[str, str], holds: bool) -> bool:
    """``test`` being ``holds`` implies that something is an FSDP1 instance."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _asserts(test.operand, names, not holds)
    if isinstance(test, ast.BoolOp):
        wanted = ast.And if holds else ast.Or
        return isinstance(test.op, wanted) and any(_asserts(v, names, holds) for v in test.values)
    if not (holds and isinstance(test, ast.Call) and len(test.args) == 2):
        return False
    if (
        isinstance(test.func, ast.Name)
        and test.func.id == "hasattr"
        and isinstance(test.args[1], ast.Constant)
        and test.args[1].value in _ATTRIBUTES | _METHODS
    ):
        return True  # hasattr(m, "_fsdp_wrapped_module"): false on FSDP2 models
    if not (isinstance(test.func, ast.Name) and test.func.id == "isinstance"):
        return False
    kinds = test.args[1]
    elements = kinds.elts if isinstance(kinds, ast.Tuple) else [kinds]
    return all(_qualified(e, names) in _FSDP1_CLASS for e in elements)


def _bound_to(tree: ast.AST, names: dict[str, str], classes: set[str]) -> set[str]:
    """Names assigned an instance of ``classes``, also through methods that return the module
    itself (``DDP(m).to(device)``)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            value = node.value
            while (
                isinstance(value.func, ast.Attribute)
                and value.func.attr in _RETURN_SELF
                and isinstance(value.func.value, ast.Call)
            ):
                value = value.func.value
            if _qualified(value.func, names) in classes:
                out |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return out


def _fsdp1_imports(tree: ast.AST, handed_on: Mapping[str, str]) -> list[tuple[str, str]]:
    """The FSDP1 names imported anywhere in the file, with the name each binds: from
    ``torch.distributed.fsdp`` (or its FSDP1 submodules) anything that is not FSDP2's; a whole
    FSDP1 submodule; one another module of the run hands on."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out += [
                (handed_on[f"{node.module}.{a.name}"], a.asname or a.name)
                for a in node.names
                if f"{node.module}.{a.name}" in handed_on
            ]
            if node.module == "torch.distributed.fsdp" or node.module.startswith(
                "torch.distributed.fsdp."
            ):
                if node.module.startswith("torch.distributed.fsdp._fully_shard"):
                    continue
                out += [
                    (f"{node.module}.{a.name}", a.asname or a.name)
                    for a in node.names
                    if a.name not in _FSDP2_NAMES
                ]
            elif node.module == "torch.distributed":
                out += [
                    (f"torch.distributed.{a.name}", a.asname or a.name)
                    for a in node.names
                    if a.name == "fsdp"
                ]
        elif isinstance(node, ast.Import):
            out += [
                (a.name, a.asname or a.name.split(".")[0])
                for a in node.names
                if a.name.startswith("torch.distributed.fsdp.")
                and not a.name.startswith("torch.distributed.fsdp._fully_shard")
            ]
    return out


def _only_in_dual_dispatch(
    tree: ast.AST, local: str, names: dict[str, str], parents: dict[ast.AST, ast.AST]
) -> bool:
    """Every read of ``local`` is in an FSDP1 part of a dual-version dispatch (``Reading``)."""
    reads = [n for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == local]
    reads = [n for n in reads if isinstance(n.ctx, ast.Load)]
    return bool(reads) and all(_in_dual_dispatch(n, names, parents) for n in reads)


def _in_dual_dispatch(
    node: ast.AST, names: dict[str, str], parents: dict[ast.AST, ast.AST]
) -> bool:
    child, parent = node, parents.get(node)
    while parent is not None:
        if isinstance(parent, ast.Tuple) and _is_type_test_tuple(parent, parents):
            if any(_names_fsdp2(e, names) for e in parent.elts):
                return True
        if isinstance(parent, (ast.If, ast.IfExp)) and child is not parent.test:
            body = parent.body if isinstance(parent.body, list) else [parent.body]
            orelse = parent.orelse if isinstance(parent.orelse, list) else [parent.orelse]
            other = orelse if any(child is b for b in body) else body
            if any(_names_fsdp2(s, names) for s in other):
                return True
        child, parent = parent, parents.get(parent)
    return False


def _is_type_test_tuple(node: ast.Tuple, parents: dict[ast.AST, ast.AST]) -> bool:
    call = parents.get(node)
    return (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Name)
        and call.func.id in ("isinstance", "issubclass")
        and len(call.args) == 2
        and call.args[1] is node
    )


def _names_fsdp2(tree: ast.AST, names: dict[str, str]) -> bool:
    """Whether ``tree`` reads one of FSDP2's public names."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Name, ast.Attribute)):
            qualified = _qualified(node, names) or ""
            if qualified.rsplit(".", 1)[-1] in _FSDP2_NAMES and "fsdp" in qualified:
                return True
    return False


def _imported(tree: ast.AST) -> dict[str, str]:
    """Local name -> qualified name, for every import anywhere in the file."""
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    out[alias.asname] = alias.name
                else:
                    head = alias.name.split(".")[0]
                    out[head] = head
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                out[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return out


def _qualified(node: ast.AST, names: dict[str, str]) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in names:
        return None
    return ".".join([names[node.id], *reversed(parts)])
