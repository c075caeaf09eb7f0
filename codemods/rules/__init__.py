"""One module per rule; each defines one :class:`codemods.rule.Rule` subclass with its code."""
