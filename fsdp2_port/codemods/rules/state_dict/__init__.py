from fsdp2_port.codemods.rules.state_dict.rule import StateDictRule

__all__ = ["StateDictRule"]
