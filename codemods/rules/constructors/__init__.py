from codemods.rules.constructors.rule import ConstructorRule

__all__ = ["ConstructorRule"]
