"""F2P008: FSDP1 state-dict plumbing -> ``torch.distributed.checkpoint.state_dict`` (what
becomes what: ``CODES``).

Invariants: every rewrite here is right under FSDP1 and FSDP2 alike, so none waits for a model
to migrate, except a plain ``m.state_dict()``/``load_state_dict`` of a model built here (FSDP1's
FULL default), which follows its model. LOCAL_STATE_DICT has no FSDP2 form: it holds its model.
FSDP2 gives the full state dict to rank 0 only exactly when it offloads, so ``cpu_offload``
without ``rank0_only`` goes to the runtime form; FSDP1's optimizer configs offload by default
(``FSDP1_DEFAULTS``), so FULL with the default optimizer config does too wherever the block reads
optimizer state. Each DCP call gets the options of its own config.
"""

from __future__ import annotations

import ast
from typing import ClassVar

from fsdp2_port.codemods.analysis import FileAnalysis
from fsdp2_port.codemods.rules.base import Code
from fsdp2_port.codemods.rules.state_dict.contexts import _block_calls, _context
from fsdp2_port.codemods.rules.state_dict.emit import MODULE, _runtime_call
from fsdp2_port.codemods.rules.state_dict.module_calls import _call
from fsdp2_port.codemods.rules.state_dict.saves import one_rank_gathers, saves
from fsdp2_port.codemods.rules.state_dict.walk import _FSDP, CODE, Walk


class StateDictRule:
    STAGE: ClassVar[str] = "analysis"
    CODE: ClassVar[str] = CODE
    CODES: ClassVar[dict[str, Code]] = {
        "F2P008": Code(
            summary=(
                "FSDP.state_dict_type / optim_state_dict / optim_state_dict_to_load -> "
                "get_/set_*_state_dict (fsdp2_port's FSDP1 forms where they are not literal)"
            ),
            topic="state dicts",
            rewritten=(
                "a literal FULL/SHARDED `with FSDP.state_dict_type(...)` whose body takes state "
                "dicts only through the model → the block's calls become "
                "`get_/set_model_state_dict`, `get_/set_optimizer_state_dict` with "
                "`StateDictOptions` (configs read, `optim_state_dict_to_load` in both argument "
                "orders or through a name), the `with` goes; any other shape (runtime type, a "
                "callee such as `trainer.save_model()`, a context returned by a helper, "
                "`set_state_dict_type`) → the same call on `fsdp2_port` (`state_dict_type`, "
                "`set_state_dict_type`, `optim_state_dict`, `optim_state_dict_to_load`), which "
                "behave as FSDP1's on FSDP2 models too, its literal settings said as "
                "`options=StateDictOptions(...)` where DCP's options mean exactly them (configs "
                "bound to a name read only there go); a plain "
                "`m.state_dict()`/`m.load_state_dict(sd)` of a model built here → the full state "
                "dict (FSDP1's default) when it migrates; of a receiver that may also hold other "
                "modules (a helper's parameter, a DDP branch) or under a type set elsewhere in "
                "the file → `fsdp2_port.module_state_dict(m)`/`load_module_state_dict(m, sd)` "
                "(FSDP1's answer on FSDP2, each module's own on DDP and plain modules)"
            ),
            marked=(
                "`LOCAL_STATE_DICT` (no FSDP2 form: its model stays FSDP1); for review, holding "
                "nothing: a gathering rewrite inside a branch only some ranks enter (`if rank "
                "== 0:`: the gather goes before it), `optimizer.state_dict()` of an optimizer "
                "over a migrated model's parameters (this rank's DTensor shards: saved from one "
                "rank it resumes no other), `model.save_pretrained(...)` of a migrated model"
            ),
            proven_by=(
                "tests/test_migrated_scripts.py::test_the_migration_trains_like_the_original[resume.py-2-fp32-args2]",
                "tests/test_multifile_programs.py::test_the_migrated_program_trains_like_the_original[builder_tuple-fp32--]",
                "tests/test_multifile_programs.py::test_the_migrated_program_trains_like_the_original[optim_helpers-fp32--]",
                "tests/test_type_tests_and_scaler.py::test_type_tests_configs_and_scaler_run_as_fsdp1_did",
                "tests/test_demo.py::test_migrated_example_trains_like_the_original",
                "tests/test_fsdp1_api.py::test_model_state_dicts_match_fsdp1",
                "tests/test_fsdp1_api.py::test_optimizer_state_matches_fsdp1",
                "tests/test_fsdp1_api_options.py::test_options_forms_equal_fsdp1_forms_on_fsdp1_and_fsdp2",
            ),
        ),
    }
    NEEDS: ClassVar[tuple[str, ...]] = ("F2P002",)
    EMITS: ClassVar[dict[str, str]] = {
        "StateDictOptions": MODULE + ":StateDictOptions",
        "get_model_state_dict": MODULE + ":get_model_state_dict",
        "set_model_state_dict": MODULE + ":set_model_state_dict",
        "get_optimizer_state_dict": MODULE + ":get_optimizer_state_dict",
        "set_optimizer_state_dict": MODULE + ":set_optimizer_state_dict",
        "fsdp2_port.state_dict_type": "fsdp2_port:state_dict_type",
        "fsdp2_port.set_state_dict_type": "fsdp2_port:set_state_dict_type",
        "fsdp2_port.optim_state_dict": "fsdp2_port:optim_state_dict",
        "fsdp2_port.optim_state_dict_to_load": "fsdp2_port:optim_state_dict_to_load",
        "fsdp2_port.module_state_dict": "fsdp2_port:module_state_dict",
        "fsdp2_port.load_module_state_dict": "fsdp2_port:load_module_state_dict",
    }

    def analyze(self, analysis: FileAnalysis) -> None:
        persistent = any(
            analysis.fsdp1_name(node) == _FSDP + "set_state_dict_type"
            or analysis.resolves_to(node, "fsdp2_port.set_state_dict_type")
            for node in analysis.names.by_type[ast.Attribute]
        )
        walk = Walk(analysis, set(), persistent)
        first = len(analysis.plan.sites)
        # a BF16 optimizer's own state_dict() is F2P009's (full_state_dict), not a model's
        claimed = {site.at.start for site in analysis.plan.sites if site.code == "F2P009"}
        for node in analysis.names.by_type[ast.Call]:
            assert isinstance(node, ast.Call)
            if node in walk.handled or analysis.is_ignored(node):
                continue
            name = analysis.fsdp1_name(node.func)
            if name == _FSDP + "state_dict_type":
                _context(walk, node)
            elif name == _FSDP + "set_state_dict_type":
                _runtime_call(
                    walk, node, "set_state_dict_type", "a persistent FSDP1 state-dict type"
                )
        for node in analysis.names.by_type[ast.Call]:
            assert isinstance(node, ast.Call)
            if analysis.resolves_to(node.func, "fsdp2_port.state_dict_type"):
                # an earlier run's block: its state dicts are already FSDP1's on any model
                walk.handled.update(_block_calls(analysis, node))
        for node in analysis.names.by_type[ast.Call]:
            assert isinstance(node, ast.Call)
            if node in walk.handled or analysis.is_ignored(node):
                continue
            if analysis.span(node)[0] not in claimed:
                _call(walk, node, None, frozenset())
        one_rank_gathers(analysis, first)
        saves(analysis, claimed)
