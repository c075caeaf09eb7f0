from codemods.rules.no_sync.rule import NoSyncRule

__all__ = ["NoSyncRule"]
