"""F2P012 on its own: which FSDP1 value bindings the tidy stage removes once a rewrite deleted
their reads (here: each line ending in ``# read`` is deleted, as a rewrite would)."""

from __future__ import annotations

import re

import pytest

from fsdp2_port.codemods.apply import Applied
from fsdp2_port.codemods.rules.dead_values import DeadValuesRule
from fsdp2_port.codemods.text import Edit, LineIndex, apply_tracked
from fsdp2_port.codemods.tidy import tidy
from fsdp2_port.codemods.visibility import Visibility

HEAD = "import torch\nfrom torch.distributed.fsdp import CPUOffload, ShardingStrategy\n"
#: A local read only by a line a rewrite deletes.
READ_ONCE = "def f(use):\n    off = CPUOffload(offload_params=True)\n    use(off)  # read\n"


def migrated(original: str, entry_script: bool = False) -> tuple[str, list[str]]:
    """The tidy stage's text and F2P012 messages after the ``# read`` lines are deleted (in
    an entry script of the run, with ``entry_script``)."""
    lines = LineIndex(original)
    edits = [
        Edit(lines.starts[i], lines.starts[i + 1], "")
        for i, line in enumerate(lines.lines)
        if line.rstrip().endswith("# read")
    ]
    text, starts = apply_tracked(original, edits)
    applied = Applied(text, edits, starts, [], {})
    seen = Visibility(entry_script=entry_script)
    final, findings = tidy(original, applied, "m.py", seen=seen)
    return final, [f.message for f in findings if f.code == DeadValuesRule.CODE]


def test_a_local_whose_reads_were_rewritten_goes_with_its_import() -> None:
    final, messages = migrated(HEAD + READ_ONCE + "    return 1\n")
    assert messages == ["FSDP1 value CPUOffload bound to off, no longer read, removed"]
    assert "off =" not in final and "CPUOffload" not in final


@pytest.mark.parametrize(
    "body",
    [
        "    del use\n",  # del anywhere in the function
        "    def g():\n        nonlocal use\n",  # nonlocal in a nested function
        "    return locals()\n",
        "    off = None\n",  # bound twice
    ],
    ids=["del", "nonlocal", "locals", "rebound"],
)
def test_a_local_in_a_function_the_names_cannot_see_through_stays(body: str) -> None:
    assert migrated(HEAD + READ_ONCE + body)[1] == []


@pytest.mark.parametrize(
    "statement",
    [
        "off = CPUOffload(offload_params=flag())",  # a call: side effects
        "off = CPUOffload(*flags)",  # unpacking
        "off = CPUOffload(\n        offload_params=True,\n    )  # fsdp2-port: ignore",
        "off = torch.device('cpu')",  # not FSDP1
        "off = CPUOffload(); y = 1",  # shares its line
    ],
    ids=["call", "star", "ignored-last-line", "not-fsdp1", "semicolon"],
)
def test_a_value_removing_which_could_change_something_stays(statement: str) -> None:
    original = HEAD + f"def f(use):\n    {statement}\n    use(off)  # read\n    return 1\n"
    assert migrated(original)[1] == []


def test_module_level_names_go_only_when_no_other_module_can_import_them() -> None:
    original = HEAD + "PUBLIC = ShardingStrategy.FULL_SHARD\n_PRIVATE = ShardingStrategy.NO_SHARD\n"
    original += "def f(use):\n    use(PUBLIC, _PRIVATE)  # read\n    return 1\n"
    assert migrated(original)[1] == [
        "FSDP1 value ShardingStrategy.NO_SHARD bound to _PRIVATE, no longer read, removed"
    ]
    script = original + 'if __name__ == "__main__":\n    f(print)\n'
    assert len(migrated(script, entry_script=True)[1]) == 2
    assert len(migrated(script)[1]) == 1  # a script another module of the run imports


def test_class_bodies_and_bindings_unread_before_stay() -> None:
    original = HEAD + "class C:\n    off = CPUOffload()\n    print(off)  # read\n    x = 1\n"
    original += "def f():\n    unread = CPUOffload()\n    return 1\n"
    assert migrated(original)[1] == []


def test_a_second_run_removes_nothing_more() -> None:
    once, _ = migrated(HEAD + READ_ONCE + "    return 1\n")
    assert re.sub(r"\s", "", once) == "importtorchdeff(use):return1"
    assert migrated(once) == (once, [])


def test_vars_of_an_object_does_not_hide_the_locals() -> None:
    """``vars(obj)`` is the object's ``__dict__``; only ``vars()`` reads the function's names."""
    messages = migrated(HEAD + READ_ONCE + "    return vars(use)\n")[1]
    assert messages == ["FSDP1 value CPUOffload bound to off, no longer read, removed"]
    assert migrated(HEAD + READ_ONCE + "    return vars()\n")[1] == []
