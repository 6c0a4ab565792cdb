"""A table with a primary key: compare by chunk sums, then the differing chunks row by row.

Each row gets a 64-bit hash (xxhash64 of every typed column and of their null flags); each
mirror row gets the chunk of the source row with its key. Count and sum of hashes per chunk
are compared; only chunks that differ (and mirror rows whose key the source lacks) are
compared row by row, and at most ``max_suspects`` differing keys reach the driver.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 (the PySpark idiom)

from cdc_platform.backfill.repair import RepairKey
from cdc_platform.reconcile.comparison import TableComparison
from cdc_platform.source.reading.row_keys import encode_key
from cdc_platform.source.values import dumps
from cdc_platform.spark.names import EngineColumns, col
from cdc_platform.spark.plan import key_events
from cdc_platform.spark.timeline import change_rows, timeline
from cdc_platform.spark.types import TableSchema, zero_dates_of

__all__ = ["compare_by_key", "row_hash"]


def row_hash(names: Sequence[str]) -> Column:
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


def compare_by_key(  # noqa: PLR0913, PLR0917 (the comparison's frames and bounds)
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
