"""``visibility.find``: which module-level names are their module's own, decided over the run.

Without ``--whole-program`` a name is its module's own in an entry script, or when private and
no other file mentions it; with it, any name no other file mentions, unless another file
star-imports a module of that name (it then has every public name).
"""

from __future__ import annotations

from pathlib import Path

from fsdp2_port.codemods import visibility


def _run(tmp_path: Path, files: dict[str, str], whole_program: bool):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    paths = [str(tmp_path / name) for name in files]
    found = visibility.find(paths, frozenset(), whole_program=whole_program)
    return {Path(path).name: seen for path, seen in found.items()}


FILES = {
    "lib.py": "MAP = {}\n_PRIVATE = {}\nSHARED = 1\n_SHARED = 2\n",
    "user.py": "from lib import SHARED, _SHARED\n",
}


def test_a_public_name_is_its_modules_own_only_in_a_whole_program(tmp_path: Path) -> None:
    seen = _run(tmp_path, FILES, whole_program=False)["lib.py"]
    assert {n: seen.own(n) for n in ("MAP", "_PRIVATE", "SHARED", "_SHARED")} == {
        "MAP": False,  # others outside the run may import it
        "_PRIVATE": True,
        "SHARED": False,
        "_SHARED": False,  # user.py names it
    }
    seen = _run(tmp_path, FILES, whole_program=True)["lib.py"]
    assert {n: seen.own(n) for n in ("MAP", "_PRIVATE", "SHARED", "_SHARED")} == {
        "MAP": True,
        "_PRIVATE": True,
        "SHARED": False,
        "_SHARED": False,
    }


def test_a_star_import_shares_every_name_of_its_module(tmp_path: Path) -> None:
    files = {**FILES, "user.py": "from lib import *\n"}
    seen = _run(tmp_path, files, whole_program=True)["lib.py"]
    assert not any(seen.own(n) for n in ("MAP", "SHARED", "_PRIVATE"))
    files = {**FILES, "user.py": "from .other import *\n"}
    assert _run(tmp_path, files, whole_program=True)["lib.py"].own("MAP")


def test_a_file_that_never_names_the_module_reads_none_of_its_names(tmp_path: Path) -> None:
    """Another module's function of the same name (verl's two ``get_sharding_strategy``) is
    not this module's read: ``other.py`` imports it from ``helpers``, never from ``lib``."""
    files = {**FILES, "other.py": "from helpers import MAP, _PRIVATE\n"}
    for whole_program in (False, True):
        seen = _run(tmp_path, files, whole_program=whole_program)["lib.py"]
        assert seen.own("_PRIVATE")
        assert seen.own("MAP") is whole_program
        assert not seen.own("_SHARED")  # user.py names lib


def test_a_relative_package_import_reads_every_package_init(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    files = {"pkg/__init__.py": "_MAP = {}\n", "pkg/mod.py": "from . import _MAP\n"}
    assert not _run(tmp_path, files, whole_program=False)["__init__.py"].own("_MAP")
    files["pkg/mod.py"] = "from .sibling import _MAP\n"
    assert _run(tmp_path, files, whole_program=False)["__init__.py"].own("_MAP")


def test_another_packages_module_of_the_same_name_is_not_this_one(tmp_path: Path) -> None:
    """cold-stone's ``fsdp.py`` beside scripts that import ``torch.distributed.fsdp``: those
    name torch's module, not this one; ``from .fsdp``, ``pkg.fsdp`` and ``import fsdp`` do."""
    (tmp_path / "pkg").mkdir()
    torch_only = "from torch.distributed.fsdp import ShardingStrategy\npolicy = 1\n"
    for other, own in [
        (torch_only, True),
        ("from .fsdp import policy\n", False),
        ("import pkg.fsdp\nprint(pkg.fsdp.policy)\n", False),
        ("import fsdp\nprint(fsdp.policy)\n", False),
    ]:
        files = {"pkg/fsdp.py": "policy = 1\n", "pkg/train.py": other}
        assert _run(tmp_path, files, whole_program=True)["fsdp.py"].own("policy") is own, other


def test_an_attribute_is_read_elsewhere_as_an_attribute_or_a_string(tmp_path: Path) -> None:
    """vlarl's ``self.fsdp_sharding_strategy`` beside a script's local of that name: a local
    elsewhere is no read of the attribute; ``x.name`` and ``getattr(x, "name")`` are."""
    lib = "class S:\n    def __init__(self):\n        self.strategy = 1\n"
    for other, own in [
        ("strategy = 2\nprint(strategy)\n", True),
        ("from lib import S\nprint(S().strategy)\n", False),
        ("from lib import S\nprint(getattr(S(), 'strategy'))\n", False),
        # a line that is a comment alone reads nothing (StableCascade's scripts); code is code
        ("    # S().strategy = 3\n", True),
        ("x = 1  # S().strategy\nprint(S().strategy)\n", False),
    ]:
        seen = _run(tmp_path, {"lib.py": lib, "train.py": other}, whole_program=True)["lib.py"]
        assert seen.own_attribute("strategy") is own, other
        assert seen.attributes_shared.get("strategy", 0) == (0 if own else 1), other
