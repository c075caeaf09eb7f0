"""FSDP1's meaning on FSDP2: ``fully_shard_like_fsdp1``, FSDP1's module APIs, old-checkpoint
conversion, and the one boundary with private torch (``torch_internals``)."""
