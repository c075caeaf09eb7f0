"""The ``StateDictOptions`` each DCP call says for an FSDP1 state-dict config: the table of
what DCP's options mean exactly (``OPTIONS_OF_SETTINGS``), FSDP1's defaults and the options of
a ``state_dict_type`` block."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Options:
    """``StateDictOptions(...)`` source for each DCP call a state-dict site becomes (None: no
    options): ``model`` for ``get_model_state_dict``, ``optim`` for
    ``get_optimizer_state_dict``, ``load`` for ``set_model_state_dict``, ``optim_load`` for
    ``set_optimizer_state_dict``. DCP takes options per call, so each says its own FSDP1
    config. ``inexact`` names those of them that no ``StateDictOptions`` says exactly: a site
    that needs one takes the runtime form instead."""

    model: str | None
    optim: str | None
    load: str | None
    optim_load: str | None
    note: str = ""
    inexact: frozenset[str] = frozenset()


#: FSDP1's defaults, in one place: ``(offload_to_cpu, rank0_only)`` of a model config
#: (``*StateDictConfig``) and of an optimizer config (``*OptimStateDictConfig``) where a call
#: omits it or passes None, or builds it without those arguments (``torch.distributed.fsdp.api``:
#: ``StateDictConfig.offload_to_cpu = False``, ``OptimStateDictConfig.offload_to_cpu = True``,
#: ``rank0_only = False``); an FSDP1 model starts FULL with both. ``OPTIONS_OF_SETTINGS``'s keys
#: have them filled in.
FSDP1_DEFAULTS: dict[str, tuple[bool, bool]] = {
    "StateDictConfig": (False, False),
    "OptimStateDictConfig": (True, False),
}
#: The FSDP1 settings that a ``StateDictOptions`` says exactly, and how: DCP's own translation
#: of its options for FSDP1 models (``torch.distributed.checkpoint.state_dict._verify_options``),
#: the table ``fsdp2_port.state_dict_type(m, options=...)`` follows (``fsdp1_api.
#: _settings_of_options``; a test checks the two agree). Key: the type, then ``(offload_to_cpu,
#: rank0_only)`` of the model config and of the optimizer config, FSDP1's defaults filled in.
OPTIONS_OF_SETTINGS: dict[tuple[str, tuple[bool, bool], tuple[bool, bool]], str] = {
    ("FULL_STATE_DICT", (True, True), (True, True)): (
        "StateDictOptions(full_state_dict=True, cpu_offload=True)"
    ),
    ("FULL_STATE_DICT", (False, False), (False, False)): "StateDictOptions(full_state_dict=True)",
    ("SHARDED_STATE_DICT", (True, False), (True, False)): "StateDictOptions(cpu_offload=True)",
    ("SHARDED_STATE_DICT", (False, False), (False, False)): "StateDictOptions()",
}
#: The sides of an ``OPTIONS_OF_SETTINGS`` key: the model config's settings, the optimizer's.
_MODEL, _OPTIM = 0, 1


def _dcp_options(
    kind: str, side: int, settings: tuple[bool, bool], *, load: bool = False
) -> tuple[bool, str | None]:
    """``(found, text)``: the ``StateDictOptions`` (None: DCP's defaults, no argument) under
    which DCP applies to an FSDP1 model the config ``settings`` on ``side`` for a ``kind``
    state dict (``OPTIONS_OF_SETTINGS``); DCP sets both configs from one options value, and a
    call reads only its own side's. ``load``: for ``FSDP.optim_state_dict_to_load``, which
    reads ``rank0_only`` and not ``offload_to_cpu``: an options value with the same
    ``rank0_only`` loads the same where none has the same offload too."""
    matches = [
        (sides[side] == settings, text)
        for (type_, *sides), text in OPTIONS_OF_SETTINGS.items()
        if type_ == kind and (sides[side] == settings or (load and sides[side][1] == settings[1]))
    ]
    if not matches:
        return False, None
    text = max(matches, key=lambda match: match[0])[1]  # the exact one first
    return True, None if text == "StateDictOptions()" else text


def _exact_side(kind: str, side: int, settings: tuple[bool, bool]) -> str | None:
    """The ``StateDictOptions`` text that says ``settings`` exactly on ``side`` of a ``kind``
    state dict (``OPTIONS_OF_SETTINGS``; the other side aside), or None."""
    for (type_, *sides), text in OPTIONS_OF_SETTINGS.items():
        if type_ == kind and sides[side] == settings:
            return text
    return None


def _block_options(kind: str, model: tuple[bool, bool], optim: tuple[bool, bool]) -> Options:
    """What each DCP call says inside ``FSDP.state_dict_type(m, kind, <model>, <optim>)``
    (``(offload_to_cpu, rank0_only)`` of each config, FSDP1's defaults filled in)."""
    full = kind == "FULL_STATE_DICT"
    forms: dict[str, str | None] = {}
    inexact: set[str] = set()
    notes = []
    for field, side, settings, what in (
        ("model", _MODEL, model, "state_dict_config"),
        ("optim", _OPTIM, optim, "optim_state_dict_config"),
    ):
        found, forms[field] = _dcp_options(kind, side, settings)
        if not found and full and settings == (False, True):
            found, forms[field] = _dcp_options(kind, side, (False, False))
            notes.append(
                f"{what} rank0_only=True without offload: every rank now gets the full "
                "state dict (the same values on rank 0, more memory elsewhere)"
            )
        if not found:
            inexact.add(field)
    found, optim_load = _dcp_options(kind, _OPTIM, optim, load=True)
    if not found:
        inexact.add("optim_load")
    return Options(
        forms["model"],
        forms["optim"],
        "StateDictOptions(full_state_dict=True)" if full else None,
        optim_load,
        "; ".join(notes),
        frozenset(inexact),
    )


#: FSDP1 outside a ``state_dict_type`` block: FULL, FSDP1's default configs (the model's
#: on every rank, on its device; the optimizer's offloaded on every rank: no DCP form).
DEFAULT = _block_options(
    "FULL_STATE_DICT", FSDP1_DEFAULTS["StateDictConfig"], FSDP1_DEFAULTS["OptimStateDictConfig"]
)
