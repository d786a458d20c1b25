"""Errors of malformed input rows and unreadable split files (shared by every reader)."""
from __future__ import annotations


class RowError(ValueError):
    """A row that does not match the RoG format; the message names file, row and field.

    ``category``: the reason without row-specific detail, under which skips are counted
    (defaults to ``reason``).
    """

    def __init__(self, source: str, row_id: str, field: str, reason: str, category: str | None = None):
        self.source, self.row_id, self.field, self.reason = source, row_id, field, reason
        self.category = category or reason
        super().__init__(f"{source}: row {row_id!r}: field {field!r}: {reason}")


class DataFileError(ValueError):
    """A split file that cannot be read at all (truncated, not parquet, wrong schema)."""
