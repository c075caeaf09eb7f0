"""FSDP1 -> FSDP2 codemods (never imports torch).

Entry points: :func:`fsdp2_port.codemods.cli.main` (``fsdp2-port migrate``) and
:class:`fsdp2_port.codemods.commands.migrate.MigrateCommand` (``python -m libcst.tool codemod``).
Importing this package imports nothing else.
"""
