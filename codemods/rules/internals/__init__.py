from codemods.rules.internals.rule import InternalsRule

__all__ = ["InternalsRule"]
