"""Running fixture cases: ``<case>.in.py`` (or a folder ``<case>.in/``: one run over several
files) migrates to ``<case>.out.py`` (``<case>.out/``) with the findings in ``<case>.findings``.

A rule's cases (``codemods/rules/<rule>/cases/``) run with only that rule, the codes it
``NEEDS`` and the import clean-up (F2P001) enabled, and snapshot only the rule's own codes. The
cases of ``tests/codemods/fixtures/`` (whole models) run every rule and snapshot everything.

A case's first lines may set options: ``# fixture: no-runtime-dependency``,
``# fixture: drop-fsdp1-branches``, ``# fixture: whole-program``,
``# fixture: target-torch 2.5``. ``FSDP2_PORT_REGENERATE=1`` rewrites the expected files
from the current output (then read the diff before committing it).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import fsdp2_port.codemods.rules as rules_package
from fsdp2_port.codemods import engine, registry
from fsdp2_port.codemods.findings import Finding
from fsdp2_port.codemods.options import Options
from fsdp2_port.codemods.rules.base import Fixer, Rule
from fsdp2_port.codemods.rules.imports import ImportsRule

FIXTURES = Path(__file__).parent / "fixtures"
RULES = Path(rules_package.__file__).parent
REGENERATE = os.environ.get("FSDP2_PORT_REGENERATE") == "1"


def cases() -> list[Path]:
    found = []
    for folder in (*RULES.glob("*/cases"), *FIXTURES.glob("*")):
        found += [*folder.glob("*.in.py"), *folder.glob("*.in")]
    return sorted(found)


def case_id(case: Path) -> str:
    folder = case.parent.parent if case.parent.name == "cases" else case.parent
    return f"{folder.name}/{case.name.split('.in', 1)[0]}"


def rule_of(case: Path) -> type[Rule] | type[Fixer] | None:
    """The rule whose folder holds ``case`` (None for a run-wide case)."""
    if case.parent.name != "cases":
        return None
    module = f"fsdp2_port.codemods.rules.{case.parent.parent.name}.rule"
    return next(rule for rule in registry.RULES if rule.__module__ == module)


def codes_for(case: Path) -> list[str]:
    rule = rule_of(case)
    if rule is None:
        return registry.select()
    return registry.select([*rule.CODES, *rule.NEEDS, ImportsRule.CODE])


def expected_paths(case: Path) -> tuple[Path, Path]:
    stem = case.name.split(".in", 1)[0]
    suffix = ".out.py" if case.suffix == ".py" else ".out"
    return case.with_name(stem + suffix), case.with_name(stem + ".findings")


def options_for(text: str) -> Options:
    if "# fixture: target-torch 2.5" in text:
        return Options.for_torch("2.5")
    if "# fixture: no-runtime-dependency" in text:
        return Options(runtime_dependency=False)
    if "# fixture: drop-fsdp1-branches" in text:
        return Options(drop_fsdp1_branches=True)
    if "# fixture: whole-program" in text:
        return Options(whole_program=True)
    return Options()


def run_case(
    case: Path, work: Path, every_rule: bool = False
) -> tuple[dict[str, str], list[Finding]]:
    """Migrate a copy of the case in ``work``: (relative path -> output text, findings), with
    the case's own rule (and what it needs), or with ``every_rule``."""
    work.mkdir(parents=True, exist_ok=True)
    target = work / case.name
    if case.is_dir():
        shutil.copytree(case, target)
    else:
        shutil.copyfile(case, target)
    files = sorted(str(p) for p in ([target] if target.is_file() else target.rglob("*.py")))
    first_text = Path(files[0]).read_text()
    results = list(
        engine.migrate_files(
            files,
            registry.select() if every_rule else codes_for(case),
            options_for(first_text),
            write=True,
        )
    )
    errors = [r.error for r in results if r.error]
    assert not errors, errors
    root = target if target.is_dir() else target.parent
    outputs = {str(Path(p).relative_to(root)): Path(p).read_text() for p in files}
    rule = None if every_rule else rule_of(case)
    findings = [f for r in results for f in r.findings if rule is None or f.code in rule.CODES]
    return outputs, [Finding(str(Path(f.path).relative_to(root)), *_fields(f)) for f in findings]


def _fields(f: Finding) -> tuple:
    return f.line, f.column, f.code, f.message, f.severity, f.action, f.marker_line


def findings_text(findings: list[Finding]) -> str:
    return "".join(f.as_text() + "\n" for f in findings)


def expected_outputs(case: Path) -> dict[str, str]:
    out, _ = expected_paths(case)
    if out.is_dir():
        return {str(p.relative_to(out)): p.read_text() for p in sorted(out.rglob("*.py"))}
    return {case.name: out.read_text()}


def regenerate(case: Path, outputs: dict[str, str], findings: list[Finding]) -> None:
    out, expected_findings = expected_paths(case)
    if case.is_dir():
        if out.exists():
            shutil.rmtree(out)
        for relative, text in outputs.items():
            (out / relative).parent.mkdir(parents=True, exist_ok=True)
            (out / relative).write_text(text)
    else:
        out.write_text(outputs[case.name])
    expected_findings.write_text(findings_text(findings))
