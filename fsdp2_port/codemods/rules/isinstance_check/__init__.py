from fsdp2_port.codemods.rules.isinstance_check.rule import IsinstanceRule

__all__ = ["IsinstanceRule"]
