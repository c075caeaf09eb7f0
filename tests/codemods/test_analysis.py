"""The analysis pieces on their own: names, positions and edits, model ties, the decision."""

from __future__ import annotations

import ast
import textwrap

import pytest

from fsdp2_port.codemods import text
from fsdp2_port.codemods.analysis import FileAnalysis, Source
from fsdp2_port.codemods.decide import decide
from fsdp2_port.codemods.options import Options
from fsdp2_port.codemods.plan import FilePlan, Position, Rewrite, Site, made
from fsdp2_port.codemods.refs import (
    UNKNOWN,
    Built,
    Function,
    Instance,
    Optimizer,
    Passed,
    Returned,
)
from fsdp2_port.codemods.semantic.modules import RunModules

FSDP = "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"


def analysis(source: str, module: str = "") -> FileAnalysis:
    return FileAnalysis(Source("m.py", textwrap.dedent(source), module), Options())


def name_node(a: FileAnalysis, identifier: str, occurrence: int = -1) -> ast.Name:
    found = [n for n in a.names.by_type[ast.Name] if n.id == identifier]  # type: ignore[attr-defined]
    return found[occurrence]  # type: ignore[return-value]


# -- names -------------------------------------------------------------------------------------
def test_a_name_bound_once_to_a_chain_resolves_like_it():
    a = analysis(
        """
        from typing import TypeAlias
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed import fsdp

        FSDP1Module: TypeAlias = FSDP
        Wrapper = fsdp.FullyShardedDataParallel
        Twice = FSDP
        Twice = None

        def f():
            hook = fsdp.wrap
            return FSDP1Module, Wrapper, Twice, hook
        """
    )
    full = {"torch.distributed.fsdp.FullyShardedDataParallel"}
    assert a.names.qualified(name_node(a, "FSDP1Module")) == full
    assert a.names.qualified(name_node(a, "Wrapper")) == full
    assert a.names.qualified(name_node(a, "Twice")) == set(), "bound twice: not an alias"
    assert a.names.qualified(name_node(a, "hook")) == {"torch.distributed.fsdp.wrap"}


def test_qualified_names_follow_python_scoping():
    a = analysis(
        """
        import torch.distributed.fsdp as F
        from torch.distributed import fsdp
        FSDP = None

        class C:
            FSDP = fsdp.FullyShardedDataParallel
            def method(self):
                return FSDP

        def shadow(F):
            return F.FullyShardedDataParallel

        def lazy():
            from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
            return FSDP
        """
    )
    qualified = a.names.qualified
    attribute = next(
        n for n in a.names.by_type[ast.Attribute] if a.source(n) == "F.FullyShardedDataParallel"
    )
    assert qualified(attribute) == set(), "a parameter shadows the module alias"
    in_method = next(
        n
        for n in a.names.by_type[ast.Name]
        if n.id == "FSDP" and isinstance(n.ctx, ast.Load) and n.lineno == 9  # type: ignore[attr-defined]
    )
    assert qualified(in_method) == set(), "a method does not see its class body"
    assert qualified(name_node(a, "FSDP", -1)) == {
        "torch.distributed.fsdp.FullyShardedDataParallel"
    }


def test_a_module_imported_by_a_call_resolves_like_an_import():
    """``tv = pytest.importorskip("torchvision")`` (or ``importlib.import_module``) binds the
    module: ``tv.models.resnet18`` is torchvision's; a relative name or a second binding is
    not followed."""
    a = analysis(
        """
        import importlib
        import pytest

        def f(name):
            tv = pytest.importorskip("torchvision")
            fs = importlib.import_module("torch.distributed.fsdp")
            rel = importlib.import_module(".sub", "pkg")
            other = importlib.import_module(name)
            return tv.models.resnet18, fs.FullyShardedDataParallel, rel.x, other.y

        def g():
            global late
            return late.z
        """
    )
    chains = {a.source(n): a.names.qualified(n) for n in a.names.by_type[ast.Attribute]}
    assert chains["tv.models.resnet18"] == {"torchvision.models.resnet18"}
    assert chains["fs.FullyShardedDataParallel"] == {
        "torch.distributed.fsdp.FullyShardedDataParallel"
    }
    assert chains["rel.x"] == set() and chains["other.y"] == set()
    assert chains["late.z"] == set(), "a global bound nowhere"


def test_relative_imports_resolve_against_the_module_name():
    a = analysis("from ..utils import build\nfrom . import sibling\n", module="pkg.sub.train")
    assert {b.qualified for b in a.names.imports()} == {"pkg.utils.build", "pkg.sub.sibling"}


def test_uses_count_string_annotations_and_all():
    a = analysis(FSDP + "__all__ = ['FSDP']\ndef f(m: 'FSDP'): pass\n")
    (binding,) = list(a.names.imports())
    assert a.names.uses()[binding] == 2


# -- positions and edits ------------------------------------------------------------------------
def test_columns_are_characters_and_lines_break_like_cpython():
    source = "x = 'café'; y = FSDP(m)\r\nz = 1\rw = FSDP(n)\n"
    tree = ast.parse(source)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    lines = text.LineIndex(source)
    first, second = sorted(calls, key=lambda c: (c.lineno, c.col_offset))
    assert (lines.line_of(lines.start(first)), lines.column(lines.start(first))) == (1, 17)
    assert lines.source(first) == "FSDP(m)"
    assert (lines.line_of(lines.start(second)), lines.column(lines.start(second))) == (3, 5)


def test_overlapping_edits_are_refused_and_positions_tracked():
    with pytest.raises(text.OverlappingEdits):
        text.apply("abcdef", [text.Edit(1, 4, "x"), text.Edit(3, 5, "y")])
    new, starts = text.apply_tracked("abcdef", [text.Edit(4, 4, "--"), text.Edit(0, 2, "Z")])
    assert new == "Zcd--ef" and starts == [3, 0]


# -- ties ---------------------------------------------------------------------------------------
def ties_of(source: str, receiver: str, occurrence: int = -1):
    a = analysis(FSDP + textwrap.dedent(source))
    return a.ties.of(
        name_node(a, receiver, occurrence)
        if "." not in receiver
        else _attribute(a, receiver, occurrence)
    )


def _attribute(a, receiver, occurrence):
    return [n for n in a.names.by_type[ast.Attribute] if a.source(n) == receiver][occurrence]


def test_ties_follow_names_builders_methods_and_factories():
    assert ties_of("def f(n):\n    m = FSDP(n)\n    k = m\n    return k\n", "k")[0] == {"m.py:3:9"}
    builder = (
        "def build(n):\n    return FSDP(n)\n\n"
        "def train(n):\n    model = build(n)\n    return model\n"
    )
    assert ties_of(builder, "model")[0] == {"m.py:3:12"}
    klass = (
        "class T:\n    def setup(self, n):\n        self.model = self.wrap(n)\n"
        "    def wrap(self, n):\n        return FSDP(n)\n"
        "    def step(self):\n        return self.model\n"
    )
    assert ties_of(klass, "self.model")[0] == {"m.py:6:16"}
    factory = (
        "import functools\ndef f(n):\n"
        "    make = functools.partial(FSDP, use_orig_params=True)\n    m = make(n)\n    return m\n"
    )
    assert ties_of(factory, "m")[0] == {"m.py:4:12"}


def test_calls_into_other_modules_are_deferred():
    ids, deferred = ties_of(
        "from pkg.build import build\ndef f(n):\n    m = build(n)\n    return m\n", "m"
    )
    assert not ids and deferred == {Returned("pkg.build.build")}


def test_an_assignment_in_the_other_branch_does_not_reach():
    source = (
        "def f(n, kind):\n    if kind == 1:\n        m = FSDP(n)\n    else:\n        m = n\n"
        "        m.state_dict()\n    return m\n"
    )
    assert ties_of(source, "m", -2)[0] == set(), "the else branch never sees the FSDP model"
    assert ties_of(source, "m", -1)[0] == {"m.py:4:13"}, "after the if, both may"


def test_an_assignment_does_not_reach_its_own_value():
    g = "\ndef g(x):\n    return FSDP(x)\n"
    source = "def f(n):\n    m = wrap(n)\n    m = g(m)\n    return m\n" + g
    assert ties_of(source, "m", 2)[0] == set(), "g(m) reads the m of the line before"
    assert ties_of(source, "m", -1)[0] == {"m.py:8:12"}
    loop = "def f(n):\n    m = n\n    for _ in range(2):\n        m = g(m)\n" + g
    assert ties_of(loop, "m", 2)[0] == {"m.py:8:12"}, "the loop brings it back"


def test_parameters_other_files_may_pass_wait_for_the_run():
    from fsdp2_port.codemods.semantic.resolve import Resolver

    helper = analysis(
        "class Trainer:\n    def __init__(self, model, opt):\n        self.model = model\n"
        "    def save(self):\n        return self.model\n\ndef save(m, path=None):\n    return m\n",
        "pkg.helper",
    )
    caller = analysis(
        FSDP + "from pkg.helper import Trainer, save\n\ndef main(n, other):\n"
        "    model = FSDP(n)\n    Trainer(model, None)\n    save(path=1, m=other)\n"
        "    save(model)\n",
        "pkg.main",
    )
    ids, deferred = helper.ties.of(_attribute(helper, "self.model", -1))
    assert not ids and deferred == {Passed("pkg.helper.Trainer.__init__", "model")}
    plans = [helper.finish(), caller.finish()]
    resolver = Resolver(plans)
    assert resolver.models(deferred) == {Built("m.py:5:13")}
    assert resolver.models({Passed("pkg.helper.save", "m")}) == {Built("m.py:5:13")}
    assert resolver.models({Passed("pkg.helper.Trainer.__init__", "opt")}) == set()
    # code outside the run may call them too, unless the run is the whole program
    assert UNKNOWN in resolver.settle({Passed("pkg.helper.Trainer.__init__", "opt")})
    whole = Resolver(plans, RunModules(whole_program=True))
    assert whole.settle({Passed("pkg.helper.Trainer.__init__", "opt")}) == set()
    assert whole.settle({Passed("pkg.helper.save", "path")}) == set()
    assert UNKNOWN in whole.settle({Passed("pkg.helper.Trainer.save", "x")}), "never called"


# -- the decision -------------------------------------------------------------------------------
def site(
    index: int, *, constructor=None, ties=(), requirement="NEVER", rewrite=True, groups=(), **facts
):
    return made(
        Site("F2P000", Position("p.py", index, 1, 0, 0, 0, ""), "", requirement, index=index),
        rewrite=Rewrite([], "") if rewrite else None,
        ties=frozenset(ties),
        groups=frozenset(groups),
        constructor=constructor,
        **facts,
    )


def test_whole_models_or_nothing():
    plan = FilePlan("p.py")
    plan.sites = [
        site(0, constructor="A"),
        site(1, constructor="B"),
        site(2, ties={"A"}, requirement="MODELS"),
        site(3, ties={"B"}, requirement="MODELS", rewrite=False),  # no rewrite: keeps B on FSDP1
        site(4, requirement="RUN"),
        site(5, requirement="ALWAYS"),
        site(6, ties={"A"}, requirement="MODELS", groups={"g"}),
        site(7, requirement="NEVER", groups={"g"}),  # fails its group
    ]
    decisions = decide([plan])
    assert decisions.migrating == set(), "A is blocked through the group, B by its site"
    assert not decisions.run_migrates
    assert decisions.rewritten == set(), "5's form is right on any model, but none migrates"
    plan.sites = plan.sites[:3] + plan.sites[4:6]
    decisions = decide([plan])
    assert decisions.migrating == {"A", "B"} and decisions.run_migrates
    assert decisions.rewritten == {("p.py", i) for i in (0, 1, 2, 4, 5)}


def test_a_form_right_on_any_model_goes_only_where_a_migrating_model_meets_it():
    plan = FilePlan("p.py")
    plan.sites = [
        site(0, constructor="A"),
        site(1, constructor="B"),
        site(2, ties={"B"}, requirement="MODELS", rewrite=False),  # keeps B on FSDP1
        site(3, ties={"A"}, requirement="ALWAYS", opaque=False),
        site(4, ties={"B"}, requirement="ALWAYS", opaque=False),  # only B meets it: spare
        site(5, ties={"B"}, requirement="ALWAYS", about_optimizer=True, optimizers={Optimizer("")}),
        site(6, ties={"B"}, requirement="ALWAYS", opaque=False, groups={"g"}),
        site(7, ties={"A"}, requirement="MODELS", groups={"g"}),  # needs 6 with it
        site(8, ties={"B"}, requirement="ALWAYS"),  # opaque: any model of the run may meet it
    ]
    decisions = decide([plan])
    assert decisions.migrating == {"A"}
    assert decisions.rewritten == {("p.py", i) for i in (0, 3, 5, 6, 7, 8)}
    reason = decisions.reasons[("p.py", 4)]
    assert reason.model_stays and reason.text == "its model stays FSDP1: FSDP(...) at line 1"
    plan.sites = [site(0, requirement="ALWAYS")]  # no constructor: its models come from elsewhere
    plan.fsdp1_or_port = True
    assert decide([plan]).rewritten == {("p.py", 0)}


def test_ties_follow_tuple_unpacking_of_a_builder():
    source = (
        "def build(n):\n    model = FSDP(n)\n    return model, make_optimizer(model)\n\n"
        "def train(n):\n    model, optimizer = build(n)\n    return model\n"
    )
    assert ties_of(source, "model")[0] == {"m.py:3:13"}
    assert ties_of(source, "optimizer")[0] == set()


def test_ties_follow_a_walk_of_a_models_parts():
    """A part of a model (``m.modules()``, ``named_modules()``, ``FSDP.fsdp_modules(m)``) is
    the model's: a site on it is on the model; the walk's names are no model."""
    source = (
        "def f(n):\n    model = FSDP(n)\n"
        "    for unit in FSDP.fsdp_modules(model):\n        unit._handle\n"
        "    for name, part in model.named_modules():\n        part, name\n"
        "    for other in [model]:\n        other\n"
    )
    assert ties_of(source, "unit")[0] == {"m.py:3:13"}
    assert ties_of(source, "part")[0] == {"m.py:3:13"}
    assert ties_of(source, "name") == (set(), set())
    a = analysis(FSDP + textwrap.dedent(source))
    assert a.ties.opaque(name_node(a, "other"))  # an element of a list: anything


def test_unpacking_a_call_the_analysis_does_not_follow_elementwise_is_anything():
    """``model, step = self.pair(n)``: a method's tuples are not followed element by element,
    so the element may be any model (never none)."""
    source = (
        "class T:\n    def pair(self, n):\n        return FSDP(n), 0\n"
        "    def run(self, n):\n        model, step = self.pair(n)\n        return model\n"
    )
    a = analysis(FSDP + source)
    assert a.ties.opaque(name_node(a, "model"))


def test_a_callee_spelled_as_an_acronym_is_a_class():
    """``SGD(model.parameters())`` builds a new object (a guess by spelling, like CamelCase):
    it holds no model; ``MAX_LEN(model)`` is a function, which may hand its argument back."""
    source = (
        "from torch.optim import SGD\nfrom lib import MAX_LEN\n\ndef f(n):\n"
        "    model = FSDP(n)\n    opt = SGD(model.parameters())\n    other = MAX_LEN(model)\n"
        "    return opt, other\n"
    )
    a = FileAnalysis(
        Source("m.py", FSDP + source, "m", run_modules=RunModules(frozenset({"m"}))), Options()
    )
    assert a.ties.of(name_node(a, "opt")) == (set(), {Instance("m.py:7:11")})
    assert a.ties.of(name_node(a, "other"))[0] == {"m.py:6:13"}


def test_a_copy_holds_the_models_of_what_it_copies_and_is_made_where_it_is():
    """``copy.deepcopy(x)`` is a new object holding ``x``'s models: its own origin, so an
    object a constructor wraps later is not it."""
    from fsdp2_port.codemods.refs import COPY
    from fsdp2_port.codemods.semantic.resolve import Resolver

    source = (
        "import copy\n\ndef f(n):\n    ema = copy.deepcopy(n)\n    model = FSDP(n)\n"
        "    return ema, copy.deepcopy(model)\n"
    )
    a = analysis(FSDP + source, "m")
    ema = a.ties.of(name_node(a, "ema"))
    assert ema == (set(), {Returned("m.py:5:11" + COPY)})
    resolver = Resolver([a.finish()])
    assert resolver.origins(ema[1]) == set(ema[1])
    assert resolver.models([Returned("m.py:7:17" + COPY)]) == {Built("m.py:6:13")}


def _resolver_of(sources: dict[str, str], *, definitions: set[str]):
    """The run of ``sources`` (module -> text), whole, its modules' functions and classes
    ``definitions``."""
    from fsdp2_port.codemods.semantic.resolve import Resolver

    run = RunModules(frozenset(sources), whole_program=True, definitions=frozenset(definitions))
    options = Options(whole_program=True)
    analyses = [
        FileAnalysis(Source(f"{m}.py", textwrap.dedent(text), m, run_modules=run), options)
        for m, text in sources.items()
    ]
    return Resolver([a.finish() for a in analyses], run), analyses


_SHARD = FSDP + "def shard(device_id, model):\n    return FSDP(model, device_id=device_id)\n"


def test_a_function_handed_on_as_a_value_is_followed_to_where_it_is_called():
    """``partial(shard, 0)`` handed to ``configure``, which calls it: ``configure``'s argument
    reaches ``shard``'s second parameter (one preset), and the call returns its model."""
    resolver, _ = _resolver_of(
        {
            "h": _SHARD,
            "p": """
                import functools
                from h import shard

                class Net: ...

                def configure(model, shard_fn):
                    return shard_fn(model)

                def main():
                    return configure(Net(), functools.partial(shard, 0))
            """,
        },
        definitions={"h.shard", "p.Net", "p.configure", "p.main"},
    )
    assert resolver.origins([Passed("h.shard", "model")]) == {Returned("p.Net")}
    assert resolver.models([Returned("p.configure")]) == {Built("h.py:3:12")}


@pytest.mark.parametrize(
    ("escape", "anything"),
    [
        ("pass", False),
        ("fn is None", False),
        ("register(fn)", True),
        ("HOOKS = [fn]", True),
        ("state.fn = fn", True),
        ("print(fn)", False),
        ("isinstance(fn, functools.partial)", False),
        ("sorted([], key=fn)", True),
        ("obj.method(fn)", True),
    ],
)
def test_a_function_value_that_reaches_code_not_followed_may_be_called_with_anything(
    escape, anything
):
    """A library, a display, an attribute, a builtin that keeps or calls it, a method of an
    object of no known class: what calls the function there is not seen, so its parameters
    may hold anything. A test of the value, or a builtin that only inspects it, hands it to
    nothing."""
    resolver, _ = _resolver_of(
        {
            "h": _SHARD,
            "p": f"""
                import functools
                from h import shard
                from lib import register, state, obj

                def main(net):
                    fn = functools.partial(shard, 0)
                    {escape}
                    return fn(net)

                main(0)
            """,
        },
        definitions={"h.shard", "p.main"},
    )
    assert (UNKNOWN in resolver.origins([Passed("h.shard", "model")])) is anything


def test_an_imported_name_is_a_function_of_the_run_only_where_its_module_defines_one():
    """``from h import shard`` is the function ``h.shard`` when ``h`` binds it once, by its
    ``def``; any other imported name may be any value (a model a module built)."""
    _, (_, a) = _resolver_of(
        {"h": _SHARD, "p": "from h import shard, model\n\nshard, model\n"},
        definitions={"h.shard"},
    )
    assert a.ties._value(name_node(a, "shard")) == {Function("h.shard")}
    assert a.ties._value(name_node(a, "model")) == {UNKNOWN}


def test_ties_follow_what_this_file_passes_to_a_helper():
    source = (
        "def clip(model, max_norm):\n    return model.clip_grad_norm_(max_norm)\n\n"
        "def train(n):\n    model = FSDP(n)\n    clip(model, 1.0)\n    return clip\n"
    )
    assert ties_of(source, "model", 0)[0] == {"m.py:6:13"}
    method = (
        "class T:\n    def step(self, model):\n        return model\n"
        "    def run(self, n):\n        return self.step(FSDP(n))\n"
    )
    assert ties_of(method, "model")[0] == {"m.py:6:26"}


def test_a_receiver_from_another_files_call_waits_for_the_run():
    """Only the run knows whether ``build`` builds a model: if no file of it does, the
    receiver is not one, and an FSDP1-looking attribute on it is nobody's business."""
    from fsdp2_port.codemods import engine, registry

    source = (
        "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
        "from configs import build\n\n"
        "def f():\n    cfg = build()\n    return cfg.sharding_strategy, cfg.clip_grad_norm_(1.0)\n"
    )
    _, findings = engine.migrate_text(source, "m.py", registry.select(), Options())
    assert [(f.code, f.line, f.message.split(":")[0]) for f in findings] == [], (
        "no F2P010 for cfg.sharding_strategy (cfg is no model), no clip form: no model "
        "migrates, and a file nothing else changes keeps its unused FSDP1 import"
    )
