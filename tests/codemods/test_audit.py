"""The audit (``fsdp2_port.codemods.audit``): each verdict on small sources, read by its own
resolver.

Every case pairs a source that must give the verdict with a near one that must not, so that a
reading which says the same thing of everything fails.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from fsdp2_port.codemods import assumptions, audit_models
from fsdp2_port.codemods import audit as audit_module
from fsdp2_port.codemods.assumptions import FSDP1_ONLY_ATTRIBUTES
from fsdp2_port.codemods.audit import Audit, audit, run_problems, run_unmarked

IMPORTS = """\
import functools
from functools import partial
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.fsdp import MixedPrecision, ShardingStrategy
import fsdp2_port
from fsdp2_port import BF16Optimizer, fully_shard_like_fsdp1
"""


def read(body: str, imports: str = IMPORTS, **kwargs: object) -> Audit:
    return audit("x.py", imports + textwrap.dedent(body), **kwargs)  # type: ignore[arg-type]


def lines(found: list[str]) -> list[int]:
    """The line numbers of verdicts (``x.py:12: ...``), counted in the body after IMPORTS."""
    offset = IMPORTS.count("\n")
    return sorted(int(f.split(":")[1]) - offset for f in found)


# -- constructors -------------------------------------------------------------------------------


def test_an_fsdp1_constructor_left_is_counted():
    assert read("model = FSDP(net)\n").constructors == 1
    assert read("model = fully_shard(net)\n").constructors == 0


def test_partial_of_fsdp_is_a_constructor_and_its_calls_build_fsdp1_models():
    found = read(
        """\
        wrap = partial(FSDP, sharding_strategy=ShardingStrategy.FULL_SHARD)
        other = functools.partial(FSDP)
        model = wrap(net)
        model.set_requires_gradient_sync(False)
        plain = functools.partial(print)
        """
    )
    assert found.constructors == 2
    assert lines(found.half_migrated) == [4]


def test_a_name_another_module_of_the_run_hands_on_is_torchs():
    """RLinf's shape: the package imports FSDP per torch release and other modules import it
    from the package. Read with what the run's modules hand on, it is torch's constructor;
    a package that binds its own ``FSDP`` hands on nothing."""
    from fsdp2_port.codemods import audit_names

    package = ast.parse(
        "import torch\n"
        "if torch.__version__ >= '2.6':\n"
        "    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
        "else:\n"
        "    from torch.distributed.fsdp.fully_sharded_data_parallel import (\n"
        "        FullyShardedDataParallel as FSDP)\n"
    )
    own = ast.parse("class FSDP:\n    pass\n")
    user = "from pkg import FSDP\nmodel = FSDP(net)\n"
    handed_on = audit_names.handed_on({"pkg": (package, True), "other": (own, True)})
    assert set(handed_on) == {"pkg.FSDP"}
    assert audit("user.py", user, "user", False, handed_on).constructors == 1
    assert audit("user.py", user, "user", False).constructors == 0
    other = user.replace("from pkg", "from other")
    assert audit("user.py", other, "user", False, handed_on).constructors == 0


def test_names_that_are_not_torchs_fsdp1_are_not_constructors():
    fairscale = "from fairscale.nn import FullyShardedDataParallel as FSDP\n"
    assert read("m = FSDP(net)\n", imports=fairscale).constructors == 0
    shadowed = """\
    def build(FSDP, net):
        return FSDP(net)
    """
    assert read(shadowed).constructors == 0
    class_body = """\
    class Builder:
        from torch.distributed.fsdp import FullyShardedDataParallel as Wrapper
        def build(self, net):
            return Wrapper(net)  # a class body does not enclose its methods
    """
    assert audit("x.py", textwrap.dedent(class_body)).constructors == 0


# -- aliases --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "source",
    [
        "import torch.distributed.fsdp as f\nm = f.FullyShardedDataParallel(net)\n",
        "import torch\nm = torch.distributed.fsdp.FullyShardedDataParallel(net)\n",
        "import torch.distributed.fsdp\nm = torch.distributed.fsdp.FullyShardedDataParallel(net)\n",
        "from torch.distributed import fsdp\nm = fsdp.FullyShardedDataParallel(net)\n",
        "from torch.distributed.fsdp.fully_sharded_data_parallel import "
        "FullyShardedDataParallel as Wrapper\nm = Wrapper(net)\n",
        "def build(net):\n"
        "    from torch.distributed.fsdp import FullyShardedDataParallel\n"
        "    return FullyShardedDataParallel(net)\n",
        "from torch.distributed.fsdp import FullyShardedDataParallel\n"
        "Wrapper = FullyShardedDataParallel\nm = Wrapper(net)\n",
        "from torch.distributed.fsdp import FullyShardedDataParallel\n"
        "from torch.nn.parallel import DistributedDataParallel as DDP\n"
        "def wrap(net, sharded):\n"
        "    cls = FullyShardedDataParallel if sharded else DDP\n"
        "    return cls(net)\n",
    ],
)
def test_aliases_of_the_fsdp1_class_are_followed(source):
    assert audit("x.py", source).constructors == 1


def test_relative_imports_resolve_with_the_module_name():
    source = "from .fsdp import FullyShardedDataParallel\nm = FullyShardedDataParallel(net)\n"
    assert audit("x.py", source, "torch.distributed.build").constructors == 1
    assert audit("x.py", source, "mypkg.build").constructors == 0
    assert audit("x.py", source).constructors == 0  # the module's own name unknown


def test_fsdp2_names_are_not_fsdp1_names():
    found = audit(
        "x.py",
        "from torch.distributed.fsdp._fully_shard import fully_shard, FSDPModule\n"
        "from torch.distributed._composable.fsdp import MixedPrecisionPolicy\n"
        "model = fully_shard(net, mp_policy=MixedPrecisionPolicy())\n"
        "model.no_sync()\n",
    )
    assert found.unmarked == ["x.py:4: an FSDP1 API on a model FSDP2 builds"]


def test_an_alias_names_an_fsdp1_name_too():
    found = audit(
        "x.py",
        "from torch.distributed.fsdp import _runtime_utils\n"
        "# TODO(fsdp2-port): F2P099 port by hand\n"
        "hook = _runtime_utils._post_backward_hook\n"
        "hook(state, handle)\n",
    )
    assert [f.split(": ", 1)[1] for f in found.unmarked_names] == [
        "FSDP1 name _runtime_utils._post_backward_hook without a marker"
    ]
    assert lines_of(found.unmarked_names) == [4]


def lines_of(found: list[str]) -> list[int]:
    return sorted(int(f.split(":")[1]) for f in found)


# -- wrapper classes ------------------------------------------------------------------------------


def test_fsdp1_subclasses_and_wrapper_cls_are_wrapper_classes():
    found = read(
        """\
        class Sharded(FSDP):
            pass

        class Plain(torch.nn.Module):
            pass

        with enable_wrap(wrapper_cls=FSDP):
            pass
        with enable_wrap(wrapper_cls=Plain):
            pass
        """
    )
    assert found.wrapper_classes == 2


def test_a_model_built_by_a_subclass_of_fsdp1_here_is_an_fsdp1_model():
    found = read(
        """\
        class Base(FSDP):
            pass

        class Sharded(Base):
            pass

        model = Sharded(net)
        fully_shard(model)
        """
    )
    assert found.constructors == 0  # not counted as a constructor: marked as a wrapper class
    assert lines(found.half_migrated) == [8]


# -- half-migrated --------------------------------------------------------------------------------


def test_an_fsdp2_policy_handed_to_an_fsdp1_constructor_is_half_migrated():
    found = read(
        """\
        a = FSDP(net, mixed_precision=MixedPrecisionPolicy(param_dtype=torch.bfloat16))
        policy = MixedPrecisionPolicy()
        b = FSDP(net, mixed_precision=policy)
        c = FSDP(net, mixed_precision=MixedPrecision(param_dtype=torch.bfloat16))
        later = FSDP(net, mixed_precision=reused)
        reused = MixedPrecisionPolicy()
        """
    )
    assert lines(found.half_migrated) == [1, 3]
    assert all("FSDP2 policy reaches an FSDP1 constructor" in f for f in found.half_migrated)


@pytest.mark.parametrize(
    "use",
    [
        "model.set_requires_gradient_sync(False)",
        "fully_shard(model)",
        "fully_shard_like_fsdp1(model)",
        "isinstance(model, FSDPModule)",
        "fsdp2_port.clip_grad_norm_(model.parameters(), 1.0)",
        "BF16Optimizer(model, lr=1e-3)",
    ],
)
def test_an_fsdp2_api_on_a_model_an_fsdp1_constructor_builds_is_half_migrated(use):
    found = read(f"model = FSDP(net)\n{use}\n")
    assert lines(found.half_migrated) == [2]
    assert found.untied_fsdp2 == []
    fsdp2 = read(f"model = fully_shard(net)\n{use}\n")
    assert fsdp2.half_migrated == []


def test_models_are_followed_through_the_file():
    found = read(
        """\
        def build(net):
            wrapped = FSDP(net).cuda()
            return wrapped

        def pair(net):
            return FSDP(net), None

        class Trainer:
            def __init__(self, model):
                self.model = model

            def step(self):
                self.model.set_requires_gradient_sync(False)

        class Child(Trainer):
            def other(self):
                isinstance(self.model, FSDPModule)

        first, second = pair(net)
        first.set_requires_gradient_sync(True)
        second.set_requires_gradient_sync(True)
        Trainer(build(net))
        state.model = FSDP(net) if sharded else net
        state.model.set_requires_gradient_sync(False)

        def step(config, model):
            config.set_requires_gradient_sync(False)
            model.set_requires_gradient_sync(False)

        step(settings, cached or FSDP(net))
        """
    )
    assert lines(found.half_migrated) == [13, 17, 20, 24, 28]
    assert lines(found.untied_fsdp2) == [21, 27]


def test_a_binding_that_cannot_reach_a_read_is_not_followed():
    found = read(
        """\
        def f(net, sharded):
            model.set_requires_gradient_sync(False)
            model = FSDP(net)

        def g(net, sharded):
            if sharded:
                model = FSDP(net)
            else:
                model = fully_shard(net)
                model.set_requires_gradient_sync(False)

        def h(nets):
            for net in nets:
                if model is not None:
                    model.set_requires_gradient_sync(False)
                model = FSDP(net)

        def k(models):
            for model in models:
                model.set_requires_gradient_sync(False)  # a new model each turn
                model = FSDP(model)
        """
    )
    assert lines(found.half_migrated) == [15]
    assert lines(found.untied_fsdp2) == [2, 20]


def test_fsdp2_apis_on_models_of_unknown_origin_are_untied():
    found = read(
        """\
        def step(model):
            model.set_requires_gradient_sync(False)
            fully_shard(model)
            isinstance(model, FSDPModule)
        """
    )
    assert lines(found.untied_fsdp2) == [2]  # fully_shard builds; after it, model is FSDP2
    assert found.half_migrated == []


def test_untied_fsdp2_apis_are_half_migrated_only_while_fsdp1_constructors_remain():
    untied = Audit(untied_fsdp2=["a.py:3"])
    fsdp1_left = Audit(constructors=1)
    assert run_problems({"a.py": Audit()}, {"a.py": untied, "b.py": fsdp1_left}) == [
        "a.py:3: an FSDP2 API on a model of unknown origin while FSDP1 constructors remain"
    ]
    assert run_problems({"a.py": Audit()}, {"a.py": untied}) == []
    assert run_problems({"a.py": untied}, {"a.py": untied, "b.py": fsdp1_left}) == []


def test_a_script_no_file_imports_is_half_migrated_only_by_what_it_may_reach():
    """FSDP1 models another script builds cannot reach a script of its own (``programs``);
    its own and a library's can; a library reaches every script's."""
    untied = Audit(untied_fsdp2=["a.py:3"])
    fsdp1_left = Audit(constructors=1)
    problem = ["a.py:3: an FSDP2 API on a model of unknown origin while FSDP1 constructors remain"]
    runs = {"a.py": untied, "b.py": fsdp1_left}
    assert run_problems({"a.py": Audit()}, runs, frozenset({"a.py", "b.py"})) == []
    assert run_problems({"a.py": Audit()}, runs, frozenset({"a.py"})) == problem  # b: a library
    assert run_problems({"a.py": Audit()}, runs, frozenset({"b.py"})) == problem  # a: a library
    itself = {"a.py": Audit(untied_fsdp2=["a.py:3"], constructors=1)}
    assert run_problems({"a.py": Audit()}, itself, frozenset({"a.py"})) == problem


def test_half_migrations_the_input_had_are_not_the_runs():
    """A test that builds an FSDP1 model and, later, an FSDP2 one under the same name reads
    as half-migrated before the run too: only what the run adds counts (lines move)."""
    had = Audit(half_migrated=["t.py:8: an FSDP2 API on a model an FSDP1 constructor builds"])
    same = Audit(half_migrated=["t.py:9: an FSDP2 API on a model an FSDP1 constructor builds"])
    more = Audit(half_migrated=[*same.half_migrated, "t.py:20: " + _FSDP2_ON_FSDP1])
    assert run_problems({"t.py": had}, {"t.py": same}) == []
    assert run_problems({"t.py": had}, {"t.py": more}) == more.half_migrated
    assert run_problems({}, {"t.py": same}) == same.half_migrated


_FSDP2_ON_FSDP1 = "an FSDP2 API on a model an FSDP1 constructor builds"


# -- unmarked -------------------------------------------------------------------------------------


def test_an_fsdp1_call_on_a_model_fsdp2_builds_is_unmarked():
    found = read(
        """\
        model = fully_shard(net)
        with model.no_sync():
            pass
        model.clip_grad_norm_(1.0)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        # TODO(fsdp2-port): F2P007 kept on purpose
        model.no_sync()
        model.no_sync()  # fsdp2-port: ignore
        other.no_sync()
        """
    )
    assert lines(found.unmarked) == [2, 4]
    assert all("FSDP1 API on a model FSDP2 builds" in f for f in found.unmarked)


def test_fully_shard_in_place_makes_its_argument_an_fsdp2_model_from_there_on():
    found = read(
        """\
        def setup(model):
            model.no_sync()
            fully_shard(model)
            model.no_sync()
            model._handle

        def bridge(self):
            fully_shard_like_fsdp1(self.model)
            self.model.summon_full_params()

        def layers(model):
            for layer in model.layers:
                layer.no_sync()  # the next layer's: not yet sharded
                fully_shard(layer)
        """
    )
    assert lines(found.unmarked) == [4, 5, 9]


def test_fsdp1_names_without_a_marker_are_unmarked():
    found = read(
        """\
        sd = FSDP.full_optim_state_dict(model, optim)
        # TODO(fsdp2-port): F2P008 port by hand
        sd = FSDP.full_optim_state_dict(model, optim)
        sd = FSDP.full_optim_state_dict(model, optim)  # fsdp2-port: ignore
        strategy = ShardingStrategy.FULL_SHARD
        # TODO(fsdp2-port): F2P002 a decorated definition: the marker sits above the decorator
        @decorate(FSDP)
        def f():
            pass
        """
    )
    assert [f.split(": ", 1)[1] for f in found.unmarked_names] == [
        "FSDP1 name FullyShardedDataParallel.full_optim_state_dict without a marker"
    ]
    assert lines(found.unmarked_names) == [1]
    # right while every model stays FSDP1: counted only in a run where one migrated
    before, after = {"x.py": Audit(constructors=1)}, {"x.py": found}
    assert len(run_unmarked(before, after)) == 1
    assert run_unmarked(after, after) == []


def test_type_tests_are_counted_apart_and_only_when_a_model_migrated():
    found = read(
        """\
        isinstance(model, FSDP)
        isinstance(model, (FSDP, FSDPModule))
        def f(model: FSDP) -> "FSDP":
            pass
        x: FSDP = build()
        issubclass(type(model), FSDP)
        type(model) is not FSDP and FSDP != type(model)
        """
    )
    assert found.unmarked == []
    assert lines(found.unmarked_type_tests) == [1, 3, 3, 5, 6, 7, 7]
    before, after = {"x.py": Audit(constructors=1)}, {"x.py": found}
    assert len(run_unmarked(before, after)) == 7
    assert run_unmarked(after, after) == []


def test_an_fsdp1_constructor_in_an_annotated_assignment_is_not_a_type_test():
    found = read("model: torch.nn.Module = FSDP(net)\n")
    assert lines(found.unmarked_names) == [1]
    assert found.unmarked_type_tests == []


# -- the file as a whole --------------------------------------------------------------------------


def test_a_file_that_does_not_parse_raises():
    with pytest.raises(SyntaxError):
        audit("x.py", "def f(:\n")


def test_a_file_without_fsdp_gives_nothing_but_untied_gradient_sync():
    assert audit("x.py", "import torch\nm = torch.nn.Linear(1, 1)\n") == Audit()
    found = audit("x.py", "def f(m):\n    m.set_requires_gradient_sync(False)\n")
    assert found.untied_fsdp2 == ["x.py:2"]


@pytest.mark.parametrize("name", sorted(FSDP1_ONLY_ATTRIBUTES))
def test_each_fsdp1_only_attribute_on_an_fsdp2_model_is_one_unmarked_use(name):
    """The codemod's list of FSDP1's attributes is the audit's: each, read or called on a model
    FSDP2 builds, is one unmarked use; on a plain module, none."""
    found = read(
        f"""\
        def shard(model, plain):
            fully_shard(model)
            model.{name}()
            plain.{name}()
        """
    )
    assert lines(found.unmarked) == [3]


def test_the_audit_imports_nothing_of_the_codemods_analysis():
    """Independent: only the marker format and its own name tables from ``codemods``."""
    allowed = {
        "fsdp2_port.codemods",
        # data: the audit's own name lists, and FSDP1's attributes
        "fsdp2_port.codemods.assumptions",
        "fsdp2_port.codemods.audit_names",
        "fsdp2_port.codemods.audit_models",
        "fsdp2_port.codemods.markers",
    }
    for module in (audit_module, audit_module.n, audit_models):
        tree = ast.parse(Path(module.__file__).read_text())  # type: ignore[arg-type]
        imported = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
                imported |= {f"{node.module}.{a.name}" for a in node.names}
            elif isinstance(node, ast.Import):
                imported |= {a.name for a in node.names}
        ours = {name for name in imported if name.startswith("fsdp2_port.codemods")}
        ours -= {f"fsdp2_port.codemods.audit_models.{name}" for name in vars(audit_models)}
        ours -= {f"fsdp2_port.codemods.assumptions.{name}" for name in vars(assumptions)}
        assert ours <= allowed | {
            "fsdp2_port.codemods.markers.PREFIX",
            "fsdp2_port.codemods.markers.ignored_lines",
        }, (
            module.__name__,
            ours,
        )
