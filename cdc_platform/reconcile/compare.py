"""Compare a source table with its mirror by chunk checksums, and name the keys that differ.

The full list of SOFARegistry's watch + list: the binlog (the watch) can miss what
happens behind its back (``SET sql_log_bin=0``, a restored backup, a mirror edited or damaged
by hand), so now and then the whole table is listed and compared with the mirror.

How, for one table:

1. The source is read in primary-key chunks (keyset, autocommit, no locks; the same reader
   and value encoder as the snapshot) into a Parquet staging file: chunk number, raw key,
   ``pk`` JSON, row image JSON.
2. Spark types the images with the mirror's own rules (:func:`~cdc_platform.spark.types.
   typed_value`, the code that built the mirror), so both sides are compared as the mirror
   holds values (its ``zero_dates`` too), lossy conversions included (under
   ``zero_dates="null"`` a zero date is null on both sides).
3. Keys with change-log rows newer than the mirror's last applied ``seq`` are left out on both
   sides: the mirror has not caught up with them yet, which is not a divergence.
4. Each row gets a 64-bit hash (xxhash64 of every typed column and of their null flags); each
   mirror row gets the chunk of the source row with its key. Count and sum of hashes per chunk
   are compared; only chunks that differ (and mirror rows whose key the source lacks) are
   compared row by row.

The result is a list of *suspected* keys. The source kept changing while it was read, so some
suspects only lagged; :mod:`.repair` re-reads each suspect between binlog watermarks and writes
the source's true state, so a wrong suspect costs one redundant ``r`` row and nothing else.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import pyarrow as pa
import pymysql
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 (the PySpark idiom)

from cdc_platform.backfill.chunk_bytes import rows_within
from cdc_platform.backfill.repair import RepairKey, RepairTable
from cdc_platform.config.models import DEFAULT_CHUNK_BYTES
from cdc_platform.errors import SinkError
from cdc_platform.sink.lake_files import LakeFile, join_uri
from cdc_platform.source.mysql import source_errors
from cdc_platform.source.reading.row_keys import encode_key
from cdc_platform.source.reading.row_reader import SnapshotTable, read_chunk
from cdc_platform.source.sql import qualified_name
from cdc_platform.source.values import dumps
from cdc_platform.spark.locations import STAGING_DIR, mirror_uri, table_exists
from cdc_platform.spark.mirror_state import read_state, schema_signature
from cdc_platform.spark.names import EngineColumns, col, location_name
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

__all__ = ["ChunkProgress", "TableComparison", "compare_table"]

log = logging.getLogger(__name__)

Status = Literal["compared", "no_mirror", "schema_differs"]

_CHUNK = "_cdc_chunk"
"""Column of the staged source files (beside ``key``, ``pk``, ``after``: no source column
sits beside them there; typed frames rename them to the table's engine columns)."""
_ROWS_PER_FILE = 200_000


@dataclass(frozen=True, slots=True)
class ChunkProgress:
    """Reported after every source chunk read (the CLI prints it)."""

    table: str
    chunks: int
    rows: int
    seconds: float


@dataclass
class TableComparison:
    """What comparing one table found."""

    db: str
    table: str
    status: Status
    message: str = ""
    source_rows: int = 0
    mirror_rows: int = 0
    chunks: int = 0
    differing_chunks: int = 0
    missing_in_mirror: int = 0
    """Source rows the mirror does not have."""
    changed: int = 0
    """Rows both have, with different values."""
    extra_in_mirror: int = 0
    """Mirror rows the source does not have."""
    in_flight: int = 0
    """Keys left out because the change log has changes of them the mirror has not applied."""
    mirror_last_seq: int = 0
    seconds: float = 0.0
    suspects: list[RepairKey] = field(default_factory=list)

    @property
    def name(self) -> str:
        """``db.table``."""
        return f"{self.db}.{self.table}"

    @property
    def differences(self) -> int:
        """Rows found different (missing, changed or extra)."""
        return self.missing_in_mirror + self.changed + self.extra_in_mirror

    def repair_request(self) -> RepairTable:
        """The suspects as a request for :func:`~cdc_platform.backfill.repair.repair_keys`."""
        return RepairTable(self.db, self.table, list(self.suspects), self.mirror_last_seq)

    def summary(self) -> dict[str, Any]:
        """Plain figures (reports, Dagster metadata); no keys."""
        return {
            "table": self.name,
            "status": self.status,
            "message": self.message,
            "source_rows": self.source_rows,
            "mirror_rows": self.mirror_rows,
            "chunks": self.chunks,
            "differing_chunks": self.differing_chunks,
            "missing_in_mirror": self.missing_in_mirror,
            "changed": self.changed,
            "extra_in_mirror": self.extra_in_mirror,
            "in_flight": self.in_flight,
            "mirror_last_seq": self.mirror_last_seq,
            "seconds": round(self.seconds, 3),
        }


def _stage_source(  # noqa: PLR0913 (what to read where; keyword-only: how much, observer)
    conn: pymysql.connections.Connection[Any],
    spec: SnapshotTable,
    staging: LakeFile,
    *,
    chunk_size: int,
    chunk_bytes: int,
    on_chunk: Callable[[ChunkProgress], None] | None,
) -> tuple[int, int]:
    """Read the source table in key chunks (at most ``chunk_size`` rows and ``chunk_bytes``
    column bytes each) into Parquet files of at most about that many bytes; returns (rows,
    chunks)."""
    started = time.perf_counter()
    columns: dict[str, list[Any]] = {_CHUNK: [], "key": [], "pk": [], "after": []}
    rows = chunks = files = held = 0

    def flush() -> None:
        nonlocal files, held
        held = 0
        if not columns["pk"]:
            return
        table = pa.table(
            {
                _CHUNK: pa.array(columns[_CHUNK], pa.int64()),
                "key": pa.array(columns["key"], pa.string()),
                "pk": pa.array(columns["pk"], pa.string()),
                "after": pa.array(columns["after"], pa.string()),
            }
        )
        staging.child(f"part-{files:05d}.parquet").write_parquet(table)
        files += 1
        for values in columns.values():
            values.clear()

    after: list[Any] | None = None
    while True:
        asked = rows_within(conn, spec, after, chunk_size, chunk_bytes)
        chunk = read_chunk(conn, spec, after, asked)
        for pk, image, key in zip(chunk.pks, chunk.images, chunk.keys, strict=True):
            held += len(pk) + len(image)
            columns[_CHUNK].append(chunks)
            columns["key"].append(json.dumps(encode_key(key)))
            columns["pk"].append(pk)
            columns["after"].append(image)
        rows += len(chunk)
        if chunk:
            chunks += 1
        if len(columns["pk"]) >= _ROWS_PER_FILE or held >= chunk_bytes:
            flush()
        if on_chunk is not None and chunk:
            on_chunk(ChunkProgress(spec.name, chunks, rows, time.perf_counter() - started))
        if len(chunk) < asked:
            break
        after = chunk.last_key
    flush()
    return rows, chunks


def _row_hash(names: Sequence[str]) -> Column:
    """xxhash64 of the typed columns and their null flags (xxhash64 skips nulls, so without
    the flags a value moving between two nullable columns would hash the same)."""
    flags = F.array(*[col(n).isNull() for n in names])
    return F.xxhash64(*[col(n) for n in names], flags)


def _sums(frame: DataFrame, e: EngineColumns) -> dict[int | None, tuple[int, int]]:
    """chunk -> (rows, sum of hashes)."""
    out: dict[int | None, tuple[int, int]] = {}
    for row in (
        frame.groupBy(col(e.of("chunk")))
        .agg(
            F.count(F.lit(1)).alias("n"),
            F.sum(col(e.of("hash")).cast("decimal(38,0)")).alias("s"),
        )
        .collect()
    ):
        chunk = row[e.of("chunk")]
        out[None if chunk is None else int(chunk)] = (int(row["n"]), int(row["s"] or 0))
    return out


def _mirror_pks(
    changes: DataFrame, db: str, table: str, target: TableSchema, extras: DataFrame
) -> dict[tuple[Any, ...], str]:
    """The ``pk`` JSON of mirror-only keys, from their newest upsert in the change log."""
    keys = target.key
    line = timeline(changes, db, table, lo=0, base=target, zero_dates=zero_dates_of(target))
    e = (line.target or target).engine
    events = key_events(change_rows(changes, db, table, 0), line).where(~col(e.deleted))
    newest = (
        events.join(extras.select(*[col(k) for k in keys]), on=keys, how="inner")
        .groupBy(*[col(k) for k in keys])
        .agg(F.max(col(e.seq)).alias(e.seq))
    )
    pk = e.of("pk")
    logged = change_rows(changes, db, table, 0).select(
        F.col("seq").alias(e.seq), F.col("pk").alias(pk)
    )
    rows = newest.join(logged, on=e.seq).select(*[col(k) for k in keys], col(pk)).collect()
    return {tuple(r[k] for k in keys): str(r[pk]) for r in rows if r[pk] is not None}


def _python_key(value: Any) -> Any:
    """A typed key value from Spark as pymysql binds it."""
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def _stage_whole_table(
    conn: pymysql.connections.Connection[Any],
    spec: SnapshotTable,
    staging: LakeFile,
    batch: int,
    on_chunk: Callable[[ChunkProgress], None] | None,
) -> int:
    """Stream a table without a primary key (no key to chunk by) into Parquet files, as one
    chunk: an unbuffered SELECT, so the rows never gather in memory. Returns the rows."""
    started = time.perf_counter()
    select = ", ".join(c.select for c in spec.columns)
    sql = f"SELECT {select} FROM {qualified_name(spec.db, spec.table)}"  # noqa: S608 (identifiers quoted by the source's quoting, values bound as parameters)
    rows = files = 0
    with (
        source_errors(conn, f"reading {spec.name} from"),
        conn.cursor(pymysql.cursors.SSCursor) as cur,
    ):
        cur.execute(sql)
        while records := cur.fetchmany(batch):
            images = [
                dumps(
                    {
                        c.name: None if v is None else c.convert(v)
                        for c, v in zip(spec.columns, record, strict=True)
                    }
                )
                for record in records
            ]
            part = pa.table(
                {
                    _CHUNK: pa.array([0] * len(images), pa.int64()),
                    "key": pa.array(["[]"] * len(images), pa.string()),
                    "pk": pa.array(images, pa.string()),
                    "after": pa.array(images, pa.string()),
                }
            )
            staging.child(f"part-{files:05d}.parquet").write_parquet(part)
            files += 1
            rows += len(images)
            if on_chunk is not None:
                on_chunk(ChunkProgress(spec.name, 1, rows, time.perf_counter() - started))
    return rows


def _remove(staging: LakeFile) -> None:
    try:
        staging.delete_tree()
    except SinkError as exc:  # a leftover staging folder harms nothing
        log.warning("staging %s not removed: %s", staging, exc)


def _mirror_types_differ(mirror: DataFrame, target: TableSchema, db: str, table: str) -> bool:
    """Whether the mirror's stored column types are not the ones its schema gives today (a
    mirror written by an earlier release, e.g. dates of a key before they were kept as text;
    its next apply rebuilds it)."""
    want = [spark_type(c, db=db, table=table) for c in target.columns]
    return [f.dataType for f in mirror.schema.fields] != want


def compare_table(  # noqa: PLR0913 (Spark, the source table, where its mirror is, and the comparison's bounds, keyword-only)
    spark: SparkSession,
    conn: pymysql.connections.Connection[Any],
    spec: SnapshotTable,
    *,
    change_log_uri: str,
    mirror_root: str,
    storage_options: Mapping[str, str] | None = None,
    chunk_size: int = 10_000,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    max_suspects: int = 100_000,
    on_chunk: Callable[[ChunkProgress], None] | None = None,
) -> TableComparison:
    """Compare ``spec``'s source table with its mirror; see the module docstring.

    Returns a comparison with status ``no_mirror`` (nothing to compare with yet) or
    ``schema_differs`` (the mirror has not applied the table's latest DDL yet) without
    reading the table; both resolve themselves once the mirror asset has run. At most
    ``max_suspects`` differing rows reach the driver; the counts cover all of them.
    """
    started = time.perf_counter()
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
            result.source_rows, result.chunks = _stage_source(
                conn,
                spec,
                staging,
                chunk_size=chunk_size,
                chunk_bytes=chunk_bytes,
                on_chunk=on_chunk,
            )
        else:
            result.source_rows = _stage_whole_table(conn, spec, staging, chunk_size, on_chunk)
            result.chunks = 1 if result.source_rows else 0
        names, keys, e = target.names, target.key, target.engine
        key_cols = [col(k) for k in keys]
        parsed = F.from_json(F.col("after"), raw_struct(names))
        typed = (
            spark.read.parquet(staging.uri).select(
                F.col(_CHUNK).alias(e.of("chunk")),
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
        changes = read_change_log(spark, change_log_uri)
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
            _compare_multiset(result, typed, mirror, flight, target)
            return result
        source = (
            typed.select(
                col(e.of("chunk")),
                col(e.of("key")),
                col(e.of("pk")),
                *key_cols,
                _row_hash(names).alias(e.of("hash")),
            )
            if typed is not None
            else None
        )
        mirror = mirror.select(*key_cols, _row_hash(names).alias(e.of("hash")))
        if flight is not None:
            mirror = mirror.join(flight, on=keys, how="left_anti")
            if source is not None:
                source = source.join(flight, on=keys, how="left_anti")
        _compare_by_key(spark, result, source, mirror, changes, target, max_suspects)
        return result
    finally:
        _remove(staging)
        result.seconds = time.perf_counter() - started


def _compare_multiset(
    result: TableComparison,
    source: DataFrame | None,
    mirror: DataFrame,
    flight: DataFrame | None,
    target: TableSchema,
) -> None:
    """A table without a primary key: how often each distinct row is on each side.

    One aggregation over the union of both sides (and the rows in flight, which are left
    out), grouped by every column: grouping is null-safe, and only the totals reach the
    driver. There is no key to re-read a row by, so there are no suspects either: the repair
    cannot fix such a table (the service reports it as not repaired).
    """
    cols = [col(n) for n in target.names]
    e = target.engine
    in_source, in_mirror, in_flight = e.of("in_source"), e.of("in_mirror"), e.of("in_flight")
    zero, one = F.lit(0).cast("long"), F.lit(1).cast("long")
    sides = mirror.select(*cols, zero.alias(in_source), one.alias(in_mirror), zero.alias(in_flight))
    if source is not None:
        sides = sides.unionByName(
            source.select(*cols, one.alias(in_source), zero.alias(in_mirror), zero.alias(in_flight))
        )
    if flight is not None:
        sides = sides.unionByName(
            flight.select(*cols, zero.alias(in_source), zero.alias(in_mirror), one.alias(in_flight))
        )
    counted = (
        sides.groupBy(*cols)
        .agg(
            F.sum(col(in_source)).alias(in_source),
            F.sum(col(in_mirror)).alias(in_mirror),
            F.max(col(in_flight)).alias(in_flight),
        )
        .where(col(in_flight) == F.lit(0))
    )
    s, m = col(in_source), col(in_mirror)
    row = counted.agg(
        F.sum(F.greatest(s - m, F.lit(0))).alias("missing"),
        F.sum(F.greatest(m - s, F.lit(0))).alias("extra"),
    ).collect()[0]
    result.missing_in_mirror = int(row["missing"] or 0)
    result.extra_in_mirror = int(row["extra"] or 0)
    result.differing_chunks = 1 if result.differences else 0
    if result.differences:
        result.message = (
            f"{result.differences} rows differ in a table without a primary key, which the "
            "repair cannot re-read by key: a damaged mirror is rebuilt from the change log "
            "when deleted (with its _cdc_state); writes behind the binlog need a primary key "
            "and a snapshot"
        )


def _compare_by_key(  # noqa: PLR0913, PLR0917 (the comparison's frames and bounds)
    spark: SparkSession,
    result: TableComparison,
    source: DataFrame | None,
    mirror: DataFrame,
    changes: DataFrame,
    target: TableSchema,
    max_suspects: int,
) -> None:
    """Per-chunk sums, then the differing chunks row by row; at most ``max_suspects`` rows
    are collected, the counts are computed in Spark."""
    keys, e = target.key, target.engine
    key_cols = [col(k) for k in keys]
    chunk, hashed, key, pk = (col(e.of(r)) for r in ("chunk", "hash", "key", "pk"))
    h_source_name, h_mirror_name = e.of("hash_source"), e.of("hash_mirror")
    if source is None:
        located = mirror.withColumn(e.of("chunk"), F.lit(None).cast("long"))
        source_sums: dict[int | None, tuple[int, int]] = {}
    else:
        located = mirror.join(source.select(*key_cols, chunk), on=keys, how="left")
        source_sums = _sums(source, e)
    mirror_sums = _sums(located, e)
    differing = sorted(
        c
        for c in set(source_sums) | set(mirror_sums)
        if c is not None and source_sums.get(c) != mirror_sums.get(c)
    )
    extra_rows = mirror_sums.get(None, (0, 0))[0]
    result.differing_chunks = len(differing) + (1 if extra_rows else 0)
    if not differing and not extra_rows:
        return
    s = (
        source.where(chunk.isin(differing)).select(*key_cols, key, pk, hashed.alias(h_source_name))
        if source is not None and differing
        else None
    )
    m = located.where(chunk.isin(differing) | chunk.isNull()).select(
        *key_cols, hashed.alias(h_mirror_name)
    )
    if s is None:
        both = m.select(
            *key_cols,
            F.lit(None).cast("string").alias(e.of("key")),
            F.lit(None).cast("string").alias(e.of("pk")),
            F.lit(None).cast("long").alias(h_source_name),
            col(h_mirror_name),
        )
    else:
        both = s.join(m, on=keys, how="full_outer")
    h_source, h_mirror = col(h_source_name), col(h_mirror_name)
    differ = both.where(h_source.isNull() | h_mirror.isNull() | (h_source != h_mirror))
    totals = differ.agg(
        F.count(F.when(h_mirror.isNull(), 1)).alias("missing"),
        F.count(F.when(h_source.isNotNull() & h_mirror.isNotNull(), 1)).alias("changed"),
        F.count(F.when(h_source.isNull(), 1)).alias("extra"),
    ).collect()[0]
    result.missing_in_mirror = int(totals["missing"])
    result.changed = int(totals["changed"])
    result.extra_in_mirror = int(totals["extra"])
    found = differ.limit(max_suspects).collect() if max_suspects > 0 else []
    extras = [r for r in found if r[h_source_name] is None]
    pk_of: dict[tuple[Any, ...], str] = {}
    if extras:
        extra_keys = spark.createDataFrame(
            [tuple(r[k] for k in keys) for r in extras],
            schema=mirror.select(*key_cols).schema,
        )
        pk_of = _mirror_pks(changes, result.db, result.table, target, extra_keys)
    for r in found:
        if r[h_source_name] is None:
            values = tuple(r[k] for k in keys)
            pk_json = pk_of.get(values)
            if pk_json is None:  # not from the change log: a key of simple values, spelled out
                pk_json = dumps({k: _python_key(v) for k, v in zip(keys, values, strict=True)})
            raw = encode_key([_python_key(v) for v in values])
        else:
            pk_json, raw = str(r[e.of("pk")]), json.loads(r[e.of("key")])
        result.suspects.append(RepairKey(raw, pk_json))
    if result.differences > max_suspects:
        result.message = (
            f"{result.differences} rows differ; only the first {max_suspects} are repaired "
            "per run (`reconcile.max_repairs_per_table`). So many differences usually mean "
            "the mirror or the change log lost data: consider a snapshot (`cdc-platform "
            "snapshot --table`) instead"
        )
