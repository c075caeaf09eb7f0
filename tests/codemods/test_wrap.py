"""Lines the migration writes, at the file's line length (``codemods.wrap``): the limit from
the project's configuration or the file's own lines, black's splits, and nothing that would
change what the code means."""

import ast
import textwrap

import pytest

from fsdp2_port.codemods import wrap
from fsdp2_port.codemods.text import apply


def _wrapped(original: str, text: str, limit: int) -> str:
    return apply(text, wrap.edits(original, text, limit))


@pytest.mark.parametrize(
    "name,content,limit",
    [
        ("pyproject.toml", "[tool.ruff]\nline-length = 120\n", 120),
        ("pyproject.toml", "[tool.black]\nline-length = 79\n", 79),
        ("ruff.toml", "line-length = 99\n", 99),
        ("setup.cfg", "[flake8]\nmax-line-length = 110\n", 110),
        (".flake8", "[flake8]\nmax-line-length = 95\n", 95),
        ("pyproject.toml", "[tool.other]\nx = 1\n", 88),  # nothing set: black's default
        ("pyproject.toml", "not toml [", 88),  # unreadable: as if absent
        (
            "pyproject.toml",
            '[tool.ruff.lint]\nline-length = 7\n[tool."ruff"]\nline-length = 101\n',
            101,
        ),
    ],
)
def test_the_limit_is_the_projects(tmp_path, name, content, limit):
    (tmp_path / ".git").mkdir()
    (tmp_path / name).write_text(content)
    (tmp_path / "pkg").mkdir()
    assert wrap.line_length(str(tmp_path / "pkg" / "train.py"), "x = 1\n") == limit


def test_without_a_setting_the_file_keeps_its_own_longest_line(tmp_path):
    (tmp_path / ".git").mkdir()
    long = "x = " + "1 + " * 30 + "1\n"  # 126 characters
    assert wrap.line_length(str(tmp_path / "a.py"), long) == len(long) - 1


def test_a_long_call_is_split_one_argument_per_line():
    original = "model = FSDP(model)\n"
    text = (
        "model = fully_shard(model, mesh=mesh, reshard_after_forward=False, "
        "mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32))\n"
    )
    assert _wrapped(original, text, 88) == textwrap.dedent(
        """\
        model = fully_shard(
            model,
            mesh=mesh,
            reshard_after_forward=False,
            mp_policy=MixedPrecisionPolicy(
                param_dtype=torch.bfloat16,
                reduce_dtype=torch.float32,
            ),
        )
        """
    )


def test_a_long_condition_goes_in_parentheses_split_before_its_operators():
    text = textwrap.dedent(
        """\
        for submodule in model.modules():
            if submodule is not model and submodule not in ignored_modules and isinstance(m, Block):
                pass
        """
    )
    out = _wrapped("", text, 88)
    assert out.splitlines()[1:6] == [
        "    if (",
        "        submodule is not model",
        "        and submodule not in ignored_modules",
        "        and isinstance(m, Block)",
        "    ):",
    ]


def test_lines_the_input_has_and_markers_stay_as_they_are():
    long_call = "value = function(argument_one, argument_two, argument_three, argument_four_x)\n"
    marker = "# TODO(fsdp2-port): F2P008 " + "word " * 30 + "\n"
    assert _wrapped(long_call, long_call + marker, 60) == long_call + marker


def test_a_written_comment_is_wrapped_at_words():
    note = (
        "    # limit_all_gathers: dropped; FSDP2 always keeps at most two all-gathers in flight\n"
    )
    out = _wrapped("", "def f():\n" + note + "    pass\n", 60)
    assert out.splitlines()[1:3] == [
        "    # limit_all_gathers: dropped; FSDP2 always keeps at most",
        "    # two all-gathers in flight",
    ]


@pytest.mark.parametrize(
    "text",
    [
        # a line of a string: splitting it would change the string
        'DOC = """\nvalue = function(argument_one, argument_two, argument_three, arg)\n"""\n',
        # after a backslash the split would need one too
        "total = 1 + \\\n    function(argument_one, argument_two, argument_three, argument_four)\n",
    ],
)
def test_nothing_that_would_change_the_code_is_split(text):
    out = _wrapped("", text, 60)
    assert out == text


def test_every_split_parses_to_the_same_tree_and_a_second_pass_changes_nothing():
    text = (
        "x = {k: v.detach().cpu() for k, v in fsdp2_port.module_state_dict(model).items()}\n"
        "policy = functools.partial(lambda m, recurse, n: recurse or isinstance(m, Block), a=1)\n"
        "y = f(g(h(aaaaaaaaaaaaaaaaaaaa, bbbbbbbbbbbbbbbbbbbbbbbbb), cccccccccccccccccccccc), d)\n"
    )
    once = _wrapped("", text, 60)
    assert ast.dump(ast.parse(once)) == ast.dump(ast.parse(text))
    assert _wrapped(text, once, 60) == once
    assert max(len(line) for line in once.splitlines()[-8:]) <= 60


def test_a_value_too_long_for_its_head_goes_in_parentheses():
    text = (
        "        state = fsdp2_port.module_state_dict(fsdp2_port.unwrapped(model)) "
        "if hasattr(model, 'module') else fsdp2_port.module_state_dict(model)\n"
    )
    out = _wrapped("", "if True:\n    if True:\n" + text, 88).splitlines()[2:]
    assert out[0] == "        state = ("
    assert out[-1] == "        )"
    assert max(len(line) for line in out) <= 88
