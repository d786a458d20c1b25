"""Open parquet and Arrow (IPC file or stream) split files; a file that cannot be read is a
`gsr_train.data.errors.DataFileError` naming it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from gsr_train.data.errors import DataFileError


def open_parquet(path: str | Path):
    """A ``pyarrow.parquet.ParquetFile``; `DataFileError` naming the file when it
    cannot be opened (truncated download, not parquet)."""
    try:
        return pq.ParquetFile(path, memory_map=True)
    except (pa.ArrowException, OSError) as e:
        raise DataFileError(f"{path}: not a readable parquet file, it may be truncated or damaged ({e})") from e


def arrow_batches(path: str | Path) -> Iterator[pa.RecordBatch]:
    """Record batches of an Arrow IPC file or stream (the format of ``datasets`` caches)."""
    try:
        source = pa.memory_map(str(path), "r")
        try:
            reader = pa.ipc.open_file(source)
            batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
        except pa.ArrowInvalid:
            source.seek(0)
            batches = iter(pa.ipc.open_stream(source))
        yield from batches
    except (pa.ArrowException, OSError) as e:
        raise DataFileError(f"{path}: not a readable Arrow file, it may be truncated or damaged ({e})") from e
