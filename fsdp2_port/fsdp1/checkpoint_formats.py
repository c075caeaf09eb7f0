"""The checkpoint formats ``convert-checkpoint`` reads (``convert``'s docstring says what each
holds): importable without torch, so that ``fsdp2-port convert-checkpoint --help`` needs none."""

FORMATS = ("auto", "specforge", "full", "dcp", "sharded", "local")
