from fsdp2_port.codemods.rules.constructors.rule import ConstructorRule

__all__ = ["ConstructorRule"]
