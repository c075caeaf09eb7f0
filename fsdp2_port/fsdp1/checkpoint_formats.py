"""The checkpoint formats ``convert-checkpoint`` reads (``convert``'s docstring says what each
holds) and the error it refuses with: importable without torch, so that
``fsdp2-port convert-checkpoint --help`` needs none."""

FORMATS = ("auto", "specforge", "full", "dcp", "sharded", "local")


class ConversionError(ValueError):
    """The checkpoint cannot be converted as asked; the message says why."""
