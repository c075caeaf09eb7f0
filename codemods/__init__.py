"""FSDP1 -> FSDP2 codemods (never imports torch).

Entry points: :func:`codemods.cli.main` (``fsdp2-port migrate``) and
:class:`codemods.commands.migrate.MigrateCommand` (``python -m libcst.tool codemod``).
Importing this package imports nothing else.
"""
