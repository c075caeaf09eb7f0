"""One file, analysed once: its tree, names, models, and the helpers rules use to add sites.

``analyze`` parses with CPython's ``ast`` (exact positions, and an order of magnitude faster
than a concrete syntax tree with scope metadata), builds the names and the model ties once,
then lets each selected rule add its sites to the file's plan.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from fsdp2_port.codemods import fsdp1, imports, markers
from fsdp2_port.codemods.assumptions import BRIDGE, MODEL_WORDS, SETTINGS_WORDS
from fsdp2_port.codemods.names import Binding
from fsdp2_port.codemods.options import Options
from fsdp2_port.codemods.parsed import ParsedFile, Source
from fsdp2_port.codemods.plan import (
    FilePlan,
    Marking,
    NeededImport,
    Position,
    Requirement,
    Rewrite,
    Site,
    made,
)
from fsdp2_port.codemods.semantic.file_links import FileLinks
from fsdp2_port.codemods.semantic.type_tests import TypeTests
from fsdp2_port.codemods.semantic.values import Ties
from fsdp2_port.codemods.text import Edit


class FileAnalysis(ParsedFile):
    """The parsed file, its plan in the making, and everything rules ask about it."""

    def __init__(self, source: Source, options: Options) -> None:
        super().__init__(source, options.strict)
        self.options = options
        self.ignored = markers.ignored_lines(source.text)
        self.plan = FilePlan(source.path)
        #: (span, group) of code that runs only when a type check holds (see F2P005).
        self.guards: list[tuple[tuple[int, int], str]] = []
        #: (span, why, deleted) of FSDP1 branches that no FSDP2 model reaches (see F2P005):
        #: their sites become markers, or nothing when the branch is deleted.
        self.dead_branches: list[tuple[tuple[int, int], str, bool]] = []
        #: With ``--drop-fsdp1-branches``: a type test that is all of an ``if`` with no
        #: ``else``, its guard group and the edits deleting it (see F2P005 and ``_one_armed``).
        self.one_armed: list[tuple[Site, str, list[Edit]]] = []
        self.ties = Ties(self)
        self.type_tests = TypeTests(self)

    def finish(self) -> FilePlan:
        """After the rules: guarded FSDP1 sites join their type check's group, sites in FSDP1
        branches no FSDP2 model reaches become markers; exports for the run."""
        for test, group, removal in self.one_armed:
            self._one_armed(test, group, removal)
        self.plan.sites = [self._after_guards(site) for site in self.plan.sites]
        self.plan.fsdp2_models = tuple(
            call.lineno  # type: ignore[attr-defined]
            for call in self.names.by_type[ast.Call]
            if self.names.qualified(call.func) & BRIDGE.members  # type: ignore[attr-defined]
            or self.fsdp2_name(call.func) == "fully_shard"  # type: ignore[attr-defined]
        )
        imported = [self.names.through(b.qualified) for b in self.names.imports() if b.qualified]
        self.plan.fsdp1_or_port = any(
            fsdp1.canonical(q) or q.split(".")[0] == "fsdp2_port" for q in imported
        )
        self.plan.scaler_only = all(
            fsdp1.canonical(q) in (None, "ShardedGradScaler")
            and (not q.startswith("fsdp2_port.") or q == "fsdp2_port.GradScaler")
            for q in imported
        ) and all(
            q == "fsdp2_port.GradScaler"
            for node in self.names.by_type[ast.Attribute]
            for q in self.names.qualified(node)
            if q.startswith("fsdp2_port.")
        )
        links = FileLinks(self.ties)
        self.plan.exports = links.exports()
        self.plan.signatures = links.signatures()
        self.plan.passes = links.passes()
        self.plan.calls = links.calls()
        self.plan.sharded = links.sharded()
        self.plan.wraps = links.wraps()
        self.plan.escaping = links.escaping()
        self.plan.imported = imports.importing_scopes(self.names, self.lines)
        self.plan.assumptions = self.assumed.recorded()
        return self.plan

    def _one_armed(self, test: Site, group: str, removal: list[Edit]) -> None:
        """``if isinstance(x, FSDP): <FSDP1 code no rule rewrites>``, no ``else``: no FSDP2
        model ever enters it, so where its models migrate it is deleted rather than kept, with
        the FSDP1 code in it (one group: kept, each keeps its marker). Code the rules rewrite
        keeps the usual group: the test becomes ``FSDPModule`` with it."""
        spans = [span for span, g in self.guards if g == group]
        inside = [
            s
            for s in self.plan.sites
            if s is not test and any(a <= s.at.start and s.at.end <= b for a, b in spans)
        ]
        if not any(s.forms.rewrite is None and s.marking is not Marking.SILENT for s in inside):
            return
        self.guards = [(span, g) for span, g in self.guards if g != group]
        together = f"one-armed:{group}"  # deleted together, or all kept with their markers
        deleted = test.but(
            rewrite=Rewrite(
                removal,
                "FSDP1 type test and the FSDP1 code behind it deleted (--drop-fsdp1-branches): "
                "no FSDP2 model enters it",
                review=True,
            ),
            groups=(test.groups - {group}) | {together},
        )
        inside_ids = {id(s) for s in inside}
        self.plan.sites = [
            deleted
            if s is test
            else s.but(
                rewrite=Rewrite([], "deleted with the FSDP1 type test that guards it"),
                fallback=None,
                requirement=test.requirement,
                ties=test.reach.ties,
                deferred=test.reach.deferred,
                groups=frozenset({together}),
                holds=False,
            )
            if id(s) in inside_ids
            else s
            for s in self.plan.sites
        ]

    def _after_guards(self, site: Site) -> Site:
        if site.constructor is not None:
            return site
        at = site.at
        inside = [g for (start, end), g in self.guards if start <= at.start and at.end <= end]
        if inside:
            site = site.but(groups=site.groups | set(inside))
        for (start, end), why, deleted in self.dead_branches:
            if start <= at.start and at.end <= end:
                site = site.but(
                    rewrite=None,
                    fallback=None,
                    requirement="NEVER",
                    ties=frozenset(),
                    deferred=frozenset(),
                    groups=frozenset(),
                    message=f"{site.message}; {why}",
                    silent=True if deleted else None,
                )
        return site

    def is_ignored(self, node: ast.AST) -> bool:
        """Whether the line where ``node`` starts or ends ends in ``# fsdp2-port: ignore``."""
        if not self.ignored:
            return False
        return node.lineno in self.ignored or node.end_lineno in self.ignored  # type: ignore[attr-defined]

    def statement_start(self, statement: ast.stmt) -> int:
        """Offset of the first line of a statement (its first decorator, for a definition)."""
        first = statement
        decorators = getattr(statement, "decorator_list", None)
        if decorators:
            first = min(decorators, key=lambda d: (d.lineno, d.col_offset))
        return self.lines.line_start(self.lines.start(first))

    def marker_anchor(self, node: ast.AST) -> tuple[int, str]:
        """Where a marker about ``node`` goes: above its statement, at that line's indent."""
        anchor = self.statement_start(self.names.statement(node))
        return anchor, self.lines.indent_at(anchor)

    def add(
        self,
        code: str,
        node: ast.AST,
        keep_message: str,
        rewrite: Rewrite | None = None,
        requirement: Requirement = "NEVER",
        **details: Any,
    ) -> Site:
        """A site about ``node``; ``details`` are its other parts in the rules' words
        (``plan.made``: ties, groups, constructor, quiet, holds, fallback...)."""
        start, end = self.span(node)
        anchor, indent = self.marker_anchor(node)
        at = Position(
            self.path,
            self.lines.line_of(start),
            self.lines.column(start),
            start,
            end,
            anchor,
            indent,
        )
        site = made(
            Site(code, at, keep_message, requirement, index=len(self.plan.sites)),
            rewrite=rewrite,
            **details,
        )
        self.plan.sites.append(site)
        return site

    def add_tied(
        self,
        code: str,
        node: ast.AST,
        receiver: ast.AST,
        keep_message: str,
        rewrite: Rewrite | None,
        *,
        known: bool = True,
        unknown: str | None = None,
        either: Rewrite | None = None,
        speculate: bool = True,
        tied_requirement: Requirement = "MODELS",
        **details: Any,
    ) -> Site | None:
        """A site about the model ``receiver`` holds.

        - Known to hold only DDP models (``Ties.never_fsdp``, or a DDP type test guards
          it: ``TypeTests.guarded_other_wrapper``) or an object just built
          (``Ties.fresh``), with ``known``: a silent site (the latter once the run ties it to
          nothing, when it depends on calls into other files).
        - Tied to constructors (or to calls and parameters the run resolves): ``MODELS``.
        - Tied to none, with ``either`` (a form right whatever ``receiver`` holds): that form,
          whenever the run migrates a model (``ANY``).
        - Known to be FSDP1 without knowing which, or ``known=False``: follows the run
          (``RUN``), and holds it when kept, unless an FSDP1 type test guards it (no FSDP2
          model gets there while the test stays).
        - Otherwise None: the rule decides what an unknown receiver needs.

        ``tied_requirement``: the requirement when tied (``ALWAYS`` for a form right on any
        model). ``speculate=False``: a receiver only other files pass is any model when the
        run ties it to none, never nothing. ``details``: ``Site``'s other fields (``quiet``: the
        original is right under FSDP1, so it needs no marker when its models stay FSDP1).
        When all that is known is that ``receiver`` comes from calls into other files, the site
        waits for the run: tied to nothing, it takes ``either``, else becomes a marker with
        ``unknown`` (or nothing at all, without one).
        """
        ties, deferred = self.ties.of(receiver)
        fresh = known and self.ties.fresh(receiver)
        if known and (
            self.ties.never_fsdp(receiver)
            or self.type_tests.guarded_other_wrapper(receiver)
            or (not ties and not deferred and (fresh or self.ties.none_of(receiver)))
        ):
            # a DDP model, an object just built, or a value no model of the run reaches:
            # nothing to rewrite or mark
            return self.add(code, node, "", None, "NEVER", silent=True, holds=False)
        fsdp1 = self.type_tests.known_fsdp1(receiver)
        speculative = speculate and known and not ties and bool(deferred) and not fsdp1
        requirement: Requirement
        if ties or deferred:
            requirement = tied_requirement
        elif either is not None:
            rewrite, requirement = either, "ANY"
        elif known and not fsdp1:
            return None
        else:
            requirement = "RUN"
        behind_test = self.type_tests.unreached_by_fsdp2(receiver)
        settled = {
            "either": either,
            "behind_test": behind_test,
            "holds": not behind_test,
            "unknown": (unknown or "") if speculative else None,
        }
        return self.add(
            code,
            node,
            keep_message,
            rewrite,
            requirement,
            ties=ties,
            deferred=deferred,
            fresh=fresh,
            # with ``known=False`` the FSDP1 code is marked whatever the receiver holds, and a
            # form of it is taken with the run's models, whichever reach it
            opaque=self.ties.opaque(receiver)
            or (not known and (rewrite is not None or either is not None)),
            named=not known,
            **{**settled, **details},
        )

    def hold(self, code: str, node: ast.AST, message: str) -> Site:
        """FSDP1 code on a receiver the run cannot tie, with no form right for every model:
        kept, it keeps every constructor of the run on FSDP1, and says so."""
        return self.add(code, node, message, None, "RUN")

    def named_like_model(self, receiver: ast.AST) -> bool:
        """A receiver the run cannot tie, named like a model (``model``, ``self.policy``,
        ``actor_module``) and not like settings (``fsdp_config``): where names other objects
        share are read (``m.mixed_precision``, ``m.state_dict()``), only such a receiver is
        taken for a model. Never ``self`` itself, nor an imported name. Both words are
        assumptions: strict, any other receiver may be a model."""
        if isinstance(receiver, ast.Name) and receiver.id in ("self", "cls"):
            return False
        if self.names.qualified(receiver):
            return False
        last = receiver.attr if isinstance(receiver, ast.Attribute) else getattr(receiver, "id", "")
        last = str(last)
        lower = last.lower()
        if self.assumed.takes(
            SETTINGS_WORDS, last, receiver, member=any(w in lower for w in SETTINGS_WORDS)
        ):
            return False
        return self.assumed.takes(
            MODEL_WORDS, last, receiver, otherwise=True, member=any(w in lower for w in MODEL_WORDS)
        )

    # -- edits -------------------------------------------------------------------------------
    def replace(self, node: ast.AST, text: str) -> Edit:
        start, end = self.span(node)
        return Edit(start, end, text)

    def receiver_first(self, call: ast.Call, function: str, suffix: str = "") -> list[Edit]:
        """``m.f(args)`` -> ``function(m<suffix>, args)`` by edits around the receiver ``m``,
        whose own text other rewrites may still change (``m.module.f()``)."""
        func = call.func
        assert isinstance(func, ast.Attribute)
        receiver = func.value
        opening = self.text.index("(", self.lines.end(func))
        separator = ", " if call.args or call.keywords else ""
        if separator and self.text[opening + 1 : opening + 2] in ("\n", "\r"):
            separator = ","  # the arguments start on the next line: no trailing space
        return [
            Edit(self.lines.start(call), self.lines.start(receiver), f"{function}("),
            Edit(self.lines.end(receiver), opening + 1, suffix + separator),
        ]

    def around(self, node: ast.Attribute, before: str, after: str) -> list[Edit]:
        """``m.attr`` -> ``<before>m<after>`` by edits around the receiver ``m``."""
        return [
            Edit(self.lines.start(node), self.lines.start(node.value), before),
            Edit(self.lines.end(node.value), self.lines.end(node), after),
        ]

    def import_for(self, replaced: ast.AST, module: str, name: str | None) -> NeededImport:
        """The import a rewrite of ``replaced`` needs, placed next to what bound ``replaced``.

        The new line goes right after the statement that imports the FSDP1 name being
        replaced, in its block: a lazy import stays lazy, a guarded one stays guarded, set-up
        code above the imports stays above them. When no import binds it, after the module's
        leading imports.
        """
        head = replaced
        while isinstance(head, ast.Attribute):
            head = head.value
        statements = []
        if isinstance(head, ast.Name):
            statements = [
                b.statement
                for b in self.names.bindings_of(head)
                if b.kind == "import" and b.statement is not None
            ]
        if not statements:
            return self._after_leading_imports(module, name)
        first = min(statements, key=self.lines.start)
        if len(statements) == 1 or self._dominates(first, replaced):
            # bound wherever and whenever the name it replaces was (after the first of two)
            return self.import_after(first, module, name)
        return self._import_before(replaced, module, name)  # imported in sibling branches

    def _dominates(self, statement: ast.stmt, node: ast.AST) -> bool:
        """Whether ``statement`` runs before ``node`` on every path that reaches it: at module
        level, or earlier in a block that holds ``node``."""
        owner = self.names.parent.get(statement)
        if isinstance(owner, ast.Module):
            return True
        for ancestor in self.names.ancestors(node):
            if self.names.parent.get(ancestor) is owner:
                for block in ("body", "orelse", "finalbody", "handlers"):
                    part = getattr(owner, block, None)
                    if isinstance(part, list) and statement in part and ancestor in part:
                        return part.index(statement) < part.index(ancestor)
                return False
        return False

    def _import_before(self, node: ast.AST, module: str, name: str | None) -> NeededImport:
        """An import on its own line right before the statement that uses ``node`` (before
        the whole ``if`` for an ``elif`` test)."""
        statement = self.names.statement(node)
        parent = self.names.parent.get(statement)
        while isinstance(parent, ast.If) and parent.orelse == [statement]:
            if isinstance(statement, ast.If) and self.is_elif(statement):
                statement, parent = parent, self.names.parent.get(parent)
            else:
                break
        anchor = self.statement_start(statement)
        return NeededImport(module, name, anchor, self.lines.indent_at(anchor))

    def is_elif(self, statement: ast.If) -> bool:
        """An ``elif`` (not ``else:`` followed by a nested ``if``): it starts at its keyword."""
        start = self.lines.start(statement)
        return self.text[start : start + 4] == "elif"

    def import_after(
        self, statement: ast.stmt, module: str, name: str | None, asname: str | None = None
    ) -> NeededImport:
        """An import on the line after ``statement``, at its indentation: bound exactly where
        (and whenever) the name it replaces was bound."""
        return imports.after(self.lines, statement, module, name, asname)

    def module_level_import(self, module: str, name: str) -> NeededImport:
        """``from module import name`` among the module's leading imports."""
        return self._after_leading_imports(module, name)

    def module_import(self, module: str, used_at: ast.AST | None = None) -> NeededImport:
        """``import module`` after the module's leading imports; nothing where the code at
        ``used_at`` already sees the name bound (``torch`` imported lazily in a function)."""
        top = module.split(".", 1)[0]
        if used_at is not None and self.names.lookup(top, self.names.scope_of(used_at))[0]:
            anchor = self.statement_start(self.names.statement(used_at))
            return NeededImport(module, None, anchor, self.lines.indent_at(anchor))
        return self._after_leading_imports(module, None)

    def _after_leading_imports(self, module: str, name: str | None) -> NeededImport:
        """After the module's top-level imports that come before its first definition (so
        after any set-up code between imports, such as ``os.environ[...] = ...``), in the
        file's own order (``imports.place``): a library's import goes with the libraries,
        before the run's own modules, at its sorted place where that block is sorted."""
        leading = []
        for statement in self.tree.body:
            if isinstance(statement, (ast.Import, ast.ImportFrom)):
                leading.append(statement)
            elif isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                break
        if not leading:
            return NeededImport(module, name, 0, "")
        return imports.place(self.lines, leading, self.run_modules.tops, module, name)

    # -- bindings ------------------------------------------------------------------------------
    def sole_binding(self, node: ast.Name) -> Binding | None:
        """The single ``name = value`` binding of ``node`` in its own scope, if that is all."""
        bindings = self.names.bindings_of(node)
        if len(bindings) == 1 and bindings[0].kind == "assign" and bindings[0].value is not None:
            return bindings[0]
        return None

    def uses_of(self, binding: Binding) -> list[ast.Name]:
        """The loads of the name ``binding`` binds that resolve to it."""
        return [
            node
            for node in self.names.loads(binding.name)
            if any(b is binding for b in self.names.bindings_of(node))
        ]


_WORD = re.compile(r"\w+")
