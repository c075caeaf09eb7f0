"""``ignored_modules`` -> ``fully_shard``'s ``ignored_params``, and units kept out of them.

FSDP1 (torch 2.13, ``_init_ignored_module_states``) ignores the subtrees of the modules it is
given: their parameters are neither sharded nor in any unit (children get the root's ignored
parameters), its wrap policy chooses no unit inside them (``_recursive_wrap`` stops there),
``device_id`` leaves their parameters and buffers where they are, and ``buffer_dtype`` does not
cast their buffers. ``fully_shard(..., ignored_params=...)`` neither shards nor moves the
parameters it is given. So the plain form passes the parameters of those subtrees to every
``fully_shard`` (root and units), keeps units out of the subtrees and their buffers out of the
cast. Given under a condition (a grown dict), the subtrees are empty when it does not hold.

Not written out (left to ``fully_shard_like_fsdp1``): ``ignored_states``, and ignored modules
with ``sync_module_states`` or ``param_init_fn`` (whose FSDP1 meaning also skips them) or
a wrap policy only the run knows.
"""

from __future__ import annotations

import ast

from fsdp2_port.codemods import calls
from fsdp2_port.codemods.analysis import FileAnalysis
from fsdp2_port.codemods.rules.constructors.values import Pure, fresh, once, resolved


def ignored(analysis: FileAnalysis, call: ast.Call, out: Pure) -> None:
    """``out.root``/``out.children`` take ``ignored_params``; what it reads is bound first."""
    states = out.values.get("ignored_states")
    if states is not None and not calls.is_none(states):
        value, removable, _ = resolved(analysis, out, "ignored_states")
        if value is None or not _empty(analysis, value):
            out.blockers.append("ignored_states is set")
        elif removable is not None:
            out.removable.append(removable)  # ``ignored = []``: nothing ignored
    given = out.values.get("ignored_modules")
    if given is None or calls.is_none(given):
        return
    value, removable, _ = resolved(analysis, out, "ignored_modules")
    if value is not None and _empty(analysis, value):
        out.removable += [removable] if removable is not None else []
        return
    if out.sync is not None or out.init_fn is not None:
        out.blockers.append("ignored_modules with sync_module_states or param_init_fn")
    if "auto_wrap_policy" in out.read_at_run_time:
        out.blockers.append("ignored_modules with a wrap policy only the run knows")
    test = out.when.get("ignored_modules")
    # under a test, read only where it holds (the grown dict's values have no effect)
    modules = analysis.source(given) if test else once(analysis, call, out, "ignored", given)
    if "\n" in modules:
        out.blockers.append("ignored_modules spans lines under a condition: bind it to a name")
    if given in analysis.made:  # a dict's entry read at run time: None when absent
        modules = f"{modules} or ()"
    if out.blockers:
        return
    params = fresh(analysis, call, out, "ignored_params")
    if out.selects is not None or out.buffer_dtype is not None:
        subtrees = fresh(analysis, call, out, "ignored_modules")
        text = f"{{sub for m in {modules} for sub in m.modules()}}"
        out.bound_first.append((subtrees, f"{text} if {test} else set()" if test else text))
        out.bound_first.append((params, f"{{p for m in {subtrees} for p in m.parameters()}}"))
        out.ignored_modules = subtrees
    else:
        text = f"{{p for m in {modules} for p in m.parameters()}}"
        out.bound_first.append((params, f"{text} if {test} else None" if test else text))
    out.root.append(f"ignored_params={params}")
    out.children.append(f"ignored_params={params}")


def _empty(analysis: FileAnalysis, value: ast.expr) -> bool:
    """An empty container written out (``[]``, ``()``, ``set()``...): nothing to ignore."""
    if isinstance(value, (ast.List, ast.Tuple, ast.Set)):
        return not value.elts
    if isinstance(value, ast.Dict):
        return not value.keys
    return (
        isinstance(value, ast.Call)
        and not value.args
        and not value.keywords
        and bool(
            analysis.names.qualified(value.func)
            & {f"builtins.{t}" for t in ("list", "tuple", "set", "frozenset", "dict")}
        )
    )
