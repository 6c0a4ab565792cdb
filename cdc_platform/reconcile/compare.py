"""Compare a source table with its mirror by chunk checksums, and name the keys that differ.

The full list of SOFARegistry's watch + list: the binlog (the watch) can miss what
happens behind its back (``SET sql_log_bin=0``, a restored backup, a mirror edited or damaged
by hand), so now and then the whole table is listed and compared with the mirror.

How, for one table:

1. The source is read in primary-key chunks (keyset, autocommit, no locks; the same reader
   and value encoder as the snapshot) into a Parquet staging file: chunk number, raw key,
   ``pk`` JSON, row image JSON (:mod:`.staging`).
2. Spark types the images with the mirror's own rules (:func:`~cdc_platform.spark.types.
   typed_value`, the code that built the mirror), so both sides are compared as the mirror
   holds values (its ``zero_dates`` too), lossy conversions included (under
   ``zero_dates="null"`` a zero date is null on both sides).
3. Keys with change-log rows newer than the mirror's last applied ``seq`` are left out on both
   sides: the mirror has not caught up with them yet, which is not a divergence.
4. Each row gets a 64-bit hash (xxhash64 of every typed column and of their null flags); each
   mirror row gets the chunk of the source row with its key. Count and sum of hashes per chunk
   are compared; only chunks that differ (and mirror rows whose key the source lacks) are
   compared row by row (:mod:`.by_key`; a table without a primary key as a multiset of rows,
   :mod:`.multiset`). The result is a :class:`~.comparison.TableComparison`.

The result is a list of *suspected* keys. The source kept changing while it was read, so some
suspects only lagged; :mod:`.repair` re-reads each suspect between binlog watermarks and writes
the source's true state, so a wrong suspect costs one redundant ``r`` row and nothing else.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

import pymysql
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 (the PySpark idiom)

from cdc_platform.reconcile.by_key import compare_by_key, row_hash
from cdc_platform.reconcile.comparison import ChunkProgress, ComparisonBounds, TableComparison
from cdc_platform.reconcile.multiset import compare_multiset
from cdc_platform.reconcile.staging import (
    CHUNK_COLUMN,
    remove_staging,
    stage_source,
    stage_whole_table,
)
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.sink.lake_files import LakeFile, join_uri
from cdc_platform.source.reading.table_description import SnapshotTable
from cdc_platform.spark.locations import STAGING_DIR, mirror_uri, table_exists
from cdc_platform.spark.mirror_state import read_state, schema_signature
from cdc_platform.spark.names import col, location_name
from cdc_platform.spark.plan import key_events
from cdc_platform.spark.timeline import change_rows, read_change_log, timeline
from cdc_platform.spark.types import (
    TableSchema,
    parse_columns,
    raw_struct,
    spark_type,
    typed_value,
    with_zero_dates,
    zero_dates_of,
)

__all__ = ["compare_table"]

log = logging.getLogger(__name__)


def _mirror_types_differ(mirror: DataFrame, target: TableSchema, db: str, table: str) -> bool:
    """Whether the mirror's stored column types are not the ones its schema gives today (a
    mirror written by an earlier release, e.g. dates of a key before they were kept as text;
    its next apply rebuilds it)."""
    want = [spark_type(c, db=db, table=table) for c in target.columns]
    return [f.dataType for f in mirror.schema.fields] != want


def compare_table(  # noqa: PLR0913 (Spark, the source table, the destination's lake; bounds and observer keyword-only)
    spark: SparkSession,
    conn: pymysql.connections.Connection[Any],
    spec: SnapshotTable,
    *,
    lake: DestinationLake,
    bounds: ComparisonBounds | None = None,
    on_chunk: Callable[[ChunkProgress], None] | None = None,
) -> TableComparison:
    """Compare ``spec``'s source table with its mirror in ``lake``; see the module docstring.

    Returns a comparison with status ``no_mirror`` (nothing to compare with yet) or
    ``schema_differs`` (the mirror has not applied the table's latest DDL yet) without
    reading the table; both resolve themselves once the mirror asset has run. At most
    ``bounds.max_suspects`` differing rows reach the driver; the counts cover all of them.
    """
    started = time.perf_counter()
    bounds = bounds or ComparisonBounds()
    mirror_root, storage_options = lake.mirrors_root, lake.storage_options
    db, table = spec.db, spec.table
    uri = mirror_uri(mirror_root, db, table)
    state = read_state(spark, mirror_root, db, table, storage_options)
    if state is None or state.schema is None or not table_exists(spark, uri, storage_options):
        return TableComparison(
            db, table, "no_mirror", "no mirror yet: materialize the mirrors asset first"
        )
    target = state.schema
    mirror = spark.read.format("delta").load(uri)
    source_schema = with_zero_dates(parse_columns(spec.columns_json), zero_dates_of(target))
    if schema_signature(source_schema) != schema_signature(target) or _mirror_types_differ(
        mirror, target, db, table
    ):
        return TableComparison(
            db,
            table,
            "schema_differs",
            "the mirror's columns differ from the source's (a DDL not applied yet); "
            "compared again after the mirror catches up",
            mirror_last_seq=state.last_seq,
        )
    result = TableComparison(db, table, "compared", mirror_last_seq=state.last_seq)
    name = location_name(db, table)
    staging = LakeFile(
        join_uri(mirror_root, STAGING_DIR, f"reconcile-{name}-{uuid.uuid4().hex[:12]}"),
        storage_options,
    )
    keyed = target.has_primary_key
    try:
        if keyed:
            result.source_rows, result.chunks = stage_source(
                conn,
                spec,
                staging,
                chunk_size=bounds.chunk_size,
                chunk_bytes=bounds.chunk_bytes,
                on_chunk=on_chunk,
            )
        else:
            result.source_rows = stage_whole_table(conn, spec, staging, bounds.chunk_size, on_chunk)
            result.chunks = 1 if result.source_rows else 0
        names, keys, e = target.names, target.key, target.engine
        key_cols = [col(k) for k in keys]
        parsed = F.from_json(F.col("after"), raw_struct(names))
        typed = (
            spark.read.parquet(staging.uri).select(
                F.col(CHUNK_COLUMN).alias(e.of("chunk")),
                F.col("key").alias(e.of("key")),
                F.col("pk").alias(e.of("pk")),
                *[
                    typed_value(parsed.getField(c.name), c, db=db, table=table).alias(c.name)
                    for c in target.columns
                ],
            )
            if result.source_rows
            else None
        )
        result.mirror_rows = mirror.count()
        changes = read_change_log(spark, lake.change_log)
        pending = change_rows(changes, db, table, state.last_seq)
        flight: DataFrame | None = None
        if pending.limit(1).count() > 0:
            line = timeline(
                changes, db, table, lo=state.last_seq, base=target, zero_dates=zero_dates_of(target)
            )
            if line.target is None or schema_signature(line.target) != schema_signature(target):
                result.status = "schema_differs"
                result.message = "a DDL is waiting to be applied to the mirror"
                return result
            # the keys (keyless: the rows) with changes the mirror has not applied yet
            flight = key_events(pending, line).select(*key_cols).distinct()
            result.in_flight = flight.count()
        if not keyed:
            compare_multiset(result, typed, mirror, flight, target)
            return result
        source = (
            typed.select(
                col(e.of("chunk")),
                col(e.of("key")),
                col(e.of("pk")),
                *key_cols,
                row_hash(names).alias(e.of("hash")),
            )
            if typed is not None
            else None
        )
        mirror = mirror.select(*key_cols, row_hash(names).alias(e.of("hash")))
        if flight is not None:
            mirror = mirror.join(flight, on=keys, how="left_anti")
            if source is not None:
                source = source.join(flight, on=keys, how="left_anti")
        compare_by_key(spark, result, source, mirror, changes, target, bounds.max_suspects)
        return result
    finally:
        remove_staging(staging)
        result.seconds = time.perf_counter() - started
