from fsdp2_port.codemods.rules.clip_grad.rule import ClipGradRule

__all__ = ["ClipGradRule"]
