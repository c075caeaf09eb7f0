"""What F2P013 writes: a value's FSDP1-free text (``Written``), its edit, and the annotations
that then say what a name, a parameter or a function's return holds."""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Iterator

from fsdp2_port.codemods import calls, fsdp1
from fsdp2_port.codemods.names import Names
from fsdp2_port.codemods.plan import NeededImport
from fsdp2_port.codemods.rules.reader_values.slots import _CONFIGS, _ENUMS
from fsdp2_port.codemods.rules.reader_values.tree import _branches, _defaulted
from fsdp2_port.codemods.text import Edit, LineIndex


@dataclasses.dataclass(frozen=True)
class Written:
    """One value written without FSDP1: ``node`` (a ``kind``) becomes ``text``, which reads
    the names ``imports`` bind."""

    node: ast.expr
    kind: str
    text: str
    imports: tuple[NeededImport, ...] = ()
    #: For a policy that selects by module (a predicate, not a size-based policy): the
    #: condition it tests on ``module``.
    condition: str | None = None
    #: For ``partial(_or_policy, policies=...)``: the policies it combines, each of which must
    #: be written as a predicate too (the lambda calls each with the module alone).
    members: tuple[ast.expr, ...] = ()
    #: What a public function returns, written in FSDP1's call shape.
    returned: bool = False
    #: Written as a policy FSDP1's call still fits (``size_based_policy(...)``): code that
    #: calls it as FSDP1 calls a policy (harold's own policy function) may read it too.
    call_shape: bool = False
    #: Why it may be written so, when not because only readers read it.
    why: str = "read only by fsdp2_port's readers"

    def message(self) -> str:
        shown = self.text if "\n" not in self.text else self.text.split("(")[0] + "(...)"
        if self.returned:
            return (
                f"{self.kind} a public function returns written as {shown}: FSDP1's call "
                "shape, for callers the run does not see"
            )
        return f"{self.kind} {self.why} written as {shown}"


def _grouped(names: Names, written: Written) -> Written:
    """A lambda written inside an expression that would otherwise end up in its body (a
    branch of a conditional expression, an operand) in parentheses."""
    parent = names.parent.get(written.node)
    if written.text.startswith("lambda ") and isinstance(
        parent, (ast.IfExp, ast.BoolOp, ast.BinOp, ast.UnaryOp, ast.Compare)
    ):
        return dataclasses.replace(written, text=f"({written.text})")
    return written


def edit(lines: LineIndex, written: Written) -> Edit:
    start, end = lines.span(written.node)
    return Edit(start, end, written.text)


def annotation_edits(names: Names, lines: LineIndex, written: list[Written]) -> list[Edit]:
    """``x: ShardingStrategy = <value>`` (an FSDP1 enum or config class as the annotation)
    where every value the statement binds is written: the annotation says what it now holds,
    ``str`` or ``dict`` (``... | None`` in a function, where annotations are never evaluated,
    when a branch binds None)."""
    chosen = {w.node for w in written}
    out = []
    for statement in names.by_type[ast.AnnAssign]:
        assert isinstance(statement, ast.AnnAssign)
        annotated = fsdp1.first(names.qualified(statement.annotation)) or ""
        if annotated in _ENUMS:
            spelled = "str"
        elif annotated in _CONFIGS:
            spelled = "dict"
        else:
            continue
        if statement.value is None:
            continue
        leaves = list(_branches(statement.value))
        if not all(leaf in chosen or calls.is_none(leaf) for leaf in leaves):
            continue
        if any(calls.is_none(leaf) for leaf in leaves):
            if not names.scope_of(statement).is_function:
                continue
            spelled += " | None"
        start, end = lines.span(statement.annotation)
        out.append(Edit(start, end, spelled))
    kinds = {w.node: w.kind for w in written}
    return [
        *out,
        *_parameter_annotations(names, lines, chosen),
        *_return_annotations(names, lines, kinds),
    ]


def _parameter_annotations(names: Names, lines: LineIndex, chosen: set[ast.expr]) -> list[Edit]:
    """``p: StateDictType = <a written default>``: callers may still pass FSDP1's value, so
    the annotation names both, as a string (never evaluated: no import needed at run time,
    nor ``|`` before Python 3.10): ``p: "StateDictType | str" = "FULL_STATE_DICT"``. In a whole
    program where no other file spells the class, no caller passes its members: ``str``."""
    out = []
    for default in chosen:
        arguments = names.parent.get(default)
        argument = _defaulted(arguments, default) if isinstance(arguments, ast.arguments) else None
        if argument is None or argument.annotation is None:
            continue
        annotated = fsdp1.first(names.qualified(argument.annotation)) or ""
        spelled = "str" if annotated in _ENUMS else "dict" if annotated in _CONFIGS else None
        if spelled is None:
            continue
        if not names.seen.spelled_only_here(annotated.rsplit(".", 1)[-1]):
            spelled = f'"{lines.source(argument.annotation)} | {spelled}"'
        out.append(Edit(*lines.span(argument.annotation), spelled))
    return out


def _return_annotations(names: Names, lines: LineIndex, kinds: dict[ast.expr, str]) -> list[Edit]:
    """``def f() -> MixedPrecision:`` that returns written values: annotated with what it
    returns now, a union as a string (evaluated at ``def`` otherwise), ``-> "dict |
    MixedPrecisionPolicy"`` for dolomite's helper of both versions. Each value it returns (a
    conditional's, or a binding's in ``f`` of a name returned) must be written, None or an
    FSDP2 object built there; else the annotation stays."""
    out = []
    for function in [*names.by_type[ast.FunctionDef], *names.by_type[ast.AsyncFunctionDef]]:
        assert isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
        if function.returns is None:
            continue
        annotated = fsdp1.first(names.qualified(function.returns)) or ""
        if annotated not in _ENUMS and annotated not in _CONFIGS:
            continue
        leaves = list(_returned(names, function))
        if not any(v in kinds for leaf in leaves for v in [leaf, *_looked_up(names, leaf)]):
            continue
        spelled = [_returned_type(names, lines, leaf, kinds) for leaf in leaves]
        if None not in spelled:
            text = " | ".join(dict.fromkeys(t for t in spelled if t is not None))
            quoted = text if text in ("str", "dict") else f'"{text}"'
            out.append(Edit(*lines.span(function.returns), quoted))
    return out


def _returned(names: Names, function: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[ast.expr]:
    """The values ``function`` returns: through conditionals, and a returned name's bindings
    in it (the name itself for a binding of another kind: not known)."""
    scope = names.scopes[function]
    for node in ast.walk(function):
        if not isinstance(node, ast.Return) or names.function_of(node) is not function:
            continue
        if node.value is None:
            yield ast.Constant(None)
            continue
        for leaf in _branches(node.value):
            bindings = scope.bindings.get(leaf.id, []) if isinstance(leaf, ast.Name) else []
            if not bindings:
                yield leaf
            for binding in bindings:
                yield from [leaf] if binding.value is None else _branches(binding.value)


def _returned_type(
    names: Names, lines: LineIndex, leaf: ast.expr, kinds: dict[ast.expr, str]
) -> str | None:
    """A returned value's type, spelled for an annotation: ``str`` / ``dict`` when written,
    ``None``, an FSDP2 class built there; None when not known."""
    if leaf in kinds:
        if kinds[leaf] in _ENUMS.values():
            return "str"
        return "dict" if any(kinds[leaf] == kind for kind, _ in _CONFIGS.values()) else None
    if calls.is_none(leaf):
        return "None"
    if isinstance(leaf, ast.Call) and any(fsdp1.fsdp2(q) for q in names.qualified(leaf.func)):
        return lines.source(leaf.func)
    looked_up = _looked_up(names, leaf)
    spelled = {_returned_type(names, lines, value, kinds) for value in looked_up}
    return spelled.pop() if len(spelled) == 1 else None


def _looked_up(names: Names, leaf: ast.expr) -> list[ast.expr]:
    """The values ``d[key]`` may read, ``d`` a name bound once to a dict written out
    (minllm's ``strategy_map[config_strategy]``); none for anything else."""
    if not (isinstance(leaf, ast.Subscript) and isinstance(leaf.value, ast.Name)):
        return []
    bound = names.bindings_of(leaf.value)
    mapping = bound[0].value if len(bound) == 1 else None
    if not isinstance(mapping, ast.Dict) or None in mapping.keys:
        return []  # not a dict written out, or one that spreads another (**d)
    return [value for value in mapping.values if value is not None]
