from fsdp2_port.codemods.rules.no_sync.rule import NoSyncRule

__all__ = ["NoSyncRule"]
