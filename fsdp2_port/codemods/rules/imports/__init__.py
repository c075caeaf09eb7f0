from fsdp2_port.codemods.rules.imports.rule import ImportsRule

__all__ = ["ImportsRule"]
