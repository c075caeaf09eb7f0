"""The text of the plain FSDP2 form: the call's new arguments and the lines before it.

In FSDP1's order: its states are broadcast from rank 0 (``sync_module_states``), floating
buffers take ``buffer_dtype``, the policy's units are sharded children first (BatchNorm units
in full precision where FSDP1 kept them so), then the root. ``device_id``: FSDP1 moved each
unit's states to it as it sharded that unit, never the whole model at once, and ``fully_shard``
moves each unit's states to its mesh's device in the same way; only a broadcast needs them
there first, so with ``sync_module_states`` each unit's states not yet sharded move and are
broadcast just before its ``fully_shard`` (the whole module, when it is the only unit). Lines
longer than 100 characters are split one argument a line, as a formatter would.
"""

from __future__ import annotations

import ast

from fsdp2_port.codemods import calls
from fsdp2_port.codemods.analysis import FileAnalysis
from fsdp2_port.codemods.rules.constructors.values import ROOT, UNIT, Pure
from fsdp2_port.codemods.text import Edit

_LINE_LENGTH = 100


def module_name(
    analysis: FileAnalysis, statement: ast.stmt, pure: Pure, own_target: bool = True
) -> str:
    """What the emitted code calls the module: its own text, or, when it is an expression
    read more than once, the name it is bound to first (the statement's own target when
    ``own_target``, the call being the statement's value, or a fresh ``module``)."""
    assert pure.module is not None
    if not pure.hoisted:
        return analysis.source(pure.module)
    targets = getattr(statement, "targets", None)
    if own_target and targets and len(targets) == 1 and calls.is_simple(targets[0]):
        return analysis.source(targets[0])
    scope = analysis.names.scope_of(statement)
    for name in ("module", "fsdp_module", "fsdp2_module"):
        if analysis.names.lookup(name, scope)[0] is None:
            return name
    return "fsdp2_root_module"


def argument_edits(
    analysis: FileAnalysis, call: ast.Call, pure: Pure, module: str, callee: str
) -> list[Edit]:
    """Every FSDP1 argument but the module goes; the FSDP2 keywords take the place of the
    first of them (lined up with the parenthesis of ``callee``, the call's new name, when the
    arguments were lined up with the old one's); a hoisted module is read from its name."""
    assert pure.module is not None
    edits = [analysis.replace(pure.module, module)] if pure.hoisted else []
    dropped = [a.node for a in calls.arguments(call) if a.value is not pure.module]
    if not dropped:
        return edits
    opening = analysis.text.index("(", analysis.lines.end(call.func))
    closing = analysis.lines.end(call) - 1
    inside = analysis.text[opening + 1 : closing]
    if not pure.root and "\n" in inside and "#" not in inside:
        return [Edit(opening + 1, closing, module)]  # fully_shard(model): one line again
    first = analysis.lines.start(dropped[0])
    own_line = not analysis.text[analysis.lines.line_start(first) : first].strip()
    newline, indent = analysis.lines.newline(), analysis.lines.indent_at(first)
    shift = len(callee) - len(analysis.source(call.func))
    if own_line and shift and indent == " " * (opening + 1 - analysis.lines.line_start(opening)):
        indent = " " * (len(indent) + shift)  # lined up with the parenthesis, which moves
        edits.append(Edit(analysis.lines.line_start(first), first, indent))
    separator = f",{newline}{indent}" if own_line else ", "
    replace = {dropped[0]: separator.join(pure.root)} if pure.root else {}
    return edits + calls.edit_arguments(analysis.lines, call, set(dropped) - set(replace), replace)


def lines_before(analysis: FileAnalysis, statement: ast.stmt, pure: Pure, root: str) -> str:
    """What runs before the root's ``fully_shard``, at the statement's indentation."""
    indent = analysis.lines.indent_at(analysis.statement_start(statement))
    newline = analysis.lines.newline()
    unit = indent_unit(analysis)
    out = []
    if pure.hoisted:
        out.append(f"{indent}{root} = {analysis.source(pure.module)}")  # type: ignore[arg-type]
    for name, value in pure.bound_first:
        first, *rest = value.replace(ROOT, root).split("\n")
        line = f"{indent}{name} = {first}"
        split = None if rest or len(line) <= _LINE_LENGTH else _arguments(first)
        choice = None if rest or len(line) <= _LINE_LENGTH else _choice(first)
        if split is not None:
            out += _call(f"{name} = {split[0]}", split[1], indent, unit).splitlines()
        elif choice is not None:  # one part a line, in parentheses, as a formatter would
            out += [f"{indent}{name} = (", *(indent + unit + part for part in choice), f"{indent})"]
        else:
            out += [line, *(indent + line for line in rest)]
    if pure.init_fn is not None:
        arguments = [root, pure.init_fn]
        if pure.selects is not None:
            arguments.append(f"is_unit=lambda unit: {pure.selects.replace(UNIT, 'unit')}")
        if pure.device is not None:
            arguments.append(f"device={pure.device}")
        out += _call("fsdp2_port.materialize_like_fsdp1", arguments, indent, unit).splitlines()
    free = _free(analysis, statement, "group", "tensor")
    if pure.sync is not None and not pure.moves_per_unit:
        if pure.device is not None:
            out.append(f"{indent}{root}.to({pure.device})")  # the module is FSDP1's only unit
        out += _sync(pure, root, indent, unit, free)
    if pure.buffer_dtype is not None:
        owners = _free(analysis, statement, "owner", "buffer")
        out += _buffer_casts(pure, root, indent, unit, owners)
    if pure.selects is not None:
        out += _units(analysis, statement, pure, root, indent, unit, free)
    if pure.moves_per_unit:
        out += _unit_states(pure, root, indent, unit, free)
    return "".join(line + newline for line in out)


def dropped_notes(analysis: FileAnalysis, statement: ast.stmt, pure: Pure) -> str:
    """A comment line for each FSDP1 performance argument the call gives, which the plain form
    drops (they change no numbers): what FSDP2 does instead (torch 2.13's ``fully_shard``)."""
    indent = analysis.lines.indent_at(analysis.statement_start(statement))
    notes = [_dropped(name) for name in pure.values]
    return "".join(f"{indent}# {n}{analysis.lines.newline()}" for n in notes if n is not None)


def _dropped(name: str) -> str | None:
    if name == "forward_prefetch":  # FSDP2 overlaps the next unit's all-gather implicitly
        return "forward_prefetch: dropped; FSDP2's is FSDPModule.set_modules_to_forward_prefetch"
    if name == "backward_prefetch":
        return "backward_prefetch: dropped; FSDP2 always prefetches the next unit (BACKWARD_PRE)"
    if name == "limit_all_gathers":
        return "limit_all_gathers: dropped; FSDP2 always keeps at most two all-gathers in flight"
    return None


def _free(analysis: FileAnalysis, statement: ast.stmt, *bases: str) -> tuple[str, ...]:
    """For each base, a loop variable not bound where the statement runs (the base, or it
    prefixed ``fsdp_``, ``fsdp2_``), so that the emitted loops rebind none of the code's."""
    scope = analysis.names.scope_of(statement)
    out = []
    for base in bases:
        for name in (base, f"fsdp_{base}", f"fsdp2_{base}"):
            if analysis.names.lookup(name, scope)[0] is None:
                break
        out.append(name)
    return tuple(out)


def _sync(pure: Pure, root: str, indent: str, unit: str, free: tuple[str, ...]) -> list[str]:
    """FSDP1's ``sync_module_states``: every parameter and buffer broadcast from the first
    rank of its group; over each dimension of a mesh that may have two (HSDP: across
    replicas, then within the shard group, as FSDP1 did)."""
    group, tensor = free
    out = [f"{indent}if {pure.sync}:"] if pure.sync else []
    inner = indent + (unit if pure.sync else "")
    source = "src=0"  # FSDP1 broadcast from its group's first rank
    if pure.mesh_any_dims:
        mesh = pure.group_mesh
        out.append(f"{inner}for {group} in {mesh}.get_all_groups():  # sync_module_states")
        inner += unit
        source = f"group={group}, group_src=0"
    elif pure.group_mesh is not None:
        source = f"group={pure.group_mesh}.get_group(), group_src=0"
    comment = "" if pure.mesh_any_dims else "  # sync_module_states"
    out.append(f"{inner}for {tensor} in [*{root}.parameters(), *{root}.buffers()]:{comment}")
    out.append(f"{inner}{unit}torch.distributed.broadcast({tensor}.detach(), {source})")
    return out


def _unit_states(
    pure: Pure, target: str, indent: str, unit: str, free: tuple[str, ...]
) -> list[str]:
    """``device_id`` with ``sync_module_states`` and units, for one unit (or the root's rest):
    its states that no unit sharded yet (a sharded one is a ``DTensor``) move to the device and
    are broadcast from the first rank of their group, as FSDP1 did unit by unit: never more
    than one unit's unsharded states on the device beyond what FSDP1 held."""
    group, tensor = free
    out = [f"{indent}if {pure.sync}:"] if pure.sync else []
    inner = indent + (unit if pure.sync else "")
    out.append(
        f"{inner}for {tensor} in [*{target}.parameters(), *{target}.buffers()]:"
        "  # device_id, sync_module_states"
    )
    out.append(f"{inner}{unit}if not isinstance({tensor}, DTensor):  # not sharded yet")
    inner += unit + unit
    out.append(f"{inner}{tensor}.data = {tensor}.to({pure.device})")
    if pure.mesh_any_dims:
        out.append(f"{inner}for {group} in {pure.group_mesh}.get_all_groups():")
        source = f"group={group}, group_src=0"
        inner += unit
    elif pure.group_mesh is not None:
        source = f"group={pure.group_mesh}.get_group(), group_src=0"
    else:
        source = "src=0"  # FSDP1 broadcast from its group's first rank
    out.append(f"{inner}torch.distributed.broadcast({tensor}.detach(), {source})")
    return out


def _buffer_casts(
    pure: Pure, root: str, indent: str, unit: str, free: tuple[str, ...]
) -> list[str]:
    """FSDP1's ``buffer_dtype``: floating buffers take it (not those of the BatchNorm units it
    keeps in full precision); a dtype only known at run time may be None: no cast then."""
    dtype = pure.buffer_dtype
    known = dtype is not None and dtype.startswith("torch.")
    when = [pure.buffer_when] if pure.buffer_when else []
    when += [] if known else [f"{dtype} is not None"]
    head = indent + unit if when else indent
    out = [f"{indent}if {' and '.join(when)}:"] if when else []
    owner, buffer = free
    kept = [f"{owner} not in {pure.ignored_modules}"] if pure.ignored_modules else []
    if pure.full_precision_norms is not None:
        norm = f"isinstance({owner}, {pure.norms})"
        # FSDP1 keeps them in full precision only under a policy
        kept.append(f"not ({pure.selects_when} and {norm})" if pure.selects_when else f"not {norm}")
    if kept:
        out += [
            f"{head}for {owner} in {root}.modules():  # buffer_dtype",
            f"{head}{unit}if {' and '.join(kept)}:",
            f"{head}{unit}{unit}for {buffer} in {owner}.buffers(recurse=False):",
            f"{head}{unit * 3}if {buffer}.is_floating_point():",
            f"{head}{unit * 4}{buffer}.data = {buffer}.to({dtype})",
        ]
    else:
        out += [
            f"{head}for {buffer} in {root}.buffers():  # buffer_dtype",
            f"{head}{unit}if {buffer}.is_floating_point():",
            f"{head}{unit}{unit}{buffer}.data = {buffer}.to({dtype})",
        ]
    return out


def _units(
    analysis: FileAnalysis,
    statement: ast.stmt,
    pure: Pure,
    root: str,
    indent: str,
    unit: str,
    free: tuple[str, ...],
) -> list[str]:
    """The loop that shards the policy's units, children first (under the test a grown dict
    holds the policy under), none in an ignored subtree."""
    (name,) = _free(analysis, statement, "submodule")
    out = [f"{indent}if {pure.selects_when}:"] if pure.selects_when else []
    indent += unit if pure.selects_when else ""
    inner = indent + unit + unit
    states = _unit_states(pure, name, inner, unit, free) if pure.moves_per_unit else []
    out.append(f"{indent}for {name} in reversed(list({root}.modules())):")
    chosen = f"{name} is not {root}"
    if pure.ignored_modules:
        chosen += f" and {name} not in {pure.ignored_modules}"  # FSDP1 stops at them
    if pure.full_precision_norms is not None:
        norms = (
            "mp_policy=MixedPrecisionPolicy(param_dtype=torch.float32, "
            f"output_dtype={pure.full_precision_norms})"
        )
        # FSDP1 wrapped them with the root's arguments, mixed precision aside
        same = [k for k in pure.children if not k.startswith("mp_policy=")]
        when = f" and {pure.norms_when}" if pure.norms_when else ""
        out.append(f"{indent}{unit}if {chosen}{when} and isinstance({name}, {pure.norms}):")
        out += states + _shard(name, [*same, norms], inner, unit).splitlines()
        keyword = "elif"
    else:
        keyword = "if"
    selects = pure.selects.replace(UNIT, name)  # type: ignore[union-attr]
    out.append(f"{indent}{unit}{keyword} {chosen} and {selects}:")
    out += states + _shard(name, pure.children, inner, unit).splitlines()
    return out


def _arguments(text: str) -> tuple[str, list[str]] | None:
    """A one-line call's function and argument texts, to be written one a line; None for
    anything else."""
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError:
        return None
    if not isinstance(node, ast.Call):
        return None
    arguments = [ast.get_source_segment(text, a) for a in node.args]
    for keyword in node.keywords:
        value = ast.get_source_segment(text, keyword.value)
        arguments.append(f"**{value}" if keyword.arg is None else f"{keyword.arg}={value}")
    function = ast.get_source_segment(text, node.func)
    if function is None or None in arguments:
        return None
    return function, arguments  # type: ignore[return-value]


def _choice(text: str) -> list[str] | None:
    """A one-line ``a if b else c`` as the lines ``a``, ``if b``, ``else c``; None for anything
    else."""
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError:
        return None
    if not isinstance(node, ast.IfExp):
        return None
    parts = [ast.get_source_segment(text, n) for n in (node.body, node.test, node.orelse)]
    if None in parts:
        return None
    return [parts[0], f"if {parts[1]}", f"else {parts[2]}"]  # type: ignore[list-item]


def _shard(target: str, keywords: list[str], indent: str, unit: str) -> str:
    return _call("fully_shard", [target, *keywords], indent, unit)


def _call(function: str, arguments: list[str], indent: str, unit: str) -> str:
    """A call statement, split one argument a line when it would pass the line length (and
    a tuple argument one element a line, when it still would)."""
    call = f"{indent}{function}({', '.join(arguments)})"
    if len(call) <= _LINE_LENGTH:
        return call
    listed = "".join(_argument_lines(x, indent + unit, unit) for x in arguments)
    return f"{indent}{function}(\n{listed}{indent})"


def _argument_lines(argument: str, indent: str, unit: str) -> str:
    """``argument,`` on its own line; a tuple (``optional=("a", "b")``) too long for it is
    written one element a line."""
    line = f"{indent}{argument},\n"
    keyword, _, value = argument.partition("=")
    if len(line) <= _LINE_LENGTH + 1 or not (value.startswith("(") and keyword.isidentifier()):
        return line
    try:
        parsed = ast.parse(value, mode="eval").body
    except SyntaxError:
        return line
    if not isinstance(parsed, ast.Tuple) or not parsed.elts:
        return line
    elements = "".join(f"{indent}{unit}{ast.get_source_segment(value, e)},\n" for e in parsed.elts)
    return f"{indent}{keyword}=(\n{elements}{indent}),\n"


def indent_unit(analysis: FileAnalysis) -> str:
    """The file's own indentation step (four spaces when it has no indented line)."""
    for statement in analysis.names.by_type[ast.FunctionDef] + analysis.names.by_type[ast.ClassDef]:
        body = getattr(statement, "body", None)
        if body:
            outer = analysis.lines.indent_at(analysis.statement_start(statement))  # type: ignore[arg-type]
            inner = analysis.lines.indent_at(analysis.lines.start(body[0]))
            if inner.startswith(outer) and len(inner) > len(outer):
                return inner[len(outer) :]
    return "    "
