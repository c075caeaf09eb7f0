"""``python -m libcst.tool codemod migrate.MigrateCommand PATH``: every rule, as one codemod.

The same rules, order, options and markers as ``fsdp2-port migrate``; findings become the
tool's warnings (``line:column: code [severity] message``, lines of the output). A module
without any FSDP1 marker text is returned untouched without running the rules.
"""

from __future__ import annotations

import argparse

import libcst as cst
from libcst.codemod import CodemodCommand, CodemodContext

from codemods import engine, fsdp1, registry
from codemods.options import Options


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

    def __init__(
        self,
        context: CodemodContext,
        select: str = "",
        ignore: str = "",
        target_torch: str = "2.6",
        no_runtime_dependency: bool = False,
    ) -> None:
        super().__init__(context)
        split = lambda codes: [c.strip().upper() for c in codes.split(",") if c.strip()]  # noqa: E731
        self.rules = registry.select(split(select), split(ignore))
        self.options = Options.for_torch(target_torch, runtime_dependency=not no_runtime_dependency)

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        if not fsdp1.might_need_migration(tree.code.encode("utf-8", "surrogateescape")):
            return tree
        context = CodemodContext(
            filename=self.context.filename, full_module_name=self.context.full_module_name
        )
        new_tree, findings = engine.run_rules(tree, self.rules, self.options, context)
        for finding in findings:
            self.warn(
                f"{finding.line}:{finding.column}: {finding.code} [{finding.severity}] "
                f"{finding.message}"
            )
        return new_tree
