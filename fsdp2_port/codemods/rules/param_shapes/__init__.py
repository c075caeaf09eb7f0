from fsdp2_port.codemods.rules.param_shapes.rule import ParamShapesRule

__all__ = ["ParamShapesRule"]
