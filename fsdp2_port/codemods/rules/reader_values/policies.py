"""F2P013's wrap policies: each FSDP1 policy as a predicate on the module (or
``size_based_policy``), ``_or_policy`` of such predicates, policies without their own
argument, and a policy a public function returns."""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Iterator

from fsdp2_port.codemods import calls, fsdp1, imports
from fsdp2_port.codemods.assumptions import (
    FSDP1_POLICY_CALL_ARGUMENTS,
    FSDP1_POLICY_RESULTS,
    FSDP1_REQUIRED_POLICY_ARGUMENT,
    FSDP1_SIZE_POLICY_ARGUMENTS,
    FSDP1_WRAP_POLICY_FUNCTIONS,
)
from fsdp2_port.codemods.names import Names
from fsdp2_port.codemods.rules.reader_values.slots import (
    POLICY,
)
from fsdp2_port.codemods.rules.reader_values.tree import (
    _at,
    _called_on,
    _import_bindings,
    _passed,
    _reads,
    _top_import,
    _within,
)
from fsdp2_port.codemods.rules.reader_values.written import Written
from fsdp2_port.codemods.text import LineIndex


def _returned_in_call_shape(
    names: Names, lines: LineIndex, written: list[Written], escapes: set[ast.Return]
) -> list[Written]:
    """A written policy a public function returns, in FSDP1's call shape: the callers the run
    does not see may hand it to FSDP1 (``fsdp2_port.auto_wrap_policy(<predicate>)``)."""
    if not escapes:
        return written
    anchor = _top_import(names.tree)
    assert anchor is not None  # ``_Paths._escapes``
    needed = (imports.after(lines, anchor, "fsdp2_port", None),)
    by_node = {w.node: w for w in written}
    out = list(written)
    for returned in sorted(escapes, key=lambda r: (r.lineno, r.col_offset)):
        value = returned.value
        assert value is not None
        name = value if isinstance(value, ast.Name) and value not in by_node else None
        # a name is bound once (``_Paths._escapes``): to the policy, written or not
        policy = by_node.get(names.bindings_of(name)[0].value if name else value)  # type: ignore[arg-type]
        if policy is None or policy.condition is None:
            continue  # kept as it was, or FSDP1's call shape already (``size_based_policy``)
        if name is not None:
            text = f"fsdp2_port.auto_wrap_policy({name.id})"
            out.append(Written(name, POLICY, text, needed, returned=True))
        else:
            text = f"fsdp2_port.auto_wrap_policy({policy.text})"
            out[out.index(policy)] = dataclasses.replace(
                policy, text=text, imports=policy.imports + needed, returned=True
            )
    return out


def _policies(names: Names, lines: LineIndex) -> Iterator[Written]:
    """``functools.partial`` of FSDP1's lambda or transformer policy with its one argument by
    keyword, and ``ModuleWrapPolicy`` of classes written out, as the predicate it means."""
    yield from _forwarding(names, lines)
    for node in names.by_type[ast.Call]:
        assert isinstance(node, ast.Call)
        if fsdp1.first(names.qualified(node.func)) == "ModuleWrapPolicy":
            given = _module_classes(node)
            if given is not None:
                # it copies its classes when built: only classes written out read the same later
                yield _of_classes(names, lines, node, given, copied=True)
            continue
        if not ("functools.partial" in names.qualified(node.func) and len(node.args) == 1):
            continue
        policy = fsdp1.first(names.qualified(node.args[0]))
        keywords = _own_keywords(node)
        if keywords is None:
            continue
        if policy == "_or_policy":
            either = _either(names, lines, node, keywords)
            if either is not None:
                yield either
            continue
        if policy == "size_based_auto_wrap_policy":
            size_based = _size_based(names, lines, node, keywords)
            if size_based is not None:
                yield size_based
            continue
        if policy == "always_wrap_policy" and not keywords:
            yield _selecting(node, "True")
            continue
        if policy in FSDP1_REQUIRED_POLICY_ARGUMENT.table and not keywords:
            yield _unbound(node, policy)
            continue
        if len(keywords) != 1:
            continue
        keyword = keywords[0]
        if policy == "lambda_auto_wrap_policy" and keyword.arg == "lambda_fn":
            function = lines.source(keyword.value)
            tested = calls.condition(lines, keyword.value, "module") or f"({function})(module)"
            yield Written(node, POLICY, function, condition=tested)
        elif policy == "transformer_auto_wrap_policy" and keyword.arg == "transformer_layer_cls":
            yield _of_classes(names, lines, node, keyword.value, copied=False)


def _module_classes(policy: ast.Call) -> ast.expr | None:
    """``ModuleWrapPolicy``'s one argument, by position or as ``module_classes=``."""
    if len(policy.args) == 1 and not policy.keywords:
        return policy.args[0]
    if not policy.args and len(policy.keywords) == 1:
        if policy.keywords[0].arg == "module_classes":
            return policy.keywords[0].value
    return None


def _of_classes(
    names: Names, lines: LineIndex, node: ast.expr, classes: ast.expr, copied: bool
) -> Written:
    """A policy selecting ``classes`` as a predicate. Read in its body when the predicate reads
    the same later (``_fixed``, no call, not the predicate's own names; written out when the
    policy ``copied`` its collection); else taken as its default, evaluated once where the
    policy was built, as the policy took them (falcon's ``{get_module_class_from_name(model,
    ...)}``): no condition of its own then, so an or-policy does not join it into one (its
    default would be evaluated on every call)."""
    if (
        (_written_out(classes) or not copied)
        and _fixed(names, classes)
        and _free_of_module(classes)
        and _calls_nothing(classes)
    ):
        return _selecting(node, f"isinstance(module, {_as_tuple(lines, classes)})")
    text = f"lambda module, classes={_as_tuple(lines, classes)}: isinstance(module, classes)"
    return Written(node, POLICY, text)


def _forwarding(names: Names, lines: LineIndex) -> Iterator[Written]:
    """``lambda module, recurse, nonwrapped_numel: transformer_auto_wrap_policy(module,
    recurse, nonwrapped_numel, S)`` (S by position or as ``transformer_layer_cls=``, the
    three passed on in order or by keyword): TKGQA's spelling of the partial. As the
    predicate ``lambda module: isinstance(module, tuple(S))``, which reads S on each call as
    the lambda did."""
    for node in names.by_type[ast.Lambda]:
        assert isinstance(node, ast.Lambda)
        arguments = node.args
        own = [a.arg for a in [*arguments.posonlyargs, *arguments.args]]
        call = node.body
        if (
            len(own) != 3
            or arguments.vararg
            or arguments.kwarg
            or arguments.kwonlyargs
            or arguments.defaults
            or not isinstance(call, ast.Call)
            or fsdp1.first(names.qualified(call.func)) != "transformer_auto_wrap_policy"
        ):
            continue
        passed = _passed(call, (*FSDP1_POLICY_CALL_ARGUMENTS.names, "transformer_layer_cls"))
        if passed is None or len(passed) != 4:
            continue
        forwarded = [passed[n] for n in FSDP1_POLICY_CALL_ARGUMENTS.names]
        classes = passed["transformer_layer_cls"]
        if not all(isinstance(f, ast.Name) and f.id == n for f, n in zip(forwarded, own)) or any(
            isinstance(n, ast.Name) and n.id in own for n in ast.walk(classes)
        ):
            continue
        tested = f"isinstance({own[0]}, {_as_tuple(lines, classes)})"
        condition = tested if own[0] == "module" else None
        yield Written(node, POLICY, f"lambda {own[0]}: {tested}", condition=condition)


def _own_keywords(partial: ast.Call) -> list[ast.keyword] | None:
    """A policy ``partial``'s keywords but those every call replaces
    (``FSDP1_POLICY_CALL_ARGUMENTS``, when dropping them drops no side effect); None for ``**``
    keywords."""
    if any(k.arg is None for k in partial.keywords):
        return None
    replaced = [k for k in partial.keywords if k.arg in FSDP1_POLICY_CALL_ARGUMENTS]
    if not all(calls.is_simple(k.value) for k in replaced):
        return None
    return [k for k in partial.keywords if k.arg not in FSDP1_POLICY_CALL_ARGUMENTS]


def _either(
    names: Names, lines: LineIndex, node: ast.Call, keywords: list[ast.keyword]
) -> Written | None:
    """``partial(_or_policy, policies=P)`` as ``lambda module: any(policy(module) for policy in
    P)``: P a list or tuple written here, or a name bound once to one and otherwise only
    extended (``.extend([...])``, ``.append(p)``), each policy a name bound once to a policy
    or one written in place. FSDP1 asks an or of predicates nothing but each predicate."""
    if len(keywords) != 1 or keywords[0].arg != "policies":
        return None
    given = keywords[0].value
    if not (_fixed(names, given) and _free_of_module(given)):
        return None
    members = _or_members(names, given)
    if members is None:
        return None
    condition = _either_condition(lines, given, {})
    return Written(node, POLICY, f"lambda module: {condition}", (), condition, tuple(members))


def _selecting(node: ast.expr, condition: str) -> Written:
    return Written(node, POLICY, f"lambda module: {condition}", condition=condition)


def _either_condition(lines: LineIndex, given: ast.expr, inline: dict[ast.expr, str]) -> str:
    """An or-policy's condition on ``module``: the conditions of the policies written in
    its list (``inline``) joined by ``or``, else each policy called in turn."""
    elements = given.elts if _written_out(given) else []  # type: ignore[attr-defined]
    if elements and all(e in inline for e in elements):
        return " or ".join(inline[e] for e in elements)
    return f"any(policy(module) for policy in {lines.source(given)})"


def _nested_in_place(lines: LineIndex, chosen: list[Written]) -> list[Written]:
    """An or-policy written with the policies written inside its own list (one edit)."""
    inline = {
        m: w
        for w in chosen
        for m in w.members
        if isinstance(w.node, ast.Call) and _within(m, w.node)
    }
    if not inline:
        return chosen
    by_node = {w.node: w for w in chosen}

    def condition_of(written: Written) -> str:
        assert written.condition is not None
        if not written.members:
            return written.condition
        nested = {
            m: _operand(by_node[m], condition_of(by_node[m]))
            for m in written.members
            if m in inline
        }
        given = next(k.value for k in written.node.keywords if k.arg == "policies")  # type: ignore[attr-defined]
        return _either_condition(lines, given, nested)

    return [
        dataclasses.replace(w, text=f"lambda module: {condition_of(w)}") if w.members else w
        for w in chosen
        if w.node not in inline
    ]


def _operand(written: Written, condition: str) -> str:
    """A policy's condition as one operand of ``or`` (an or-policy's own is grouped)."""
    return f"({condition})" if written.members else condition


def _or_members(names: Names, given: ast.expr) -> list[ast.expr] | None:
    """The policies an or-policy's list holds, or None if not all are known here."""
    if _written_out(given):
        elements = list(given.elts)  # type: ignore[attr-defined]
    elif isinstance(given, ast.Name):
        bound = names.bindings_of(given)
        listed = bound[0].value if len(bound) == 1 else None
        if not isinstance(listed, (ast.List, ast.Tuple)) or not _written_out(listed):
            return None
        elements = list(listed.elts)
        scope = names.lookup(given.id, names.scope_of(given))[0]
        for read in _reads(names, scope, given.id) if scope is not None else ():
            added = _added(names, read)
            if added is None:
                return None
            elements += added
    else:
        return None
    members = []
    for element in elements:
        if isinstance(element, ast.Name):
            bound = names.bindings_of(element)
            if len(bound) != 1 or bound[0].value is None:
                return None
            members.append(bound[0].value)
        else:
            members.append(element)
    return members


def _added(names: Names, read: ast.Name) -> list[ast.expr] | None:
    """What a read of a list's name adds to it: ``name.extend([...])`` its elements,
    ``name.append(p)`` ``p``, any other read nothing; None when the elements are unknown."""
    growing = _growing(names, read)
    if growing is None:
        return []
    if len(growing.args) != 1 or growing.keywords:
        return None
    if _called_on(growing, "append") is not None:
        return [growing.args[0]]
    return list(growing.args[0].elts) if _written_out(growing.args[0]) else None  # type: ignore[attr-defined]


def _growing(names: Names, read: ast.Name) -> ast.Call | None:
    """The ``read.extend(...)`` / ``read.append(...)`` call a read of a list's name makes."""
    call = names.parent.get(names.parent.get(read, read))
    if isinstance(call, ast.Call) and _called_on(call, "extend", "append") is read:
        return call
    return None


def _free_of_module(value: ast.expr) -> bool:
    """``value`` reads no name ``module`` or ``policy``, the written lambda's own names."""
    return not any(
        isinstance(n, ast.Name) and n.id in ("module", "policy") for n in ast.walk(value)
    )


def _bare_policies(names: Names, lines: LineIndex) -> Iterator[Written]:
    """FSDP1's policy functions themselves as policies (not in a ``partial``)."""
    for node in [*names.by_type[ast.Name], *names.by_type[ast.Attribute]]:
        assert isinstance(node, (ast.Name, ast.Attribute))
        if not isinstance(node.ctx, ast.Load):
            continue
        policy = fsdp1.first(names.qualified(node))
        if policy not in FSDP1_WRAP_POLICY_FUNCTIONS or not _import_bindings(names, node):
            continue  # not FSDP1's function, or a name bound to it (its value is written)
        parent = names.parent.get(node)
        if isinstance(parent, ast.Attribute) or (
            isinstance(parent, ast.Call) and (parent.func is node or node in parent.args[:1])
        ):
            continue  # a part of a longer name, called, or bound by a partial
        if policy == "always_wrap_policy":
            yield _selecting(node, "True")
            continue
        if policy in FSDP1_REQUIRED_POLICY_ARGUMENT.table:
            yield _unbound(node, policy)
            continue
        written = _size_based(names, lines, node, [])
        if written is not None:
            yield written


def _unbound(node: ast.expr, policy: str) -> Written:
    """``transformer_auto_wrap_policy`` / ``lambda_auto_wrap_policy`` without their own
    argument (OpenRLHF's), FSDP1's function written out: a lambda in its call shape that
    still lacks that argument, so that every call raises ``TypeError`` as FSDP1's does (F2P003
    marks it), and a ``partial`` that gives it the argument selects as FSDP1's would."""
    argument = FSDP1_REQUIRED_POLICY_ARGUMENT[policy]
    given = ", ".join((*FSDP1_POLICY_CALL_ARGUMENTS.names, argument))
    text = f"lambda {given}: recurse or {FSDP1_POLICY_RESULTS[policy]}"
    return Written(node, POLICY, text, call_shape=True)


def _size_based(
    names: Names, lines: LineIndex, node: ast.expr, keywords: list[ast.keyword]
) -> Written | None:
    """``size_based_auto_wrap_policy``, or a ``partial`` of it that passes ``keywords``, as
    ``size_based_policy(...)`` imported from ``fsdp2_port`` right after the statement that
    imported FSDP1's function (the last before the policy, where each branch of a
    ``try``/``except`` imports it)."""
    if not all(k.arg in FSDP1_SIZE_POLICY_ARGUMENTS for k in keywords):
        return None
    bound = _import_bindings(names, node.args[0] if isinstance(node, ast.Call) else node)
    # imported once, or once in each branch that needs it (harold's try/except)
    if not bound or any(b.qualified != bound[0].qualified for b in bound):
        return None
    before = [b.statement for b in bound if b.statement and _at(b.statement) < _at(node)]
    if not before:
        return None
    # the new import goes where the last of them that comes before the policy is
    needed = imports.after(lines, max(before, key=_at), "fsdp2_port", "size_based_policy")
    given = ", ".join(f"{k.arg}={lines.source(k.value)}" for k in keywords)
    return Written(node, POLICY, f"size_based_policy({given})", (needed,), call_shape=True)


def _fixed(names: Names, value: ast.expr) -> bool:
    """Every name ``value`` reads is bound only above it: the predicate reads them when the
    reader calls it, later than the policy read them, and that is the same value only if
    nothing binds them again in between."""
    at = (value.lineno, value.col_offset)
    inside = set(ast.walk(value))  # a lambda's own parameters are bound when it runs
    return all(
        (getattr(b.node, "lineno", 0), getattr(b.node, "col_offset", 0)) < at
        for node in inside
        if isinstance(node, ast.Name)
        for b in names.bindings_of(node)
        if b.node not in inside
    )


def _calls_nothing(classes: ast.expr) -> bool:
    """No call among the classes: a predicate would make it again on every module it asks
    about (``layer_class(model)``), where the policy made it once."""
    return not any(isinstance(n, ast.Call) for n in ast.walk(classes))


def _written_out(classes: ast.expr) -> bool:
    return isinstance(classes, (ast.Set, ast.List, ast.Tuple)) and not any(
        isinstance(e, ast.Starred) for e in classes.elts
    )


def _as_tuple(lines: LineIndex, classes: ast.expr) -> str:
    """A tuple's text for a collection of classes: written out when it is a literal."""
    if _written_out(classes):
        items = [lines.source(e) for e in classes.elts]  # type: ignore[attr-defined]
        return f"({', '.join(items)}{',' if len(items) == 1 else ''})"
    return f"tuple({lines.source(classes)})"
