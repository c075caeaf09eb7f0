"""What a run of ``fsdp2-port migrate`` did, counted: the summary lines on stderr and the
``{"summary": ...}`` record of ``--format json``/``jsonl``.

Besides files, findings and errors it counts the FSDP1 constructors rewritten, by the form
they took (plain ``fully_shard`` code or ``fully_shard_like_fsdp1``), and the changed files
whose new text imports ``fsdp2_port`` at run time, with the names it imports.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from fsdp2_port.codemods.findings import Finding
from fsdp2_port.codemods.rules.constructors.rule import RUNTIME

PLAIN = "fully_shard"

#: A constructor's rewrite (F2P002/F2P003), as the constructors rule words it: ``FSDP(...) ->
#: fully_shard(...)``, ``FSDP(..., auto_wrap_policy=<policy>) -> fully_shard on each ...``,
#: ``functools.partial(FSDP, ...) -> functools.partial(fully_shard_like_fsdp1, ...)``.
_CONSTRUCTOR = re.compile(
    r"(?:functools\.partial\()?FSDP[(,].*? -> (?:functools\.partial\()?(?P<form>\w+)"
)


def constructor_form(finding: Finding) -> str | None:
    """``fully_shard`` or ``fully_shard_like_fsdp1`` for the rewrite of an FSDP1 constructor
    (or ``functools.partial(FSDP, ...)`` factory); None for any other finding."""
    if finding.code not in ("F2P002", "F2P003") or finding.action != "rewritten":
        return None
    found = _CONSTRUCTOR.match(finding.message)
    if found is None or found["form"] not in (PLAIN, RUNTIME):
        return None
    return found["form"]


def runtime_names(text: str) -> tuple[str, ...]:
    """The ``fsdp2_port`` names ``text`` imports outside ``if TYPE_CHECKING:``, sorted:
    ``no_sync`` for ``from fsdp2_port import no_sync`` or ``fsdp2_port.no_sync`` after ``import
    fsdp2_port``, ``compat.BF16Optimizer`` for a submodule's, the module's own name where
    nothing of it is read. Empty when it imports none (or does not parse)."""
    if "fsdp2_port" not in text:
        return ()
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return ()
    names: set[str] = set()
    bound: dict[str, str] = {}  # name in the module -> the fsdp2_port module it binds
    nodes = list(_run_time_nodes(tree))
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.level == 0 and _ours(node.module or ""):
            prefix = _relative(node.module or "")
            names.update(prefix + alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if _ours(alias.name):
                    module = alias.name if alias.asname else alias.name.split(".")[0]
                    bound[alias.asname or module] = module
    read = {
        _relative(bound[node.value.id]) + node.attr
        for node in nodes
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id in bound
    }
    unread = {module for name, module in bound.items() if not _reads(read, module)}
    return tuple(sorted(names | read | unread))


def _ours(module: str) -> bool:
    return module == "fsdp2_port" or module.startswith("fsdp2_port.")


def _relative(module: str) -> str:
    """``fsdp2_port`` -> ``""``, ``fsdp2_port.compat`` -> ``"compat."``."""
    return module[len("fsdp2_port.") :] + "." if "." in module else ""


def _reads(read: set[str], module: str) -> bool:
    prefix = _relative(module)
    return any(name.startswith(prefix) for name in read)


def _run_time_nodes(node: ast.AST) -> Iterator[ast.AST]:
    """Every node under ``node`` but the bodies of ``if TYPE_CHECKING:`` (their ``else:``
    runs)."""
    for child in ast.iter_child_nodes(node):
        yield child
        if isinstance(child, ast.If) and _type_checking(child.test):
            for branch in child.orelse:
                yield branch
                yield from _run_time_nodes(branch)
        else:
            yield from _run_time_nodes(child)


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def count(n: int, noun: str) -> str:
    """``1 file``, ``2 files``, ``0 errors``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


@dataclass
class Summary:
    """The counts of one run, added up file by file (``add``)."""

    write: bool
    files: int = 0
    parsed: int = 0
    changed: int = 0
    findings: int = 0
    review: int = 0
    errors: int = 0
    constructors: dict[str, int] = field(default_factory=lambda: {PLAIN: 0, RUNTIME: 0})
    #: changed file -> the fsdp2_port names its new text imports at run time (``runtime_names``)
    runtime: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def add(
        self,
        findings: list[Finding],
        *,
        parsed: bool,
        changed: bool,
        path: str = "",
        runtime: tuple[str, ...] = (),
    ) -> None:
        """One file's result; its constructors and ``runtime`` count only where ``changed``
        (a rewrite that is not written migrates nothing)."""
        self.parsed += parsed
        self.changed += changed
        self.findings += len(findings)
        self.review += sum(f.severity == "review" for f in findings)
        if not changed:
            return
        for form in filter(None, map(constructor_form, findings)):
            self.constructors[form] += 1
        if runtime:
            self.runtime[path] = runtime

    def lines(self) -> list[str]:
        """The summary on stderr: the counts, then (where a constructor is rewritten or a file
        imports fsdp2_port) what the output is built of."""
        verb = "changed" if self.write else "would change"
        counts = (
            f"{count(self.files, 'file')} scanned, {self.parsed} parsed, {self.changed} {verb}, "
            f"{count(self.findings, 'finding')} ({self.review} to review), "
            f"{count(self.errors, 'error')}"
        )
        if not (sum(self.constructors.values()) or self.runtime):
            return [counts]
        return [counts, f"{self._constructors()}; {self._runtime()}"]

    def _constructors(self) -> str:
        plain, bridged = self.constructors[PLAIN], self.constructors[RUNTIME]
        verb = "migrated" if self.write else "to migrate"
        return (
            f"{count(plain + bridged, 'constructor')} {verb} "
            f"({plain} plain {PLAIN}, {bridged} {RUNTIME})"
        )

    def _runtime(self) -> str:
        n = len(self.runtime)
        verb = ("imports" if n < 2 else "import") if self.write else "would import"
        if not n:
            return f"no file {verb} fsdp2_port at run time"
        names = sorted({name for each in self.runtime.values() for name in each})
        return f"{count(n, 'file')} {verb} fsdp2_port at run time: {', '.join(names)}"

    def as_dict(self) -> dict[str, object]:
        """The ``{"summary": ...}`` record, the last of ``--format json``/``jsonl``."""
        return {
            "summary": {
                "files": self.files,
                "parsed": self.parsed,
                "changed": self.changed,
                "written": self.write,
                "findings": self.findings,
                "review": self.review,
                "errors": self.errors,
                "constructors": dict(self.constructors),
                "fsdp2_port_at_run_time": {p: list(n) for p, n in self.runtime.items()},
            }
        }
