"""The import graph as Python resolves it (``fsdp2_port.codemods.semantic.modules``) and the
programs built
on it (``fsdp2_port.codemods.semantic.programs``), on small trees written for each case."""

from __future__ import annotations

import textwrap
from pathlib import Path

from fsdp2_port.codemods.semantic import modules, programs


def _tree(root: Path, files: dict[str, str]) -> list[str]:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return sorted(str(root / name) for name in files if name.endswith(".py"))


def _graph(root: Path, files: dict[str, str]) -> modules.ModuleGraph:
    paths = _tree(root, files)
    return modules.build(paths, {p: Path(p).read_bytes() for p in paths})


def _targets(graph: modules.ModuleGraph, path: Path, root: Path) -> set[str]:
    return {
        str(Path(t).relative_to(root)) for entry in graph.imports[str(path)] for t in entry.targets
    }


def test_a_module_name_several_subprojects_define_resolves_to_the_importers_own(tmp_path):
    graph = _graph(
        tmp_path,
        {
            "a/train.py": "from grad_norm import clip\n",
            "a/grad_norm.py": "def clip(): ...\n",
            "b/train.py": "import grad_norm\n",
            "b/grad_norm.py": "def clip(): ...\n",
        },
    )
    assert _targets(graph, tmp_path / "a/train.py", tmp_path) == {"a/grad_norm.py"}
    assert _targets(graph, tmp_path / "b/train.py", tmp_path) == {"b/grad_norm.py"}
    assert graph.importers(str(tmp_path / "a/grad_norm.py")) == {str(tmp_path / "a/train.py")}


def test_a_package_file_run_as_a_script_finds_a_module_beside_it(tmp_path):
    """``python pkg/train.py`` puts ``pkg/`` first on ``sys.path``: ``from grad_norm import``
    in a package (Alpha-VLLM/Lumina-T2X's ``lumina_next_t2i/train.py``) finds its own
    folder's module, not the top-level ones of other subprojects that hold the same name."""
    graph = _graph(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/train.py": "from grad_norm import clip\n",
            "pkg/grad_norm.py": "def clip(): ...\n",
            "other/train.py": "import grad_norm\n",
            "other/grad_norm.py": "def clip(): ...\n",
            "third/grad_norm.py": "def clip(): ...\n",
        },
    )
    assert _targets(graph, tmp_path / "pkg/train.py", tmp_path) == {"pkg/grad_norm.py"}
    assert graph.renames(str(tmp_path / "pkg/train.py")) == {"grad_norm": "pkg.grad_norm"}


def test_a_dotted_import_executes_every_package_on_the_way(tmp_path):
    graph = _graph(
        tmp_path,
        {
            "run.py": "import a.b.c\nfrom a.b import d\nfrom a.b.c import name\n",
            "a/__init__.py": "",
            "a/b/__init__.py": "",
            "a/b/c.py": "name = 1\n",
            "a/b/d.py": "",
        },
    )
    assert _targets(graph, tmp_path / "run.py", tmp_path) == {
        "a/__init__.py",
        "a/b/__init__.py",
        "a/b/c.py",
        "a/b/d.py",
    }
    module = graph.module(str(tmp_path / "a/b/c.py"))
    assert (module.name, module.root, module.package) == ("a.b.c", str(tmp_path), False)
    assert graph.module(str(tmp_path / "a/b/__init__.py")).name == "a.b"


def test_relative_imports_resolve_from_the_importers_folder(tmp_path):
    graph = _graph(
        tmp_path,
        {
            "pkg/__init__.py": "from . import util\n",
            "pkg/util.py": "",
            "pkg/sub/__init__.py": "",
            "pkg/sub/m.py": "from ..util import x\nfrom . import sibling\n",
            "pkg/sub/sibling.py": "",
        },
    )
    assert _targets(graph, tmp_path / "pkg/__init__.py", tmp_path) == {
        "pkg/__init__.py",
        "pkg/util.py",
    }
    assert _targets(graph, tmp_path / "pkg/sub/m.py", tmp_path) == {
        "pkg/util.py",
        "pkg/sub/__init__.py",
        "pkg/sub/sibling.py",
    }


def test_a_src_layout_package_is_found_through_its_packaging_root(tmp_path):
    graph = _graph(
        tmp_path,
        {
            "pyproject.toml": "[project]\nname = 'x'\n",
            "src/lib/__init__.py": "",
            "src/lib/core.py": "",
            "tests/test_core.py": "from lib import core\n",
        },
    )
    assert _targets(graph, tmp_path / "tests/test_core.py", tmp_path) == {
        "src/lib/__init__.py",
        "src/lib/core.py",
    }


def test_a_folder_a_file_puts_on_sys_path_is_searched(tmp_path):
    graph = _graph(
        tmp_path,
        {
            "scripts/train.py": """\
                import os, sys
                sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "shared"))
                from helpers import build
            """,
            "shared/helpers.py": "def build(): ...\n",
            "other/helpers.py": "def build(): ...\n",
        },
    )
    assert _targets(graph, tmp_path / "scripts/train.py", tmp_path) == {"shared/helpers.py"}


def test_an_import_no_root_of_the_importer_holds_may_be_any_file_of_that_name(tmp_path):
    graph = _graph(
        tmp_path,
        {
            "scripts/train.py": "from helpers import build\nimport torch\n",
            "one/helpers.py": "",
            "two/helpers.py": "",
        },
    )
    assert _targets(graph, tmp_path / "scripts/train.py", tmp_path) == {
        "one/helpers.py",
        "two/helpers.py",
    }


def test_loaders_by_literal_import_and_by_computed_name_load_anything(tmp_path):
    graph = _graph(
        tmp_path,
        {
            "run.py": "import importlib\nimportlib.import_module('plugins.a')\n",
            "any.py": "import importlib\ndef load(n):\n    return importlib.import_module(n)\n",
            "plugins/__init__.py": "",
            "plugins/a.py": "",
        },
    )
    assert _targets(graph, tmp_path / "run.py", tmp_path) == {
        "plugins/__init__.py",
        "plugins/a.py",
    }
    assert graph.loads_any == {str(tmp_path / "any.py")}


def test_programs_hold_only_what_their_root_imports(tmp_path):
    paths = _tree(
        tmp_path,
        {
            "train.py": "import model\nif __name__ == '__main__':\n    pass\n",
            "model.py": "",
            "tools.py": "",  # imported by no file
            "eval.py": "import tools\nif __name__ == '__main__':\n    pass\n",
        },
    )
    texts = {p: Path(p).read_bytes() for p in paths}
    graph = modules.build(paths, texts)
    found = programs.find(graph, texts)
    train, model, tools, eval_ = (
        str(tmp_path / n) for n in ("train.py", "model.py", "tools.py", "eval.py")
    )
    assert found.entry == {train, eval_}
    assert found.meet(train, model)
    assert not found.meet(train, tools)
    assert not found.meet(eval_, model)
    assert found.meet(model, tools)  # both open: a program outside the run may import both
    whole = programs.find(graph, texts, whole_program=True)
    assert not whole.meet(model, tools)
    assert whole.meet(eval_, tools)


def test_tests_run_with_the_conftests_above_them_and_configs_load_named_modules(tmp_path):
    paths = _tree(
        tmp_path,
        {
            "tests/conftest.py": "import fixtures\n",
            "tests/fixtures.py": "",
            "tests/unit/test_a.py": "",
            "pkg/__init__.py": "",
            "pkg/models.py": "",
            "run.py": "if __name__ == '__main__':\n    pass\n",
        },
    )
    texts = {p: Path(p).read_bytes() for p in paths}
    graph = modules.build(paths, texts)
    found = programs.find(
        graph, texts, programs.spelled_in([b"_target_: pkg.models.Build\n"]), whole_program=True
    )
    test, fixtures = str(tmp_path / "tests/unit/test_a.py"), str(tmp_path / "tests/fixtures.py")
    assert found.meet(test, fixtures)
    assert found.meet(str(tmp_path / "run.py"), str(tmp_path / "pkg/models.py"))
    assert not found.meet(str(tmp_path / "run.py"), fixtures)


def test_a_loader_by_a_name_with_a_package_prefix_loads_that_package_only(tmp_path):
    graph = _graph(
        tmp_path,
        {
            "run.py": (
                "from importlib import import_module\n"
                "def build(kind):\n"
                "    name = f'plugins.{kind}'\n"
                "    return import_module(name)\n"
            ),
            "plugins/__init__.py": "",
            "plugins/a.py": "",
            "other.py": "",
        },
    )
    assert _targets(graph, tmp_path / "run.py", tmp_path) == {
        "plugins/__init__.py",
        "plugins/a.py",
    }
    assert not graph.loads_any


def test_a_file_loaded_by_its_path_is_imported_and_a_computed_name_in_a_folder_loads_it(
    tmp_path,
):
    graph = _graph(
        tmp_path,
        {
            "tests/test_train.py": """\
                import importlib.util, os
                from pathlib import Path
                ROOT = Path(__file__).resolve().parents[1]
                spec = importlib.util.spec_from_file_location("t", ROOT / "scripts" / "train.py")
                def load(name):
                    top = os.path.dirname(os.path.dirname(__file__))
                    where = os.path.join(top, "plugins", f"{name}.py")
                    return importlib.util.spec_from_file_location(name, where)
            """,
            "scripts/train.py": "",
            "plugins/a.py": "",
            "other.py": "",
        },
    )
    assert _targets(graph, tmp_path / "tests/test_train.py", tmp_path) == {
        "scripts/train.py",
        "plugins/a.py",
    }
    assert not graph.loads_any


def test_what_functions_do_with_their_arguments_is_followed_through_calls(tmp_path):
    graph = _graph(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/comm.py": """\
                import torch.distributed as dist

                def reduce(tensor, group=None):
                    dist.all_reduce(tensor, group=group)

                def average(tensors):
                    for t in tensors:
                        reduce(t)
            """,
            "pkg/adapter.py": """\
                from pkg.comm import average

                class Adapter:
                    def __init__(self, model):
                        self.model = model

                    def step(self, params):
                        grads = [p.grad for p in params]
                        self._sync(grads)

                    def _sync(self, grads):
                        average(grads)

                def groups(model):
                    decay = [p for p in model.parameters() if p.ndim >= 2]
                    flat = [p for p in model.parameters() if p.untyped_storage().size()]
                    return decay, flat

                def plain(model):
                    return model.training

                def encode(encoder, ids):
                    embeddings = encoder(ids)[0]
                    hidden = encoder.embed(ids)
                    return embeddings.shape, hidden.shape  # what calling it computes
            """,
        },
    )
    effects = graph.effects
    assert effects["pkg.comm.reduce"] == {0: {"collective"}}
    assert effects["pkg.comm.average"] == {0: {"collective"}}
    assert effects["pkg.adapter.Adapter.step"] == {0: {"collective"}}, "two calls down"
    assert effects["pkg.adapter.groups"] == {0: {"shape", "storage"}}
    assert "pkg.adapter.plain" not in effects
    assert "pkg.adapter.encode" not in effects
    assert "pkg.adapter.Adapter.__init__" not in effects


def test_a_factory_builds_anew_through_its_names_tuples_and_chosen_classes(tmp_path):
    """Every call of a factory builds a new object (effect ``"new"`` of its return value)
    when each ``return`` gives only objects of calls of the run's classes or factories:
    directly, through local names (moved by ``.to(...)``), as a tuple, or through a local
    name bound to one of several classes. A name that may hold an argument is not new."""
    graph = _graph(
        tmp_path,
        {
            "t5.py": """                class Encoder: ...
                class Decoder: ...
                class Tokenizer: ...

                def _t5(encoder_only, tokenizer, device):
                    if encoder_only:
                        cls = Encoder
                    else:
                        cls = Decoder
                    model = cls()
                    model = model.to(device)
                    if tokenizer:
                        return model, Tokenizer()
                    return model

                def umt5(**kwargs):
                    return _t5(**kwargs)

                def chosen(big):
                    cls = Encoder if big else Decoder
                    return cls()

                def given(model, device):
                    model = model.to(device)
                    return model

                def maybe(model, fresh):
                    if fresh:
                        model = Encoder()
                    return model
            """,
        },
    )
    new = {name for name, effects in graph.effects.items() if "new" in effects.get(-1, ())}
    assert new == {"t5._t5", "t5.umt5", "t5.chosen"}


def test_a_modules_functions_and_classes_are_names_it_binds_once_by_def_or_class(tmp_path):
    """What ``from m import name`` may be taken for as a value: a function or class only where
    nothing else binds the name at module level (an assignment, an import, a second ``def``,
    a ``global`` in a function)."""
    graph = _graph(
        tmp_path,
        {
            "m.py": """
                import os
                from functools import partial

                def shard(model): ...
                class Net: ...
                def twice(): ...
                def twice(): ...
                def rebound(): ...
                rebound = partial(rebound)
                def changed(): ...
                def swap():
                    global changed
                    changed = None
                model = Net()
                if os.environ:
                    def maybe(): ...
            """,
        },
    )
    assert graph.definitions == {"m.shard", "m.Net", "m.swap"}
    assert graph.run_modules().defines("m.shard") and not graph.run_modules().defines("m.model")
