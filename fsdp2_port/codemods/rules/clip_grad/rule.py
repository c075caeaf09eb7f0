"""F2P006: ``m.clip_grad_norm_(max_norm[, norm_type])`` on an FSDP1 model -> the global norm.

FSDP1's method clipped by, and returned, the plain global norm. The rewrite calls
``fsdp2_port.clip_grad_norm_(m.parameters(), ...)``, which does the same on DTensor gradients
with one collective (and refuses FSDP1 parameters, so it is tied to the model migrating).
A receiver the run cannot tie to a model becomes ``fsdp2_port.module_clip_grad_norm_(m, ...)``,
right on any model, whenever a model of the run migrates. A first argument that is parameters
(``accelerator.clip_grad_norm_(model.parameters(), 1.0)``) is not FSDP1's signature: left alone.
"""

from __future__ import annotations

import ast
from typing import ClassVar

from fsdp2_port.codemods import calls
from fsdp2_port.codemods.analysis import FileAnalysis
from fsdp2_port.codemods.plan import Rewrite
from fsdp2_port.codemods.rules.base import Code
from fsdp2_port.codemods.text import Edit

# Without the runtime dependency: torch's own clip_grad_norm_ reduces DTensor gradients through
# their placements (on one FSDP2 mesh its norm is the global one; checked on torch 2.13 with
# p in 1, 2, 3, inf), and .full_tensor() makes the plain tensor FSDP1 returned. It is not exact
# everywhere (gradients on several meshes are rejected), hence review.
_TORCH_ONLY = (
    "clip_grad_norm_ -> torch.nn.utils.clip_grad_norm_(...).full_tensor(): exact on one FSDP2 "
    "mesh; fails on gradients spread over several meshes (use fsdp2_port.clip_grad_norm_ there)"
)


_TORCH_CLIP = "torch.nn.utils.clip_grad_norm_"


class ClipGradRule:
    STAGE: ClassVar[str] = "analysis"
    CODE: ClassVar[str] = "F2P006"
    CODES: ClassVar[dict[str, Code]] = {
        "F2P006": Code(
            summary=(
                "FSDP1 m.clip_grad_norm_(...) -> fsdp2_port.clip_grad_norm_(m.parameters(), ...)"
            ),
            topic="`m.clip_grad_norm_(...)`",
            rewritten=(
                "a model built here → `fsdp2_port.clip_grad_norm_(m.parameters(), ...)` (the "
                "global norm, fp32, one collective); a receiver the run cannot tie → "
                "`fsdp2_port.module_clip_grad_norm_(m, ...)` (FSDP1's clip on FSDP1, the global "
                "norm on FSDP2, torch's on DDP and plain modules, the object's own method "
                "otherwise); with `--no-runtime-dependency`, "
                "`torch.nn.utils.clip_grad_norm_(...).full_tensor()` (review: exact on one "
                "mesh). A first argument that is parameters "
                "(`accelerator.clip_grad_norm_(model.parameters(), 1.0)`) is not FSDP1's: left "
                "alone"
            ),
            marked="untied receivers without the runtime dependency (they hold the run)",
            proven_by=(
                "tests/test_migrated_scripts.py::test_the_migration_trains_like_the_original[hsdp_clip.py-4-fp32-args4]",
                "tests/test_migrated_scripts.py::test_the_migration_trains_like_the_original[resume.py-2-fp32-args2]",
                "tests/test_multifile_programs.py::test_the_migrated_program_trains_like_the_original[base_trainer-fp32--]",
                "tests/test_multifile_programs.py::test_values_built_in_one_file_and_read_in_another_lose_fsdp1",
                "tests/test_fsdp1_api_forms.py::test_clip_summon_fsdp_modules_match_fsdp1",
            ),
        ),
    }
    NEEDS: ClassVar[tuple[str, ...]] = ("F2P002",)
    EMITS: ClassVar[dict[str, str]] = {
        "torch.nn.utils.clip_grad_norm_": "torch.nn.utils:clip_grad_norm_",
        "fsdp2_port.clip_grad_norm_": "fsdp2_port:clip_grad_norm_",
        "fsdp2_port.module_clip_grad_norm_": "fsdp2_port:module_clip_grad_norm_",
    }

    def analyze(self, analysis: FileAnalysis) -> None:
        for call in analysis.names.by_type[ast.Call]:
            assert isinstance(call, ast.Call)
            func = call.func
            if not (isinstance(func, ast.Attribute) and func.attr == "clip_grad_norm_"):
                continue
            qualified = analysis.names.qualified(func)
            if _TORCH_CLIP in qualified and not analysis.is_ignored(call):
                self._torch_clip(analysis, call)
            if any(q.startswith(("torch.", "fsdp2_port.")) for q in qualified):
                continue
            if analysis.is_ignored(call) or _takes_parameters(call):
                continue
            self._clip(analysis, call, func)

    def _clip(self, analysis: FileAnalysis, call: ast.Call, func: ast.Attribute) -> None:
        receiver = analysis.source(func.value)
        keep = f"kept: {receiver}.clip_grad_norm_ of an FSDP1 model"
        rewrite = self._rewrite(analysis, call, func, receiver)
        either = self._either(analysis, call, func, receiver)
        unknown = (
            f"{receiver} is not known to be an FSDP1 module: if it is, use fsdp2_port."
            f"clip_grad_norm_({receiver}.parameters(), ...) with the model's migration"
        )
        site = analysis.add_tied(
            self.CODE, call, func.value, keep, rewrite, quiet=True, unknown=unknown, either=either
        )
        if site is None:
            analysis.hold(self.CODE, call, unknown)

    def _torch_clip(self, analysis: FileAnalysis, call: ast.Call) -> None:
        """``torch.nn.utils.clip_grad_norm_(model.parameters(), c)`` on a model that migrates:
        FSDP1's flat shards gave each rank its own norm and coefficient, FSDP2's DTensors give
        the global one. The run changes (for the better): marked, with the model."""
        first = call.args[0] if call.args else None
        if not (
            isinstance(first, ast.Call)
            and isinstance(first.func, ast.Attribute)
            and first.func.attr == "parameters"
        ):
            return
        ties, deferred = analysis.ties.of(first.func.value)
        if not ties or analysis.type_tests.denied_fsdp1(first.func.value):
            return  # in the else of ``isinstance(m, FSDP)``: no sharded model, before or after
        message = (
            f"torch's clip_grad_norm_ on {analysis.source(first.func.value)}'s parameters: on "
            "FSDP1 shards it clipped each rank by its own shards' norm (a different coefficient "
            "per rank); on FSDP2's DTensors the norm is global. The migrated run clips by the "
            "true norm: expect other grad norms and updates than the FSDP1 run logged"
        )
        analysis.add(
            self.CODE,
            call,
            message,
            Rewrite([], message, review=True),
            "MODELS",
            ties=ties,
            deferred=deferred,
            quiet=True,
        )

    def _either(
        self, analysis: FileAnalysis, call: ast.Call, func: ast.Attribute, receiver: str
    ) -> Rewrite | None:
        """``fsdp2_port.module_clip_grad_norm_(m, ...)``: FSDP1's method on FSDP1, the global
        norm on FSDP2, torch's on DDP and plain modules, the object's own method otherwise."""
        if (
            not analysis.options.runtime_dependency
            or calls.bind(call, ("max_norm", "norm_type")) is None
        ):
            return None
        return Rewrite(
            analysis.receiver_first(call, "fsdp2_port.module_clip_grad_norm_"),
            "clip_grad_norm_ -> fsdp2_port.module_clip_grad_norm_: FSDP1's clip on any model "
            "(the global norm on FSDP2)",
            [analysis.module_import("fsdp2_port")],
        )

    def _rewrite(
        self, analysis: FileAnalysis, call: ast.Call, func: ast.Attribute, receiver: str
    ) -> Rewrite | None:
        if calls.bind(call, ("max_norm", "norm_type")) is None:
            return None
        if analysis.options.runtime_dependency:
            edits = analysis.receiver_first(call, "fsdp2_port.clip_grad_norm_", ".parameters()")
            return Rewrite(
                edits,
                "clip_grad_norm_ -> fsdp2_port.clip_grad_norm_ (the global norm, one collective)",
                [analysis.module_import("fsdp2_port")],
            )
        end = analysis.lines.end(call)
        edits = [
            *analysis.receiver_first(call, "torch.nn.utils.clip_grad_norm_", ".parameters()"),
            Edit(end, end, ".full_tensor()"),
        ]
        return Rewrite(edits, _TORCH_ONLY, [analysis.module_import("torch", call)], review=True)


def _takes_parameters(call: ast.Call) -> bool:
    """A clip whose first argument is parameters (``accelerator.clip_grad_norm_(ps, 1.0)``,
    torch's signature) is not FSDP1's ``clip_grad_norm_(max_norm, norm_type)``."""
    first = call.args[0] if call.args else None
    for keyword in call.keywords:
        if keyword.arg == "parameters":
            return True
    if first is None or isinstance(first, ast.Constant):
        return False
    if isinstance(first, (ast.List, ast.ListComp, ast.GeneratorExp, ast.Tuple)):
        return True
    text = ast.unparse(first).lower()
    return "param" in text
