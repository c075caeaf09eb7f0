"""``python -m libcst.tool codemod migrate.MigrateCommand PATH``: every rule, as one codemod.

The same rules, options and markers as ``fsdp2-port migrate``, with one difference: libcst's
tool hands over one file at a time, so each file is its own run (a model built in another file
is not followed; what depends on it is marked). Findings become the tool's warnings
(``line:column: code [severity] message``, input positions). A module without any FSDP1 text
is returned untouched without running the rules.
"""

from __future__ import annotations

import argparse

import libcst as cst
from libcst.codemod import CodemodCommand, CodemodContext

from fsdp2_port.codemods import engine, fsdp1, registry
from fsdp2_port.codemods.options import Options


class MigrateCommand(CodemodCommand):
    DESCRIPTION = (
        "FSDP1 -> FSDP2: rewrite what is safe, mark the rest with # TODO(fsdp2-port) comments."
    )

    @staticmethod
    def add_args(arg_parser: argparse.ArgumentParser) -> None:
        arg_parser.add_argument(
            "--select", default="", help="comma-separated rule codes to run (default: all)"
        )
        arg_parser.add_argument("--ignore", default="", help="comma-separated rule codes to skip")
        arg_parser.add_argument(
            "--target-torch", default="2.6", help="torch release the output targets (>= 2.4)"
        )
        arg_parser.add_argument(
            "--no-runtime-dependency", action="store_true", help="emit torch-only code"
        )
        arg_parser.add_argument(
            "--drop-fsdp1-branches",
            action="store_true",
            help="delete the FSDP1 branch of an FSDP1/FSDP2 type dispatch",
        )
        arg_parser.add_argument(
            "--strict", action="store_true", help="take no assumption (a decision on a name)"
        )

    def __init__(
        self,
        context: CodemodContext,
        select: str = "",
        ignore: str = "",
        target_torch: str = "2.6",
        no_runtime_dependency: bool = False,
        drop_fsdp1_branches: bool = False,
        strict: bool = False,
    ) -> None:
        super().__init__(context)

        def split(codes: str) -> list[str]:
            return [c.strip().upper() for c in codes.split(",") if c.strip()]

        self.codes = registry.select(split(select), split(ignore))
        self.options = Options.for_torch(
            target_torch,
            runtime_dependency=not no_runtime_dependency,
            drop_fsdp1_branches=drop_fsdp1_branches,
            strict=strict,
        )

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        code = tree.code
        if not fsdp1.might_need_migration(code.encode("utf-8", "surrogateescape")):
            return tree
        path = self.context.filename or "<module>"
        name, package = engine.module_name(path) if self.context.filename else ("", False)
        new, findings = engine.migrate_text(code, path, self.codes, self.options, name, package)
        for f in findings:
            self.warn(f"{f.line}:{f.column}: {f.code} [{f.severity}] {f.message}")
        return tree if new == code else cst.parse_module(new)
