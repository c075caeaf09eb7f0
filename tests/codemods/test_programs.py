"""``programs``: which entry scripts may run a constructor. Each case is a small tree of files;
the answer is either the exact set of scripts or ``None`` (any program), and every doubt must
land on ``None``: a wrong set would leave FSDP1 calls on FSDP2 models."""

import textwrap

import pytest

from fsdp2_port.codemods import programs

WRAP = """\
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def wrap(model):
    return FSDP(model)
"""
SCRIPT = """\
from lib import wrap


def main():
    wrap(None)


if __name__ == "__main__":
    main()
"""
PLAIN = """\
def main():
    pass


if __name__ == "__main__":
    main()
"""


def _find(tmp_path, files: dict[str, str], at: tuple[str, int] = ("lib.py", 5)):
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    paths = sorted(str(p) for p in tmp_path.rglob("*.py"))
    found = programs.find(paths, [("c", str(tmp_path / at[0]), at[1])], paths)
    where = found.runs_in.get("c", None) if found.entry else None
    return found, None if where is None else {p[len(str(tmp_path)) + 1 :] for p in where}


def test_a_helper_runs_only_in_the_scripts_that_reach_it(tmp_path):
    found, where = _find(tmp_path, {"lib.py": WRAP, "a.py": SCRIPT, "b.py": PLAIN})
    assert where == {"a.py"}
    assert not found.may_meet(str(tmp_path / "b.py"), "c")
    assert found.may_meet(str(tmp_path / "a.py"), "c")
    assert found.may_meet(str(tmp_path / "lib.py"), "c")  # not a script: any program


def test_a_method_of_the_same_name_on_an_object_does_not_reach_a_helper(tmp_path):
    """``trainer.wrap(...)`` in another script calls its class's method, not ``lib.wrap``:
    only the script that imports and calls the function runs the constructor in it. Where the
    file defining the function also has a method so named, any read of the name may reach it."""
    other = (
        "from trainers import Trainer\n\n\ndef main():\n    trainer = Trainer()\n"
        "    trainer.wrap(None)\n\n\n"
        'if __name__ == "__main__":\n    main()\n'
    )
    files = {"lib.py": WRAP, "a.py": SCRIPT, "b.py": other, "trainers.py": "class Trainer: ...\n"}
    assert _find(tmp_path / "apart", files)[1] == {"a.py"}
    with_method = WRAP + "\n\nclass Wrapper:\n    def wrap(self, model):\n        return model\n"
    files["lib.py"] = with_method
    assert _find(tmp_path / "method", files)[1] == {"a.py", "b.py"}


def test_a_function_of_a_script_is_read_only_in_that_script(tmp_path):
    own = SCRIPT.replace("from lib import wrap\n", WRAP).replace("wrap(None)", "wrap(None)")
    _, where = _find(tmp_path, {"a.py": own, "b.py": PLAIN}, ("a.py", 5))
    assert where == {"a.py"}  # b.py's own main() is another function


def test_a_function_of_a_script_read_nowhere_runs_in_that_script(tmp_path):
    """small-ablation's ``def _mp_fn(index): main()`` beside the main guard: a launcher may
    call it, in that script's program only (unless a config of the run names it)."""
    launched = "\n\ndef _mp_fn(index):\n    wrap(None)\n\n\nif __name__ == '__main__':\n    pass\n"
    own = WRAP + launched
    _, where = _find(tmp_path, {"a.py": own, "b.py": PLAIN}, ("a.py", 5))
    assert where == {"a.py"}
    configured = {"a.py": own, "b.py": PLAIN, "run.yaml": "fn: a._mp_fn\n"}
    _, where = _find(tmp_path, configured, ("a.py", 5))
    assert where is None


@pytest.mark.parametrize(
    "files",
    [
        pytest.param({"lib.py": WRAP, "a.py": PLAIN}, id="read-nowhere"),
        pytest.param(
            {"lib.py": WRAP, "a.py": PLAIN, "conf/run.yaml": "_target_: lib.wrap\n"},
            id="named-by-a-config",
        ),
        pytest.param(
            {"lib.py": WRAP, "a.py": SCRIPT, "registry.py": "from lib import wrap\nB = [wrap]\n"},
            id="read-at-module-level-of-a-library",
        ),
        pytest.param(
            {"lib.py": WRAP, "a.py": SCRIPT, "run.py": "import a\n"},
            id="script-imported",
        ),
        pytest.param(
            {
                "lib.py": WRAP,
                "a.py": SCRIPT,
                "run.py": "import importlib\nimportlib.import_module('pkg.a')\n",
            },
            id="script-loaded-by-name",
        ),
        pytest.param({"lib.py": WRAP + "\nwrap(None)\n", "a.py": PLAIN}, id="module-level"),
        pytest.param({"lib.py": WRAP, "a.py": SCRIPT, "broken.py": "def f(:\n wrap\n"}, id="parse"),
    ],
)
def test_any_doubt_means_any_program(tmp_path, files):
    _, where = _find(tmp_path, files)
    assert where is None


def test_config_names_count_only_next_to_the_run(tmp_path):
    files = {"lib.py": WRAP, "a.py": SCRIPT, "b.py": PLAIN, "docs/x.yaml": "wrap: 1\n"}
    _, where = _find(tmp_path, files)
    assert where == {"a.py"}  # docs/ holds no file of the run


def test_a_constructor_in_init_or_forward_is_reached_through_its_class(tmp_path):
    for method in ("__init__", "forward"):
        lib = f"""\
            from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


            class Wrapped:
                def {method}(self, model):
                    return FSDP(model)


            class Sub(Wrapped):
                pass
            """
        script = SCRIPT.replace("from lib import wrap", "from lib import Sub").replace(
            "wrap(None)", "Sub()"
        )
        _, where = _find(tmp_path, {"lib.py": lib, "a.py": script, "b.py": PLAIN}, ("lib.py", 6))
        assert where == {"a.py"}, method


def test_a_decorator_runs_where_the_function_is_defined(tmp_path):
    lib = WRAP + "\n\n@wrap\ndef registered():\n    pass\n"
    _, where = _find(tmp_path, {"lib.py": lib, "a.py": SCRIPT})
    assert where is None  # applied when lib is imported, in any program


def test_no_entry_script_no_programs(tmp_path):
    found, _ = _find(tmp_path, {"lib.py": WRAP, "a.py": "from lib import wrap\nwrap(None)\n"})
    assert found.entry == frozenset()
    assert found.may_meet(str(tmp_path / "a.py"), "c")


def _unreached(tmp_path, files: dict[str, str], at: tuple[str, int]) -> bool:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    paths = sorted(str(p) for p in tmp_path.rglob("*.py"))
    found = programs.find(paths, [], paths, unread=[(str(tmp_path / at[0]), at[1])])
    return bool(found.never_run)


HELPERS = """\
def used(model):
    return model


def unused(model):
    return model.state_dict()


def only_unused_reads(model):
    return unused(model)
"""


@pytest.mark.parametrize(
    "script,line,unreached",
    [
        pytest.param("from helpers import used\nused(1)\n", 6, True, id="read-nowhere"),
        pytest.param("from helpers import used\nused(1)\n", 10, True, id="read-by-unread-only"),
        pytest.param("from helpers import used\nused(1)\n", 2, False, id="read-at-module-level"),
        pytest.param("import helpers\nhelpers.unused(1)\n", 6, False, id="read-as-an-attribute"),
        pytest.param(
            "import pkg.helpers as h\nh.unused(1)\n", 6, False, id="read-on-a-module-alias"
        ),
        pytest.param(
            "from lib import Saver\nsaver = Saver()\nsaver.unused(1)\n",
            6,
            True,
            id="a-method-of-that-name-on-an-object",
        ),
        pytest.param(
            "import helpers\nfrom lib import run, saver\nrun(helpers)\nsaver.unused(1)\n",
            6,
            False,
            id="a-module-handed-on-as-a-value",
        ),
        pytest.param("CALLBACKS = {'save': 'helpers.unused'}\n", 6, False, id="named-by-a-string"),
        pytest.param(
            "from helpers import unused\n\n\nclass T:\n    def step(self):\n        unused(self)\n",
            6,
            False,
            id="called-in-a-method",
        ),
    ],
)
def test_a_line_no_program_runs(tmp_path, script, line, unreached):
    """In a whole program, a line runs only if its module-level function is read (a name, an
    attribute of a module the file imports, a string, an import under another name) somewhere
    that runs: at module level, in a method or class (a framework may call those by names the
    run never spells), or in a function read so in turn. An attribute of an object
    (``saver.unused``) is its class's method, unless the file hands a module on as a value.
    Any doubt: it runs."""
    assert (
        _unreached(tmp_path, {"helpers.py": HELPERS, "train.py": script}, ("helpers.py", line))
        is unreached
    )


def test_decorated_configured_or_packaged_code_runs(tmp_path):
    decorated = HELPERS.replace("def unused", "@register\ndef unused")
    assert not _unreached(tmp_path / "a", {"helpers.py": decorated}, ("helpers.py", 7))
    named = {"helpers.py": HELPERS, "conf.yaml": "save: unused\n"}
    assert not _unreached(tmp_path / "b", named, ("helpers.py", 6))
    scripts = {
        "pkg/helpers.py": HELPERS,
        "pyproject.toml": '[project.scripts]\nx = "pkg.helpers:unused"\n',
    }
    assert not _unreached(tmp_path / "d", scripts, ("pkg/helpers.py", 6))  # a console script


SAVER = "class Saver{}:\n    def save(self, model):\n        return model.state_dict()\n"


@pytest.mark.parametrize(
    "saver,script,unreached",
    [
        pytest.param(SAVER.format(""), "print(1)\n", True, id="a-class-nothing-names"),
        pytest.param(
            SAVER.format(""), "from helpers import Saver\n", True, id="imported-method-unread"
        ),
        pytest.param(
            SAVER.format(""),
            "from helpers import Saver\nSaver().save(None)\n",
            False,
            id="method-called",
        ),
        pytest.param(
            SAVER.format(""),
            "from helpers import Saver\nSaver().keep(None)\n",
            True,
            id="another-method-called",
        ),
        pytest.param(SAVER.format("(Base)"), "print(1)\n", False, id="a-base-may-register"),
        pytest.param("@register\n" + SAVER.format(""), "print(1)\n", False, id="decorated"),
        pytest.param(SAVER.format("(metaclass=Registry)"), "print(1)\n", False, id="metaclass"),
    ],
)
def test_methods_run_unless_their_class_is_named_nowhere(tmp_path, saver, script, unreached):
    """A method runs when its class is named and a line reads the method's name (another
    method's read counts only if that one runs); a class with a base, a keyword or a
    decorator may be reached by registration (a subclass hook, a registry), so its methods
    always run."""
    line = saver.splitlines().index("        return model.state_dict()") + 1
    files = {"helpers.py": saver, "train.py": script}
    assert _unreached(tmp_path, files, ("helpers.py", line)) is unreached


@pytest.mark.parametrize(
    "name,text,line,unreached",
    [
        pytest.param(
            "test_train.py",
            "def worker(model):\n    return model.state_dict()\n\n\n"
            "def test_spawned():\n    spawn(worker)\n",
            2,
            False,
            id="a-test-function-pytest-calls",
        ),
        pytest.param(
            "train_test.py",
            "class TestSave:\n    def test_save(self, model):\n        return model.state_dict()\n",
            3,
            False,
            id="a-test-class-pytest-builds",
        ),
        pytest.param(
            "helpers.py",
            "def worker(model):\n    return model.state_dict()\n\n\n"
            "def test_spawned():\n    spawn(worker)\n",
            2,
            True,
            id="not-a-test-file",
        ),
    ],
)
def test_what_pytest_collects_runs(tmp_path, name, text, line, unreached):
    """No line calls a test: pytest collects it from a test file, and what it calls runs."""
    files = {name: text, "train.py": "print(1)\n"}
    assert _unreached(tmp_path, files, (name, line)) is unreached
