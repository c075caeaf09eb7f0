"""A factory module that fails at import, as a user's module can."""

raise RuntimeError("config.yaml not found")
