from fsdp2_port.codemods.rules.internals.rule import InternalsRule

__all__ = ["InternalsRule"]
