"""F2P013: FSDP1 values that only fsdp2_port reads are written without FSDP1.

Where an FSDP1 argument was chosen at run time, the plain rewrite reads it with a reader
(``mesh_like_fsdp1``, ``reshard_after_forward_like_fsdp1``, ``units_like_fsdp1``,
``mp_policy_like_fsdp1``, ``buffer_dtype_like_fsdp1``, ``offload_policy_like_fsdp1``), or hands it
to the bridge (``fully_shard_like_fsdp1``) or to ``fsdp2_port.state_dict_type``; each also takes an
FSDP1-free spelling of the value. Once these are a value's only readers, the value is written that
way where the program builds it, and the file no longer needs FSDP1 for it (F2P001 then removes the
import):

- an enum member by its name: ``ShardingStrategy.X``, ``BackwardPrefetch.X``,
  ``StateDictType.X`` -> ``"X"``; ``getattr(ShardingStrategy, s)`` / ``ShardingStrategy[s]``
  -> ``s`` (a dict per config string, a branch per choice, a private module-level map, a
  default parameter);
- a config dataclass as the dict of its fields: ``MixedPrecision(...)``, ``CPUOffload(...)``,
  the state-dict configs -> ``dict(...)`` (arguments by position named);
- a wrap policy that selects by module: ``functools.partial(lambda_auto_wrap_policy,
  lambda_fn=f)`` -> ``f``, ``functools.partial(transformer_auto_wrap_policy,
  transformer_layer_cls=S)`` and ``ModuleWrapPolicy([A, B])`` (classes written out) ->
  ``lambda module: isinstance(module, <the classes as a tuple>)`` (when each name they read is
  bound only above them: the lambda reads them later than the policy did; else ``lambda
  module, classes=<the classes>: isinstance(module, classes)``, read where the policy read
  them), and a lambda passing FSDP1's call on to ``transformer_auto_wrap_policy``: the
  predicate ``units_like_fsdp1`` reads as that policy; ``size_based_auto_wrap_policy`` and its
  ``partial``s -> ``size_based_policy(...)``, imported from ``fsdp2_port`` where FSDP1's
  function was imported; ``always_wrap_policy`` (or its ``partial``) -> ``lambda module: True``;
  ``transformer_auto_wrap_policy`` / ``lambda_auto_wrap_policy`` without their own argument
  (OpenRLHF's; F2P003 marks it) -> FSDP1's function written out, a lambda in its call shape
  that still lacks the argument (every call raises the same ``TypeError``);
  ``functools.partial(_or_policy, policies=P)`` -> ``lambda module:
  any(policy(module) for policy in P)`` (the conditions joined by ``or`` when P is written in
  place), when every policy P holds is written as a predicate too: P is seen whole (a literal,
  or a name bound once to one and otherwise only grown by ``.extend([...])`` / ``.append(p)``)
  and each member's path goes on only into it or to readers; one member that stays keeps all.
  A ``partial`` that also binds ``module``, ``recurse`` or ``nonwrapped_numel`` binds nothing
  (every call passes them by keyword): those keywords are left out. A policy a public function
  of an importable module returns (its calls here reaching readers) is written the same, and
  what the function returns becomes ``fsdp2_port.auto_wrap_policy(<predicate>)``: FSDP1's
  call shape, right for the callers the run does not see, which may hand it to FSDP1.

Two reads besides the readers take either spelling too, written so that they do:

- a member test, ``x == ShardingStrategy.X`` (``!=``, ``in`` / ``not in`` a tuple of
  members), goes by name: ``fsdp2_port.member_name(x) == "X"``, whatever x is (a config
  field the run does not see included); ``is`` stays (by name it would need ``==``);
- a field a config writes out, ``mp.param_dtype``, is read from its dict, ``mp["param_dtype"]``,
  where every binding of ``mp`` is such a config and all of them are written.

The value must reach nothing else. From each value, its path is followed up the tree through
conditional expressions, dict values read only by subscripts (``.get`` too), assignments to a
name, arguments of a function this module defines (to the parameter) or another file of the
run defines (``accepting``: what its parameters take, once that file's rewrites are made), and
``return`` from one (to each call); every read of such a name that the assignment may reach
(``flow.may_reach``: not one after the name is bound again on every path) must continue the
path, and the path must end in a reader's slot for that kind of value, or in one of FSDP2's
where either spelling does the same (``_FSDP2_SLOTS``).
A log line (``print``, a logger's method, an f-string it shows) may also show the value or its
dict: only the text it prints changes. A name qualifies as F2P012 lets it: a local, or a
private or script module-level name (any one no other file mentions, with
``--whole-program``), in a scope the names see through; so does an attribute only its class
reads (``self.x = value``, or ``x = value`` in the class body:
``attributes.own_attribute_reads``), every read of it, or one other files of the run read
too (a base class's settings a script changes, ``obj.d["key"] = value`` included) when no
code outside the run reads it (private, or ``--whole-program``) and every file that reads
``.x`` takes it to readers (``Across.attributes``, by attribute name); a parameter's
default and a parameter given an argument qualify when the function reads the parameter only
that way (other callers may still pass FSDP1's values: the readers take both).
A test ``is None`` / ``is not None`` passes too (neither spelling is None), and a name nothing
reads reaches nothing. Anything else on the way (another comparison, another call, another
attribute, a string the run goes on with) keeps the value as it is. ``x: ShardingStrategy =
<value>`` (an FSDP1 class as the annotation) whose values are all written is annotated with
what it now holds (``str``, ``dict``); so is a parameter (both spellings, as a string, unless
no other file of a whole program spells the class) and a function's return.
"""

from __future__ import annotations

import ast
import re
from typing import ClassVar

from fsdp2_port.codemods.rules.base import Code, Fixes, Tidying
from fsdp2_port.codemods.rules.reader_values import values, written


class ReaderValuesRule:
    """Runs once per file, after every rewrite, with F2P012 (what that removes stays)."""

    STAGE: ClassVar[str] = "after_apply"
    CODE: ClassVar[str] = "F2P013"
    CODES: ClassVar[dict[str, Code]] = {
        "F2P013": Code(
            summary="FSDP1 values read only by fsdp2_port are written without FSDP1",
            topic="values only fsdp2_port reads",
            rewritten=(
                '`ShardingStrategy.X` / `BackwardPrefetch.X` / `StateDictType.X` → `"X"`, '
                "`getattr(ShardingStrategy, s)` / `ShardingStrategy[s]` → `s`; "
                "`MixedPrecision(...)`, `CPUOffload(...)` and the state-dict configs → `dict(...)` "
                "of their fields; `partial(lambda_auto_wrap_policy, lambda_fn=f)` → `f`, "
                "`partial(transformer_auto_wrap_policy, transformer_layer_cls=S)` and "
                "`ModuleWrapPolicy([A, B])` → `lambda module: isinstance(module, ...)`, "
                "`size_based_auto_wrap_policy` (and its `partial`s) → `size_based_policy(...)`, "
                "`always_wrap_policy` → `lambda module: True`, `transformer_auto_wrap_policy` "
                "without `transformer_layer_cls` (and `lambda_auto_wrap_policy` without "
                "`lambda_fn`) → FSDP1's function written out, still lacking it (the same "
                "`TypeError`), a policy a public function returns → "
                "`fsdp2_port.auto_wrap_policy(<predicate>)` (FSDP1's call shape, for callers the "
                "run does not see), `partial(_or_policy, policies=P)` of such predicates → `lambda "
                "module: any(...)`: where the value (through dicts, conditional expressions, "
                "locals, private module-level maps, parameter defaults, attributes only their "
                "class reads, arguments of and returns from functions defined here, arguments of "
                "functions of other files that take it so, and log lines) reaches only the "
                "matching argument of `fsdp2_port`'s readers (`mesh_like_fsdp1`, "
                "`reshard_after_forward_like_fsdp1`, `units_like_fsdp1`, `mp_policy_like_fsdp1`, "
                "`buffer_dtype_like_fsdp1`, `offload_policy_like_fsdp1`), `fully_shard_like_fsdp1` "
                "or `state_dict_type` / `set_state_dict_type`, a slot of `fully_shard` that takes "
                "either spelling alike (`offload_policy`, `mp_policy`, `reshard_after_forward`), a "
                'member test (`x == ShardingStrategy.X` → `fsdp2_port.member_name(x) == "X"`, also '
                'where x is not seen) or a field read (`mp.param_dtype` → `mp["param_dtype"]`)'
            ),
            marked="—",
            proven_by=(
                "tests/test_plain_readers.py::test_plain_form_with_readers_trains_as_fsdp1_did",
                "tests/test_grown_kwargs.py::test_grown_kwargs_with_ignored_modules_train_as_fsdp1_did",
                "tests/test_migrated_scripts.py::test_the_migration_trains_like_the_original[kwargs_policy.py-2-fp32-args0]",
                "tests/test_migrated_scripts.py::test_the_migration_trains_like_the_original[kwargs_policy.py-2-fp32-args1]",
                "tests/test_multifile_programs.py::test_values_built_in_one_file_and_read_in_another_lose_fsdp1",
                "tests/test_like_fsdp1.py::test_spellings_without_fsdp1_build_what_fsdp1s_build",
                "tests/test_readers.py::test_member_tests_by_name_hold_as_the_member_tests_for_either_spelling",
                "tests/test_readers.py::test_configs_as_dicts_of_their_fields_read_as_the_configs",
                "tests/test_fsdp1_api_options.py::test_names_and_dicts_of_fields_mean_fsdp1s_members_and_configs",
            ),
        ),
    }
    NEEDS: ClassVar[tuple[str, ...]] = ("F2P002", "F2P003", "F2P004", "F2P005", "F2P008", "F2P012")
    #: APIs its values call -> ``module:attribute``.
    EMITS: ClassVar[dict[str, str]] = {
        "fsdp2_port.auto_wrap_policy": "fsdp2_port:auto_wrap_policy",
        "fsdp2_port.member_name": "fsdp2_port:member_name",
    }

    def fix(self, tidying: Tidying) -> Fixes:
        names, lines = tidying.names, tidying.lines
        found = [
            w
            for w in values.find(names, lines, tidying.accepts)
            if not any(a <= lines.start(w.node) < b for a, b in tidying.removed)
        ]
        return Fixes(
            edits=[written.edit(lines, w) for w in found]
            + written.annotation_edits(names, lines, found),
            imports=[needed for w in found for needed in w.imports],
            findings=[(_input_offset(tidying, w.node), w.message()) for w in found],
        )


def _input_offset(tidying: Tidying, node: ast.AST) -> int:
    """Where ``node`` of the applied text was in the input: through the edits, or, for a node a
    rewrite moved (its text copied into a replacement), the input's nearest copy of its text."""
    applied, lines = tidying.applied, tidying.lines
    offset = lines.start(node)
    moved = any(
        start <= offset < start + len(edit.replacement)
        for edit, start in zip(applied.edits, applied.starts)
    )
    estimate = tidying.to_input(offset)
    if not moved:
        return estimate
    text = lines.source(node)
    copies = [m.start() for m in re.finditer(re.escape(text), tidying.original)]
    return min(copies, key=lambda i: abs(i - estimate), default=estimate)
