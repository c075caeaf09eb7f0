"""The private torch entry points fsdp2-port calls are still there, with the parameters we pass.

When a torch release moves or changes one, these fail naming it: update
``fsdp2_port/fsdp1/torch_internals.py`` (and what calls it) before anything runs wrong.
Every entry of ``ENTRY_POINTS`` is checked, whatever its kind.
"""

import importlib
import inspect
import warnings
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
from torch import nn

from fsdp2_port.fsdp1 import torch_internals
from fsdp2_port.fsdp1.torch_internals import ENTRY_POINTS


def _signatures(fn) -> list[list[tuple[str, bool]]]:
    """``(name, has a default)`` of each way to call ``fn``: a Python function's signature, or
    every overload of a torch operator's schema."""
    try:
        return [
            [
                (p.name, p.default is not inspect.Parameter.empty)
                for p in inspect.signature(fn).parameters.values()
            ]
        ]
    except ValueError:  # a builtin: torch.<op> is aten::<op>
        packet = getattr(torch.ops.aten, fn.__name__)
        return [
            [(a.name, a.has_default_value()) for a in getattr(packet, o)._schema.arguments]
            for o in packet.overloads()
        ]


def _takes(params: list[tuple[str, bool]], ours: tuple[str, ...]) -> bool:
    """Whether a call passing ``ours`` fits: they come first, every other one has a default."""
    names = [name for name, _ in params]
    return names[: len(ours)] == list(ours) and all(d for _, d in params[len(ours) :])


@pytest.fixture(scope="module")
def instances():
    """A torch object of each class whose instance attributes are entry points, made once:
    an FSDP1 instance (on a one-rank gloo group, destroyed afterwards), its handle and flat
    parameter, an optimizer and a scheduler."""
    made: dict[str, object] = {}
    started = []

    def fsdp1():
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

        if not dist.is_initialized():
            dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
            started.append(True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # FSDP1's deprecation
            model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
            return FSDP(model, use_orig_params=True, device_id=torch.device("cpu"))

    def optimizer():
        return torch.optim.SGD([nn.Parameter(torch.zeros(2))], lr=0.1)

    def module_wrap_policy():
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        return ModuleWrapPolicy({nn.Linear})

    def custom_policy():
        from torch.distributed.fsdp.wrap import CustomPolicy

        return CustomPolicy(lambda module: False)

    def mixed_precision():
        from torch.distributed.fsdp import MixedPrecision

        return MixedPrecision(param_dtype=torch.bfloat16)

    builders = {
        "FullyShardedDataParallel": fsdp1,
        "ModuleWrapPolicy": module_wrap_policy,
        "CustomPolicy": custom_policy,
        "_Policy": module_wrap_policy,
        "MixedPrecision": mixed_precision,
        "FlatParamHandle": lambda: get("FullyShardedDataParallel")._handle,
        "FlatParameter": lambda: get("FlatParamHandle").flat_param,
        "Optimizer": optimizer,
        "LRScheduler": lambda: torch.optim.lr_scheduler.LambdaLR(optimizer(), lambda s: 1.0),
    }

    def get(owner: str):
        assert owner in builders, f"no {owner} to check its attributes on: add a builder here"
        if owner not in made:
            made[owner] = builders[owner]()
        return made[owner]

    yield get
    made.clear()
    if started:
        dist.destroy_process_group()


@pytest.mark.parametrize("key", sorted(ENTRY_POINTS))
def test_entry_point_is_in_this_torch(key, instances):
    """Every entry, whatever its kind, against the installed torch."""
    entry = ENTRY_POINTS[key]
    where = f"{entry.module}.{entry.name}"
    if entry.only_without is not None and torch_internals.has(entry.only_without):
        if not torch_internals.has(key):
            pytest.skip(f"{where}: only used without {entry.only_without}, which this torch has")
    if entry.kind == "attribute":
        owner, attribute = entry.name.split(".")
        cls = getattr(importlib.import_module(entry.module), owner)
        instance = instances(owner)
        assert isinstance(instance, cls)
        assert hasattr(instance, attribute), f"{where}: torch's {owner} no longer sets it"
        return
    found = torch_internals.load(key)  # ImportError naming it when it is gone
    if entry.kind == "constant":
        assert found == entry.value, f"{where} is now {found!r}, fsdp2-port pins {entry.value!r}"
    elif entry.kind == "function":
        ways = _signatures(found)
        assert any(_takes(params, entry.params) for params in ways), (
            f"{where} now takes {ways}, fsdp2-port passes {entry.params} (and nothing else)"
        )
    else:
        assert entry.kind == "value" and found is not None


def test_a_missing_entry_point_is_named(monkeypatch):
    monkeypatch.setitem(
        ENTRY_POINTS, "gone", torch_internals.EntryPoint("torch.nn", "_nope", (), "-", "test")
    )
    with pytest.raises(ImportError, match=r"torch\.nn\._nope \(test\).*torch_internals\.py"):
        torch_internals.load("gone")


def test_fsdp1_flattened_marker_is_fsdp1s():
    from torch.distributed.fsdp import _common_utils

    assert _common_utils.FSDP_FLATTENED == torch_internals.FSDP1_FLATTENED
    t = nn.Parameter(torch.zeros(2))
    assert not torch_internals.is_fsdp1_flattened(t)
    _common_utils._set_fsdp_flattened(t)
    assert torch_internals.is_fsdp1_flattened(t)


def test_dcp_load_lives_where_the_optimizer_looks_for_it():
    import torch.distributed.checkpoint as dcp

    assert dcp.load.__module__ == torch_internals.DCP_LOADER_MODULE


def test_what_the_entry_points_return():
    """What fsdp1.units reads of FSDP1's policy and config objects, and the torch helpers it
    calls: their values on real objects."""
    from torch.distributed._composable.replicate import replicate
    from torch.distributed.fsdp import MixedPrecision
    from torch.distributed.fsdp.wrap import CustomPolicy, ModuleWrapPolicy, _Policy

    policy = ModuleWrapPolicy([nn.Linear, nn.Linear, nn.ReLU])
    assert torch_internals.module_wrap_policy_classes(policy) == {nn.Linear, nn.ReLU}
    choose = lambda module: True  # noqa: E731
    assert torch_internals.custom_policy_lambda_fn(CustomPolicy(choose)) is choose
    assert torch_internals.load("policy_base") is _Policy
    mwp_runner = torch_internals.policy_runner(ModuleWrapPolicy)
    assert mwp_runner is ModuleWrapPolicy._run_policy
    assert torch_internals.policy_runner(CustomPolicy) is not mwp_runner

    class Mine(_Policy):
        def _run_policy(self, root_module, ignored_modules, root_kwargs):
            return {root_module: {"seen": ignored_modules}}

    model = nn.Linear(2, 2)
    assert torch_internals.run_policy(
        Mine(), root_module=model, ignored_modules={1}, root_kwargs={}
    ) == {model: {"seen": {1}}}
    from torch.nn.modules.batchnorm import _BatchNorm

    classes = torch_internals.mixed_precision_classes_to_ignore(MixedPrecision())
    assert tuple(classes) == (_BatchNorm,)
    for key in ("module_wrap_policy", "wrap_module_cls_individually", "or_policy"):
        assert torch_internals.load(key).__module__ == "torch.distributed.fsdp.wrap"
    assert torch_internals.call("composable_registry", module=model) is None
    replicated = nn.Linear(2, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        replicate(replicated)
    assert "replicate" in torch_internals.call("composable_registry", module=replicated)
    doubled = torch_internals.call(
        "apply_to_tensors", fn=lambda t: t * 2, container=(torch.ones(1), {"a": [torch.ones(1)]})
    )
    assert doubled[0].item() == 2 and doubled[1]["a"][0].item() == 2


def test_sharded_tensor_pickles_the_state_convert_reads(monkeypatch):
    """``fsdp2_port.fsdp1.convert`` reads a pickled ``ShardedTensor`` (an FSDP1 SHARDED or LOCAL
    state dict saved per rank) through ``rebuild_from_type_v2`` without a process group: its
    state must be ``(local shards, metadata, process-group state with global_world_size, ...)``.
    """
    from torch.distributed._shard.sharded_tensor import api

    monkeypatch.setattr(api.distributed_c10d, "get_rank", lambda group=None: 1)
    monkeypatch.setattr(api.distributed_c10d, "get_world_size", lambda group=None: 2)
    fake = SimpleNamespace(
        _process_group=None,
        _local_shards=["shards"],
        _metadata="metadata",
        _sharding_spec="spec",
        _init_rrefs=False,
    )
    state = api.ShardedTensor.__getstate__(fake)
    assert state[:2] == (["shards"], "metadata")
    assert state[2].local_world_size == 2


def test_fsdp1_layout_read_through_the_boundary(instances):
    """What compat and fsdp1_api read of an FSDP1 instance: flat parameter, shard group,
    original-parameter views, wrapped module, and FSDP1's parameter names without wrappers."""
    fsdp1 = instances("FullyShardedDataParallel")
    flat, group, views = torch_internals.fsdp1_shards(fsdp1)
    assert flat is fsdp1._handle.flat_param
    assert group is None  # one rank: FSDP1 keeps the flat parameter whole (NO_SHARD)
    assert [v.shape for v in views] == [p.shape for p in fsdp1.module.parameters()]
    assert all(torch_internals.is_fsdp1_flattened(t) for t in (flat, *views))
    assert torch_internals.fsdp1_wrapped_module(fsdp1) is fsdp1.module
    with pytest.raises(AttributeError):
        torch_internals.fsdp1_wrapped_module(nn.Linear(1, 1))
    names = [n for n, _ in fsdp1.named_parameters()]
    assert [torch_internals.without_fsdp1_wrappers(n) for n in names] == [
        "0.weight",
        "0.bias",
        "1.weight",
        "1.bias",
    ]
    assert torch_internals.without_fsdp1_wrappers("_fsdp_wrapped_module") == ""


def test_root_mesh_on_either_release(instances, monkeypatch):
    """The mesh a slice was cut from, by the method or (older torch) the mesh environment;
    the norm's copy count asks versions which."""
    from torch.distributed.device_mesh import init_device_mesh

    from fsdp2_port import versions
    from fsdp2_port.train import grad_norm

    instances("FullyShardedDataParallel")  # a process group
    mesh = init_device_mesh("cpu", (1, 1), mesh_dim_names=("a", "b"))
    assert versions.mesh_knows_its_root() == hasattr(mesh, "_get_root_mesh")
    if versions.mesh_knows_its_root():
        assert torch_internals.root_mesh(mesh["a"]) is mesh
        assert torch_internals.root_mesh(mesh) is mesh
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecated where the method exists
        assert torch_internals.root_mesh_from_environment(mesh["b"]) is mesh
        monkeypatch.setattr(versions, "mesh_knows_its_root", lambda: False)
        assert grad_norm._root_mesh(mesh["a"]) is mesh


def test_step_hooks_and_scheduler_state():
    param = nn.Parameter(torch.zeros(2))
    opt = torch.optim.SGD([param], lr=0.1)
    assert not torch_internals.optimizer_has_step_hooks(opt)
    handle = opt.register_step_pre_hook(lambda *a: None)
    assert torch_internals.optimizer_has_step_hooks(opt)
    handle.remove()
    from torch.optim.optimizer import register_optimizer_step_post_hook

    handle = register_optimizer_step_post_hook(lambda *a: None)
    try:
        assert torch_internals.optimizer_has_step_hooks(opt)
    finally:
        handle.remove()
    assert not torch_internals.optimizer_has_step_hooks(opt)
    scheduler = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    count = scheduler._step_count
    torch_internals.count_scheduler_step(scheduler)
    torch_internals.set_scheduler_last_lr(scheduler, [0.5])
    assert scheduler._step_count == count + 1
    assert scheduler.get_last_lr() == [0.5]
