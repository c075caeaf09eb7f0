from fsdp2_port.codemods.rules.grad_reduce.rule import GradReduceRule

__all__ = ["GradReduceRule"]
