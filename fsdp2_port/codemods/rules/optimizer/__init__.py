from fsdp2_port.codemods.rules.optimizer.rule import OptimizerRule

__all__ = ["OptimizerRule"]
