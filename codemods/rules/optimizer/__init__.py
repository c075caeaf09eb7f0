from codemods.rules.optimizer.rule import OptimizerRule

__all__ = ["OptimizerRule"]
