"""``fsdp2_port.state_dict_type`` / ``set_state_dict_type`` with DCP's ``StateDictOptions``
(``options=``) instead of FSDP1's type and configs: each options value means exactly the FSDP1
settings DCP itself applies to FSDP1 models, and the codemod writes the same table.

On 2 gloo ranks, one model wrapped as FSDP1 and as FSDP2 (``tests/test_fsdp1_api.py``'s
wrapping, one AdamW step each), for each of the four options values: the options form and the
FSDP1 form give the same state dicts (keys, values bit for bit: both are copies of the same
parameters, which ranks hold values, devices), the same optimizer state dicts, the same
settings (``get_state_dict_type``; on FSDP1 that is FSDP1's own record, so FSDP1 then does what
its own call did), and load the same way. torch 2.13 on the CPU: FSDP1's FULL_STATE_DICT with
``offload_to_cpu=True`` segfaults, so the FSDP1 side of the two offloading FULL forms is
compared by settings only.
"""

import dataclasses
import warnings

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict
from torch.distributed.fsdp import (
    FullOptimStateDictConfig,
    FullStateDictConfig,
    FullyShardedDataParallel,
    ShardedOptimStateDictConfig,
    ShardedStateDictConfig,
    StateDictSettings,
    StateDictType,
)
from torch.distributed.tensor import DTensor

import fsdp2_port
from fsdp2_port.codemods.rules.state_dict.options import FSDP1_DEFAULTS, OPTIONS_OF_SETTINGS
from fsdp2_port.fsdp1 import state_dict_api
from fsdp2_port.prove.launch import run_ranks
from tests.test_fsdp1_api import (
    AFTER_STEP,
    CPU,
    _assert_optim_equal,
    _fsdp1,
    _fsdp2,
    _perturb,
    _step,
)

FSDP = FullyShardedDataParallel
FULL, SHARDED = StateDictType.FULL_STATE_DICT, StateDictType.SHARDED_STATE_DICT
TIMEOUT = 120

#: Each options value and the FSDP1 settings it means (DCP's ``_verify_options`` on FSDP1).
MAPPED = [
    (
        StateDictOptions(full_state_dict=True, cpu_offload=True),
        StateDictSettings(
            FULL,
            FullStateDictConfig(offload_to_cpu=True, rank0_only=True),
            FullOptimStateDictConfig(offload_to_cpu=True, rank0_only=True),
        ),
    ),
    (
        StateDictOptions(full_state_dict=True),
        StateDictSettings(
            FULL, FullStateDictConfig(), FullOptimStateDictConfig(offload_to_cpu=False)
        ),
    ),
    (
        StateDictOptions(cpu_offload=True),
        StateDictSettings(
            SHARDED, ShardedStateDictConfig(offload_to_cpu=True), ShardedOptimStateDictConfig()
        ),
    ),
    (
        StateDictOptions(),
        StateDictSettings(
            SHARDED, ShardedStateDictConfig(), ShardedOptimStateDictConfig(offload_to_cpu=False)
        ),
    ),
]


#: ``options`` for the model with ``optim_options`` for the optimizer, and the FSDP1 settings
#: they mean: the model's from the first, the optimizer's from the second (one type for both).
MIXED = [
    (
        StateDictOptions(),
        StateDictOptions(cpu_offload=True),
        StateDictSettings(SHARDED, ShardedStateDictConfig(), ShardedOptimStateDictConfig()),
    ),
    (
        StateDictOptions(full_state_dict=True, cpu_offload=True),
        StateDictOptions(full_state_dict=True),
        StateDictSettings(
            FULL,
            FullStateDictConfig(offload_to_cpu=True, rank0_only=True),
            FullOptimStateDictConfig(offload_to_cpu=False),
        ),
    ),
]
#: Every DCP form: ``(options, optim_options or None, settings)``.
FORMS = [(options, None, settings) for options, settings in MAPPED] + MIXED


def _dcp(options: StateDictOptions, optim_options: StateDictOptions | None) -> dict:
    """The keyword arguments of a DCP form."""
    if optim_options is None:
        return {"options": options}
    return {"options": options, "optim_options": optim_options}


def _triple(settings: StateDictSettings) -> tuple:
    return (
        settings.state_dict_type,
        settings.state_dict_config,
        settings.optim_state_dict_config,
    )


# -- the table ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("options", "settings"), MAPPED)
def test_options_mean_these_fsdp1_settings(options, settings):
    assert state_dict_api._settings_of_options(options) == settings


@pytest.mark.parametrize(("options", "optim_options", "settings"), MIXED)
def test_optim_options_set_the_optimizers_settings(options, optim_options, settings):
    assert state_dict_api._given(None, None, None, options, optim_options) == settings


@pytest.mark.parametrize(
    "settings",
    [
        *(settings for _, settings in MAPPED),
        # FSDP1's default optimizer config beside rank 0's model: no options say it
        StateDictSettings(
            FULL,
            FullStateDictConfig(offload_to_cpu=True, rank0_only=True),
            FullOptimStateDictConfig(),
        ),
    ],
)
def test_names_and_dicts_of_fields_mean_fsdp1s_members_and_configs(settings):
    """F2P013 writes the type as its name and each config as the dict of its fields where only
    ``fsdp2_port`` reads them: the same settings, set and read back."""
    model_config, optim_config = settings.state_dict_config, settings.optim_state_dict_config
    spelled = (
        settings.state_dict_type.name,
        dataclasses.asdict(model_config),
        dataclasses.asdict(optim_config),
    )
    assert state_dict_api._given(*spelled, None) == settings
    model = nn.Linear(2, 2)
    fsdp2_port.set_state_dict_type(model, *spelled)
    assert fsdp2_port.get_state_dict_type(model) == settings
    with pytest.raises(ValueError, match=r"'rank0' not a field of FullStateDictConfig"):
        fsdp2_port.state_dict_type(model, "FULL_STATE_DICT", {"rank0": True})
    with pytest.raises(ValueError, match=r"'FULL' names no StateDictType"):
        fsdp2_port.state_dict_type(model, "FULL")


def test_optim_options_need_options_and_the_same_type():
    model = nn.Linear(2, 2)
    for function in (fsdp2_port.state_dict_type, fsdp2_port.set_state_dict_type):
        with pytest.raises(ValueError, match="optim_options: given without options"):
            function(model, optim_options=StateDictOptions())
        with pytest.raises(ValueError, match="full_state_dict must agree"):
            function(
                model,
                options=StateDictOptions(),
                optim_options=StateDictOptions(full_state_dict=True),
            )
        with pytest.raises(ValueError, match="has no FSDP1 state-dict setting"):
            function(
                model, options=StateDictOptions(), optim_options=StateDictOptions(strict=False)
            )
    assert "state_dict" not in vars(model)  # nothing was set


def test_the_codemod_writes_the_same_table():
    """``OPTIONS_OF_SETTINGS`` (the codemod, without torch) is the runtime's table read back."""
    written = {}
    for options, settings in MAPPED:
        model, optim = settings.state_dict_config, settings.optim_state_dict_config
        key = (
            settings.state_dict_type.name,
            (model.offload_to_cpu, getattr(model, "rank0_only", False)),
            (optim.offload_to_cpu, getattr(optim, "rank0_only", False)),
        )
        written[key] = eval(OPTIONS_OF_SETTINGS[key], {"StateDictOptions": StateDictOptions})
        assert written[key] == options
    assert set(written) == set(OPTIONS_OF_SETTINGS)


def test_the_codemod_names_fsdp1s_defaults():
    """``FSDP1_DEFAULTS`` (the codemod's one home for them) are torch's config defaults."""
    for family, configs in (
        ("StateDictConfig", (FullStateDictConfig(), ShardedStateDictConfig())),
        ("OptimStateDictConfig", (FullOptimStateDictConfig(), ShardedOptimStateDictConfig())),
    ):
        for config in configs:
            settings = (config.offload_to_cpu, getattr(config, "rank0_only", False))
            assert settings == FSDP1_DEFAULTS[family], type(config).__name__


@pytest.mark.parametrize(
    "options",
    [
        StateDictOptions(strict=False),
        StateDictOptions(full_state_dict=True, broadcast_from_rank0=True),
        StateDictOptions(ignore_frozen_params=True),
        StateDictOptions(flatten_optimizer_state_dict=True),
        StateDictOptions(keep_submodule_prefixes=False),
    ],
)
def test_options_without_an_fsdp1_meaning_are_refused(options):
    model = nn.Linear(2, 2)
    with pytest.raises(ValueError, match="has no FSDP1 state-dict setting"):
        fsdp2_port.state_dict_type(model, options=options)
    with pytest.raises(ValueError, match="has no FSDP1 state-dict setting"):
        fsdp2_port.set_state_dict_type(model, options=options)
    assert "state_dict" not in vars(model)  # nothing was set


def test_options_or_fsdp1_arguments_exactly_one():
    model = nn.Linear(2, 2)
    for function in (fsdp2_port.state_dict_type, fsdp2_port.set_state_dict_type):
        with pytest.raises(ValueError, match="not both"):
            function(model, FULL, options=StateDictOptions())
        with pytest.raises(ValueError, match="not both"):
            function(model, state_dict_config=FullStateDictConfig(), options=StateDictOptions())
        with pytest.raises(ValueError, match="state_dict_type: missing"):
            function(model)
        with pytest.raises(ValueError, match=r"options: expected a .*StateDictOptions"):
            function(model, options={"full_state_dict": True})
    assert fsdp2_port.get_state_dict_type(model).state_dict_type == FULL  # FSDP1's default


def test_plain_module_options_form():
    model = nn.Linear(2, 3)
    want = {k: v.clone() for k, v in model.state_dict().items()}
    with fsdp2_port.state_dict_type(model, options=StateDictOptions(full_state_dict=True)):
        got = model.state_dict()
        assert fsdp2_port.get_state_dict_type(model) == MAPPED[1][1]
    assert list(got) == list(want) and all(torch.equal(got[k], want[k]) for k in want)
    assert "state_dict" not in vars(model)


# -- FSDP1 and FSDP2 on 2 ranks ----------------------------------------------------------------


def _local(value):
    """What a rank holds of a state-dict value: its shard (DTensor, ShardedTensor) or itself."""
    if isinstance(value, DTensor):
        return value.to_local()
    if hasattr(value, "local_tensor"):  # FSDP1's ShardedTensor
        return value.local_tensor()
    return value


def _same(got, want) -> None:
    """Keys, types, placements, devices and values (bit for bit), recursively."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want)
        for key in want:
            _same(got[key], want[key])
    elif isinstance(want, (list, tuple)):
        assert type(got) is type(want) and len(got) == len(want)
        for a, b in zip(got, want):
            _same(a, b)
    elif isinstance(want, torch.Tensor):
        assert type(got) is type(want)
        if isinstance(want, DTensor):
            assert got.placements == want.placements and got.shape == want.shape
        a, b = _local(got), _local(want)
        assert a.device == b.device and a.dtype == b.dtype and torch.equal(a, b)
    else:
        assert got == want


def _state(model, optim) -> tuple[dict, dict]:
    return model.state_dict(), fsdp2_port.optim_state_dict(model, optim)


def _options_forms(rank, world):
    warnings.simplefilter("ignore", FutureWarning)  # FSDP1's state-dict APIs are deprecated
    torch.manual_seed(0)
    f1, m2 = _fsdp1(), _fsdp2(world)
    _step(f1, rank, world)
    o2 = _step(m2, rank, world)
    for options, optim_options, settings in FORMS:
        full = settings.state_dict_type == FULL
        offload = options.cpu_offload
        optim_offload = (optim_options or options).cpu_offload
        dcp = _dcp(options, optim_options)
        # FSDP2: the two forms give the same dicts, inside a block and set persistently.
        outside = fsdp2_port.get_state_dict_type(m2)
        with fsdp2_port.state_dict_type(m2, *_triple(settings)):
            want, want_osd = _state(m2, o2)
        with fsdp2_port.state_dict_type(m2, **dcp):
            assert fsdp2_port.get_state_dict_type(m2) == settings
            got, got_osd = _state(m2, o2)
        _same(got, want)
        _same(got_osd, want_osd)
        assert fsdp2_port.get_state_dict_type(m2) == outside  # restored on exit
        # DCP: full + cpu_offload -> rank 0 only
        keeps, keeps_osd = (not (full and o) or rank == 0 for o in (offload, optim_offload))
        assert bool(got) == keeps and bool(got_osd) == keeps_osd
        values = [v for v in got.values()]
        assert all(isinstance(v, DTensor) != full for v in values)
        assert all(_local(v).device.type == "cpu" for v in values)  # gloo: the CPU either way
        previous = fsdp2_port.set_state_dict_type(m2, **dcp)
        assert fsdp2_port.get_state_dict_type(m2) == settings
        _same(_state(m2, o2)[0], want)
        assert fsdp2_port.set_state_dict_type(m2, *_triple(previous)) == settings

        # Load: the options form loads what the FSDP1 form saved, back to the same weights.
        if not (full and (offload or optim_offload)):  # rank 0 only: not a load everywhere
            with fsdp2_port.state_dict_type(m2, **dcp):
                saved = m2.state_dict()
                osd = fsdp2_port.optim_state_dict(m2, o2)
                _perturb(m2)
                m2.load_state_dict(saved)
                loaded = fsdp2_port.optim_state_dict_to_load(m2, o2, osd)
            with fsdp2_port.state_dict_type(m2, *_triple(settings)):
                _same(m2.state_dict(), want)
                _same(fsdp2_port.optim_state_dict_to_load(m2, o2, osd), loaded)

        # FSDP1: fsdp2_port's options form is FSDP1's own call with those settings.
        with fsdp2_port.state_dict_type(f1, **dcp):
            assert FSDP.get_state_dict_type(f1) == settings
            if not (full and offload):  # FSDP1's offloaded FULL segfaults on the CPU
                got1 = f1.state_dict()
        if not (full and offload):
            with FSDP.state_dict_type(f1, *_triple(settings)):
                want1 = f1.state_dict()
            assert list(got1) == list(want1)
            for key in want1:
                a, b = _local(got1[key]), _local(want1[key])
                assert type(got1[key]) is type(want1[key]) and a.device == b.device
                assert torch.equal(a, b), key
            with fsdp2_port.state_dict_type(f1, **dcp):
                _perturb(f1)
                f1.load_state_dict(got1)  # the load direction: back to the same weights
            with FSDP.state_dict_type(f1, *_triple(settings)):
                after = f1.state_dict()
            assert all(torch.equal(_local(after[k]), _local(want1[k])) for k in want1)
        before = FSDP.get_state_dict_type(f1)
        previous = fsdp2_port.set_state_dict_type(f1, **dcp)
        assert previous == before and FSDP.get_state_dict_type(f1) == settings
        FSDP.set_state_dict_type(f1, *_triple(before))
        assert FSDP.get_state_dict_type(f1) == before
    dist.barrier()


@pytest.mark.slow
def test_options_forms_equal_fsdp1_forms_on_fsdp1_and_fsdp2():
    run_ranks(_options_forms, 2, timeout=TIMEOUT)


# -- FSDP1's default optimizer config (FULL, offloaded on every rank): no DCP options say it ------


def _devices(osd: dict) -> dict:
    return {(fqn, k): v.device for fqn, e in osd["state"].items() for k, v in e.items()}


def _without_exp_avg(osd: dict) -> dict:
    state = {f: {k: v for k, v in e.items() if k != "exp_avg"} for f, e in osd["state"].items()}
    return {"state": state, "param_groups": osd["param_groups"]}


def _default_optim_config(rank, world):
    """``with FSDP.state_dict_type(m, FULL): FSDP.optim_state_dict(m, o)``, FSDP1's default
    optimizer config (``offload_to_cpu=True``, every rank), and what the codemod writes for it
    (``optim_offload.out.py``'s ``save_default``: fsdp2_port's form, FSDP1's words): on FSDP1
    and on FSDP2, the full optimizer state on every rank, on the CPU, the same values (FSDP1
    and FSDP2 one AdamW step apart by ``AFTER_STEP``). Neither DCP form says it:
    ``full_state_dict`` keeps the device, ``full_state_dict`` + ``cpu_offload`` gives rank 0
    alone.

    On gloo every tensor is on the CPU already, so devices match whatever is offloaded; only a
    GPU run tells ``full_state_dict`` apart by device (this machine has none). And torch 2.13's
    FSDP1 on the CPU offloads wrong ``exp_avg`` values in a FULL optimizer state (every rank,
    the same wrong values each call; the offloaded FULL model state dict segfaults): the values
    are FSDP1's with ``offload_to_cpu=False``, the offloaded one is compared by keys, devices,
    ranks, steps and ``exp_avg_sq``."""
    warnings.simplefilter("ignore", FutureWarning)  # FSDP1's state-dict APIs are deprecated
    torch.manual_seed(0)
    f1, m2 = _fsdp1(), _fsdp2(world)
    o1, o2 = _step(f1, rank, world), _step(m2, rank, world)
    on_device = FullOptimStateDictConfig(offload_to_cpu=False)
    with FSDP.state_dict_type(f1, FULL, FullStateDictConfig(), on_device):
        values = FSDP.optim_state_dict(f1, o1)  # FSDP1's values, not offloaded
    with FSDP.state_dict_type(f1, FULL):  # FSDP1's form, its default configs
        assert FSDP.get_state_dict_type(f1).optim_state_dict_config == FullOptimStateDictConfig()
        assert FullOptimStateDictConfig().offload_to_cpu and not on_device.offload_to_cpu
        want = FSDP.optim_state_dict(f1, o1)
    with fsdp2_port.state_dict_type(f1, FULL):  # the migrated form on FSDP1: FSDP1's own
        on_fsdp1 = fsdp2_port.optim_state_dict(f1, o1)
    with fsdp2_port.state_dict_type(m2, FULL):  # the migrated form on FSDP2
        on_fsdp2 = fsdp2_port.optim_state_dict(m2, o2)

    assert want["state"] and all(d == CPU for d in _devices(want).values())  # every rank
    assert _devices(on_fsdp1) == _devices(want) == _devices(on_fsdp2)
    _assert_optim_equal(on_fsdp1, want)
    _assert_optim_equal(on_fsdp2, values, AFTER_STEP)
    assert _devices(want).keys() == _devices(values).keys()
    _assert_optim_equal(_without_exp_avg(want), _without_exp_avg(values))  # see the docstring

    offloaded = get_optimizer_state_dict(
        m2, o2, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
    )
    assert bool(offloaded) == (rank == 0)  # DCP's offloaded FULL: rank 0 only, not FSDP1's
    dist.barrier()


@pytest.mark.slow
def test_default_optim_config_migrated_form_equals_fsdp1():
    run_ranks(_default_optim_config, 2, timeout=TIMEOUT)
