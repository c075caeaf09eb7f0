from fsdp2_port.codemods.rules.leftovers.rule import CONFIGURATION, LeftoversRule

__all__ = ["CONFIGURATION", "LeftoversRule"]
