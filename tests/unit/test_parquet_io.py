"""The Parquet reader and writer the compaction uses, on pyarrow's Parquet core: a file
round-trips, by batches and row groups, with dictionaries and statistics. If a pyarrow release
moves ``pyarrow._parquet``, this names what moved."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cdc_platform.sink.parquet_io import ParquetBatches, ParquetSink

pytestmark = pytest.mark.unit

SCHEMA = pa.schema(
    [
        pa.field("op", pa.string(), nullable=False),
        pa.field("columns", pa.dictionary(pa.int32(), pa.string())),
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("ts", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)


def rows(first: int, count: int) -> pa.Table:
    seqs = list(range(first, first + count))
    return pa.table(
        {
            "op": ["c"] * count,
            "columns": pa.array(['[{"name": "id"}]'] * count).dictionary_encode(),
            "seq": seqs,
            "ts": pa.array(seqs, pa.timestamp("us", tz="UTC")),
        },
        schema=SCHEMA,
    )


def test_a_file_round_trips_by_batches_and_row_groups() -> None:
    with tempfile.TemporaryFile() as spool:
        sink = ParquetSink(spool, SCHEMA)
        sink.write(rows(1, 5))
        sink.write(rows(6, 7))
        sink.close()
        assert not spool.closed
        spool.seek(0)
        parquet = ParquetBatches(spool, dictionaries=["columns"])
        assert parquet.num_rows == 12
        assert parquet.schema.field("columns").type == pa.dictionary(pa.int32(), pa.string())
        batches = list(parquet.batches(4))
        assert max(b.num_rows for b in batches) == 4
        assert sum(b.num_rows for b in batches) == 12
        read = pa.Table.from_batches(batches)
        assert read.equals(pa.concat_tables([rows(1, 5), rows(6, 7)]).combine_chunks())
        # the statistics readers skip files by
        spool.seek(0)
        stats = pq.ParquetFile(spool).metadata.row_group(1).column(2).statistics
        assert (stats.min, stats.max) == (6, 12)


def test_a_compaction_does_not_import_pyarrow_parquet(tmp_path: Path) -> None:
    """The point of the module: ``pyarrow.parquet`` also loads pyarrow's S3 file system.
    A process of its own writes and reads a file the way a compaction does."""
    script = (
        "import sys, tempfile, pyarrow as pa\n"
        "from cdc_platform.sink import compaction\n"
        "from cdc_platform.sink.parquet_io import ParquetBatches, ParquetSink\n"
        "schema = pa.schema([pa.field('seq', pa.int64())])\n"
        "with tempfile.TemporaryFile() as f:\n"
        "    s = ParquetSink(f, schema); s.write(pa.table({'seq': [1, 2]}, schema)); s.close()\n"
        "    f.seek(0); assert sum(b.num_rows for b in ParquetBatches(f).batches(8)) == 2\n"
        "print(sorted(m for m in sys.modules if m.startswith(('pyarrow.parquet', 'pyarrow.fs'))))\n"
        # as the console script does (infra/process_exit.py): pyarrow's teardown at interpreter
        # exit aborts now and then (about 1 run in 100 here) after all work is done
        "from cdc_platform.infra.process_exit import exit_process\n"
        "exit_process(0)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    assert done.stdout.strip() == "[]"
