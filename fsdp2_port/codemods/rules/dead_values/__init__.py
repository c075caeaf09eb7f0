from fsdp2_port.codemods.rules.dead_values.rule import DeadValuesRule

__all__ = ["DeadValuesRule"]
