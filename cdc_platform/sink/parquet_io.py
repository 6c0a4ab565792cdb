"""Parquet files read and written by batches, through pyarrow's Parquet core without
``pyarrow.parquet``.

``import pyarrow.parquet`` also imports ``pyarrow.fs`` and with it pyarrow's S3 file system,
about 8 MB of resident memory in a process that never uses them (the change log's object
store is delta-rs's and obstore's). A compaction only needs the reader and the writer of
``pyarrow._parquet``, which ``pyarrow.parquet`` itself wraps: measured in one process, one
compaction of 220,000 rows raised the high water mark by 17 MB this way and by 26 MB through
``pyarrow.parquet`` (about the same as the query engine it replaced).

``pyarrow._parquet`` is pyarrow's own, not its documented API, so this is the one module that
touches it; ``tests/unit/test_parquet_io.py`` round-trips a file through it and says what
moved when a pyarrow release changes it.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence
from typing import Any, BinaryIO

import pyarrow as pa
from pyarrow import _parquet  # see the module docstring

__all__ = ["ParquetBatches", "ParquetSink"]


class ParquetBatches:
    """One Parquet file from an open binary file, read a batch at a time."""

    def __init__(
        self, source: io.RawIOBase | BinaryIO, *, dictionaries: Sequence[str] = ()
    ) -> None:
        """``dictionaries``: string columns read as dictionaries (as the file stores them)."""
        self._reader: Any = _parquet.ParquetReader()
        self._reader.open(source, read_dictionary=list(dictionaries) or None)

    @property
    def num_rows(self) -> int:
        return int(self._reader.metadata.num_rows)

    @property
    def schema(self) -> pa.Schema:
        schema: pa.Schema = self._reader.schema_arrow
        return schema

    def batches(self, rows: int) -> Iterator[pa.RecordBatch]:
        """Every row of the file in order, at most ``rows`` a batch, one thread."""
        groups = list(range(self._reader.num_row_groups))
        yield from self._reader.iter_batches(rows, groups, None, use_threads=False)


class ParquetSink:
    """One Parquet file written into an open binary file, a row group per :meth:`write`;
    Snappy-compressed, dictionary-encoded and with column statistics, as delta-rs writes."""

    def __init__(self, sink: BinaryIO, schema: pa.Schema) -> None:
        self.schema = schema
        self._writer: Any = _parquet.ParquetWriter(
            sink,
            schema,
            compression="snappy",
            use_dictionary=True,
            write_statistics=True,
            writer_engine_version="V2",
        )

    def write(self, table: pa.Table) -> None:
        self._writer.write_table(table)

    def close(self) -> None:
        """Write the footer (the sink stays open)."""
        self._writer.close()
