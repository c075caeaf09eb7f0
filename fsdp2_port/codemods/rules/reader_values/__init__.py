from fsdp2_port.codemods.rules.reader_values.rule import ReaderValuesRule

__all__ = ["ReaderValuesRule"]
