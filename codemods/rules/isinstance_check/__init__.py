from codemods.rules.isinstance_check.rule import IsinstanceRule

__all__ = ["IsinstanceRule"]
