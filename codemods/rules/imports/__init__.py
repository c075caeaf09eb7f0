from codemods.rules.imports.rule import ImportsRule

__all__ = ["ImportsRule"]
