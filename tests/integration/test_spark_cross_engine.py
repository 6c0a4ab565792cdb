"""Tables cross engines: delta-spark reads what delta-rs wrote, delta-rs reads what Spark wrote.

The change log is written by the platform's own sink (delta-rs) from the binlog events of a
MariaDB table holding every column type (tests/integration/test_column_types.py), one
transaction per commit, with compaction and checkpoints every two commits. Each engine reads
it; what it read is written back as Parquet and compared with delta-rs's read, every column
of every row, exactly (the dictionary-encoded ``columns`` column included). The mirror each
engine then writes from that log is read by delta-rs and must hold the same rows. The same
runs with the lake on S3 (a private SeaweedFS) for the two Apache Spark engines, which reach it
through S3A with the settings and AWS environment the platform uses (the embedded engine on S3
is tested in test_s3_spark.py).
"""

from __future__ import annotations

from itertools import groupby
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from pyarrow.fs import FileSelector
from pyspark.sql import DataFrame

from cdc_platform.events import ChangeEvent
from cdc_platform.sink import DeltaChangeLog, MaintenancePolicy
from cdc_platform.spark.locations import mirror_uri
from cdc_platform.spark.mirror import apply_changes
from cdc_platform.spark.target import MirrorTarget
from cdc_platform.testing.spark_engines import ENGINES, SparkEngine
from tests.conftest import S3Lake
from tests.integration.test_column_types import Streamed, streamed

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]

__all__ = ["streamed"]  # the module fixture of the type catalogue, shared


def _plain(table: pa.Table) -> list[dict[str, Any]]:
    """Rows with dictionary columns decoded and timestamps in microseconds, by seq."""
    columns = []
    for field, column in zip(table.schema, table.columns, strict=True):
        kind = field.type
        if pa.types.is_dictionary(kind):
            columns.append(column.cast(kind.value_type))
        elif pa.types.is_timestamp(kind):
            columns.append(column.cast(pa.timestamp("us", tz="UTC")))
        else:
            columns.append(column)
    plain = pa.table(columns, names=table.column_names)
    rows = plain.to_pylist()
    return sorted(rows, key=lambda r: int(r["seq"])) if "seq" in plain.column_names else rows


CASES = [
    *((engine, "local") for engine in ENGINES),
    ("classic", "s3"),
    ("connect", "s3"),
]


def _dictionary_encoded(file: pq.ParquetFile, name: str) -> bool:
    index = file.schema_arrow.get_field_index(name)
    meta = file.metadata
    return all(
        any("DICTIONARY" in e for e in meta.row_group(g).column(index).encodings)
        for g in range(meta.num_row_groups)
    )


def _through_parquet(frame: DataFrame, path: Path) -> pa.Table:
    """What the engine read, as Arrow: written by the engine as Parquet, read by pyarrow."""
    frame.write.mode("overwrite").option("outputTimestampType", "TIMESTAMP_MICROS").parquet(
        str(path)
    )
    return pq.read_table(str(path))


def _change_log(events: list[ChangeEvent], uri: str, options: dict[str, str] | None) -> None:
    policy = MaintenancePolicy(
        compact_every=2,
        checkpoint_every=2,
        vacuum_every=None,
        cleanup_every=None,
        reopen_every=None,
    )
    sink = DeltaChangeLog(uri, "d", maintenance=policy, storage_options=options)
    for batch, (_, group) in enumerate(groupby(events, key=lambda e: e.txn.gtid), start=1):
        txn = list(group)
        sink.commit(txn, batch_seq=batch, resume=txn[-1].resume_after(), epoch=1)
    sink.close()  # commits the compaction still merging beside the stream


@pytest.mark.parametrize(("spark_engine", "lake"), CASES, indirect=["spark_engine"])
def test_each_engine_reads_the_change_log_and_delta_rs_reads_its_mirror(
    spark_engine: SparkEngine,
    lake: str,
    streamed: Streamed,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    spark = spark_engine.spark
    options: dict[str, str] | None = None
    if lake == "s3":
        s3_lake: S3Lake = request.getfixturevalue("s3_lake")
        root = s3_lake.uri
        options = {"aws_conditional_put": "etag"}
        filesystem = s3_lake.server.filesystem()

        def parquet(uri: str) -> pq.ParquetFile:
            return pq.ParquetFile(filesystem.open_input_file(uri.removeprefix("s3://")))

        def listing(uri: str) -> list[str]:
            found = filesystem.get_file_info(FileSelector(uri.removeprefix("s3://")))
            return [Path(info.path).name for info in found]
    else:
        root = str(tmp_path / "lake")

        def parquet(uri: str) -> pq.ParquetFile:
            return pq.ParquetFile(uri)

        def listing(uri: str) -> list[str]:
            return [path.name for path in Path(uri).iterdir()]

    uri = f"{root}/changes"
    _change_log(streamed.events, uri, options)
    written = DeltaTable(uri, storage_options=options)
    history = [h.get("cdc.operation") for h in written.history()]
    assert "compaction" in history, "the log the engine reads has compaction commits"
    checkpoints = [n for n in listing(f"{uri}/_delta_log") if ".checkpoint." in n]
    assert checkpoints, "and checkpoints"
    files = [parquet(f) for f in written.file_uris()]
    assert all(_dictionary_encoded(f, "columns") for f in files), "columns is a dictionary"

    expected = _plain(written.to_pyarrow_table())
    frame = spark.read.format("delta").load(uri)
    have = _plain(_through_parquet(frame, tmp_path / "read"))
    assert len(have) == len(expected) == 5, "CREATE TABLE and four rows"
    differences = [
        (e["seq"], k, h.get(k), e[k])
        for h, e in zip(have, expected, strict=True)
        for k in e
        if h.get(k) != e[k]
    ]
    assert not differences, differences[:5]

    db = next(e.db for e in streamed.events if e.table == "all_types")
    result = apply_changes(
        spark, MirrorTarget(uri, f"{root}/mirror", db, "all_types", storage_options=options)
    )
    assert result.mirror_rows == 4
    mirror = mirror_uri(f"{root}/mirror", db, "all_types")
    by_delta_rs = DeltaTable(mirror, storage_options=options)
    assert by_delta_rs.version() == result.mirror_version, "delta-rs reads the engine's log"
    read_back = sorted(_plain(by_delta_rs.to_pyarrow_table()), key=lambda r: r["id"])
    engine_read = spark.read.format("delta").load(mirror)
    engine_rows = sorted(
        _plain(_through_parquet(engine_read, tmp_path / "m")), key=lambda r: r["id"]
    )
    assert [r["id"] for r in read_back] == [1, 2, 3, 4]
    assert read_back == engine_rows
