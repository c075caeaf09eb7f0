"""Assumptions: every decision on a name goes through ``fsdp2_port.codemods.assumed`` (read from the
codemod's sources), is counted and listed by the report, and ``--strict`` takes none, holding or
marking instead."""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import shutil
import textwrap
from pathlib import Path

import pytest
from fixtures_support import case_id, cases, codes_for, options_for

from fsdp2_port.codemods import assumptions, cli, engine
from fsdp2_port.codemods.assumed import Assumed, Assumption

ROOT = Path(__file__).resolve().parents[2]
CODEMODS = ROOT / "fsdp2_port" / "codemods"
DOC = ROOT / "docs" / "migrate.md"
#: Modules that may name an assumption's entry outside ``assumed``'s two calls: the registry
#: defines them; the audit is an independent reading of outputs, in tests, that decides nothing
#: of a run.
EXEMPT = {"codemods/assumptions.py", "codemods/audit.py", "codemods/audit_models.py"}
#: The registry's entries of an assumption kind, and its guesses, by their Python names.
ENTRIES = {
    name: value
    for name, value in vars(assumptions).items()
    if isinstance(value, (assumptions.NameList, assumptions.NameTable, assumptions.NameGuess))
    and value.kind in assumptions.ASSUMPTIONS
}


def _calls_of(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> str | None:
    """``takes`` or ``either_way`` when ``node`` is in the arguments of such a call."""
    child, parent = node, parents.get(node)
    while parent is not None:
        if isinstance(parent, ast.Call) and child is not parent.func:
            func = parent.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("takes", "either_way"):
                return name
        child, parent = parent, parents.get(parent)
    return None


def uses(package: Path) -> list[tuple[str, int, str, str | None]]:
    """``(path, line, entry, "takes" | "either_way" | None)`` for each read of an assumption's
    entry in ``package`` (``X`` imported from the registry, or ``assumptions.X``), and
    ``(path, line, "camel", ...)`` for each call of the CamelCase guess outside a function that
    records it."""
    found = []
    for path in sorted(package.rglob("*.py")):
        relative = str(path.relative_to(package.parent))
        if relative in EXEMPT or "cases" in path.parts:
            continue
        tree = ast.parse(path.read_text())
        parents = {c: p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
        for node in ast.walk(tree):
            name = None
            if isinstance(node, ast.Name) and node.id in ENTRIES:
                name = node.id
            elif isinstance(node, ast.Attribute) and node.attr in ENTRIES:
                name = node.attr
            if name is not None:
                found.append((relative, node.lineno, name, _calls_of(node, parents)))
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            inside = list(ast.walk(function))
            guesses = [n for n in inside if isinstance(n, ast.Call) and _named(n, "camel")]
            recorded = any(isinstance(n, ast.Name) and n.id == "CAMEL_CASE" for n in inside)
            found += [(relative, g.lineno, "camel", None) for g in guesses if not recorded]
    return sorted(found, key=lambda use: use[:3])


def _named(call: ast.Call, name: str) -> bool:
    func = call.func
    return (func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")) == name


def test_every_decision_on_a_name_goes_through_assumed() -> None:
    found = uses(CODEMODS)
    bypassing = [u for u in found if u[3] is None]
    assert bypassing == [], bypassing
    used = {entry for _, _, entry, _ in found}
    # every entry of an assumption kind is read somewhere (the audit's own aside)
    assert used == set(ENTRIES) - {"AUDIT_RETURNS_SELF"}, set(ENTRIES) ^ used


def test_the_reading_finds_a_test_that_bypasses_assumed(tmp_path: Path) -> None:
    package = tmp_path / "codemods"
    package.mkdir()
    (package / "m.py").write_text(
        textwrap.dedent(
            """
            from fsdp2_port.codemods import assumptions, syntax
            from fsdp2_port.codemods.assumptions import CAMEL_CASE, RETURNS_SELF, SHAPE_ATTRIBUTES

            def recorded(assumed, node):
                return assumed.takes(RETURNS_SELF, node.attr, node)

            def looked_for(node):
                return either_way(SHAPE_ATTRIBUTES, node.attr)

            def bypass(node):
                return node.attr in RETURNS_SELF or node.attr in assumptions.MODEL_WORDS

            def guessed(assumed, name, node):
                return assumed.takes(CAMEL_CASE, name, node, member=syntax.camel(name))

            def guessed_unrecorded(name):
                return syntax.camel(name)
            """
        )
    )
    assert uses(package) == [
        ("codemods/m.py", 6, "RETURNS_SELF", "takes"),
        ("codemods/m.py", 9, "SHAPE_ATTRIBUTES", "either_way"),
        ("codemods/m.py", 12, "MODEL_WORDS", None),
        ("codemods/m.py", 12, "RETURNS_SELF", None),
        ("codemods/m.py", 15, "CAMEL_CASE", "takes"),
        ("codemods/m.py", 18, "camel", None),
    ]


def test_the_docs_list_every_kind_and_whether_it_is_counted() -> None:
    """The table of docs/migrate.md: each kind with the registry's words, counted exactly when
    some use of one of its entries can record it (``takes``), not when all go ``either_way``."""
    recorded = {ENTRIES[e].kind for _, _, e, how in uses(CODEMODS) if how == "takes"}
    section = DOC.read_text().split("## Assumptions and `--strict`", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([a-z-]+)` \| (.+?) \| (yes|no) \|$", section, re.MULTILINE)
    assert [(kind, why) for kind, why, _ in rows] == list(assumptions.ASSUMPTIONS.items())
    assert {kind for kind, _, counted in rows if counted == "yes"} == recorded


def test_an_assumption_is_recorded_only_off_the_conservative_answer() -> None:
    entry = assumptions.RETURNS_SELF
    at = ast.parse("x.to(1)\nx.half()").body
    assumed = Assumed("f.py")
    assert assumed.takes(entry, "to", at[0]) is True  # a member: off ``otherwise=False``
    assert assumed.takes(entry, "to", at[0]) is True  # the same again: recorded once
    assert assumed.takes(entry, "half", at[1]) is False  # the conservative answer: not counted
    assert assumed.takes(entry, "half", at[1], otherwise=True) is False  # off ``True``
    assert assumed.recorded() == (
        Assumption("f.py", 1, "returns-self", "returns-self", "to"),
        Assumption("f.py", 2, "returns-self", "returns-self", "half"),
    )
    strict = Assumed("f.py", strict=True)
    assert strict.takes(entry, "to", at[0]) is False
    assert strict.takes(entry, "half", at[1], otherwise=True) is True
    assert strict.recorded() == ()


#: A script with three decisions on names (each derived below) and one on a fact.
SCRIPT = """\
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.nn.parallel import DistributedDataParallel as DDP


def build(net):
    model = FSDP(net)
    torch.save(model.state_dict(), "model.pt")
    return model


def save(train_state):
    torch.save(train_state.state_dict(), "state.pt")


def sync(net, batch):
    ddp = DDP(net).to("cuda")
    with ddp.no_sync():
        ddp(batch).sum().backward()


def clean(name):
    return name.replace("_fsdp_wrapped_module.", "")
"""


def _run(tmp_path: Path, capsys, *flags: str) -> tuple[list[dict], str, str]:
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    assert cli.main([str(path), "--format", "json", "--write", *flags]) == 0
    out, err = capsys.readouterr()
    return json.loads(out), path.read_text(), err


def test_the_report_counts_and_lists_the_assumptions_taken(tmp_path: Path, capsys) -> None:
    records, text, err = _run(tmp_path, capsys, "--show-assumptions")
    path = str(tmp_path / "train.py")
    taken = [r for r in records if "assumption" in r]
    assert taken == [
        # ``train_state`` is untied (a parameter no call passes): the word "state" takes it for
        # settings, so its state_dict() call is left alone
        {
            "path": path,
            "line": 13,
            "assumption": "settings-name",
            "list": "settings-words",
            "name": "train_state",
        },
        # ``DDP(net)`` is DDP by the registry's facts (no assumption); ``.to("cuda")`` is taken
        # to return it, so ``ddp`` is never FSDP and its no_sync() is nothing
        {
            "path": path,
            "line": 17,
            "assumption": "returns-self",
            "list": "returns-self",
            "name": "to",
        },
        # ``replace`` is taken for a string's method: removing FSDP1's prefix from a name is a
        # no-op on FSDP2 names, so the FSDP1 name in the string is not marked
        {
            "path": path,
            "line": 23,
            "assumption": "string-method",
            "list": "string-edit-methods",
            "name": "replace",
        },
    ]
    assert "train_state.state_dict()" in text and "ddp.no_sync()" in text
    assert "TODO(fsdp2-port)" not in text
    assert f"{path}:13: assumption settings-name (settings-words): train_state\n" in err
    assert err.endswith(
        "fsdp2-port migrate: 3 assumptions taken (returns-self 1, settings-name 1, "
        "string-method 1); --strict takes none\n"
    )


def test_strict_takes_none_and_holds_or_marks_instead(tmp_path: Path, capsys) -> None:
    records, text, err = _run(tmp_path, capsys, "--strict")
    assert [r for r in records if "assumption" in r] == []
    assert "assumption" not in err
    # an untied receiver may be a model whatever its name: the form right on any object
    assert "torch.save(fsdp2_port.module_state_dict(train_state), " in text
    # ``ddp`` may be FSDP: the no_sync form right on FSDP1, FSDP2 and DDP
    assert "with fsdp2_port.no_sync(ddp):" in text
    # the FSDP1 name in a string is marked, at its line
    lines = text.splitlines()
    at = lines.index('    return name.replace("_fsdp_wrapped_module.", "")')
    assert lines[at - 1].startswith("    # TODO(fsdp2-port): F2P010 an FSDP1 name in a string")
    assert [r["code"] for r in records if r.get("line") in (13, 18, 23)] == [
        "F2P008",
        "F2P007",
        "F2P010",
    ]


@pytest.mark.parametrize("case", cases(), ids=case_id)
def test_strict_changes_only_cases_that_take_assumptions(case: Path, tmp_path: Path) -> None:
    """Every case: without assumptions strict gives the same output; with some, strict takes
    none; neither fails."""
    outputs: list[list[str]] = []
    counts: list[int] = []
    for strict in (False, True):
        work = tmp_path / str(strict)
        work.mkdir()
        target = work / case.name
        if case.is_dir():
            shutil.copytree(case, target)
        else:
            target.write_bytes(case.read_bytes())
        files = sorted(str(p) for p in ([target] if target.is_file() else target.rglob("*.py")))
        options = dataclasses.replace(options_for(Path(files[0]).read_text()), strict=strict)
        results = list(engine.migrate_files(files, codes_for(case), options, write=True))
        assert [r.error for r in results if r.error] == []
        outputs.append([Path(p).read_text() for p in files])
        counts.append(sum(len(r.assumptions) for r in results))
    assert counts[1] == 0
    if counts[0] == 0:
        assert outputs[1] == outputs[0]


def test_the_libcst_command_takes_strict_too(tmp_path: Path) -> None:
    import libcst as cst
    from libcst.codemod import CodemodContext

    from fsdp2_port.codemods.commands.migrate import MigrateCommand

    path = str(tmp_path / "train.py")
    written = [
        MigrateCommand(CodemodContext(filename=path), strict=strict)
        .transform_module(cst.parse_module(SCRIPT))
        .code
        for strict in (False, True)
    ]
    either = "fsdp2_port.module_state_dict(train_state)"
    assert either not in written[0] and either in written[1]
