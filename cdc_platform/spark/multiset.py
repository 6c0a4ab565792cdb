"""Tables without a primary key: the mirror holds each distinct row as often as the source.

A keyless table's rows have no identity, only values, and identical rows are legal (the same
INSERT twice, a log table). The change log is read as signed row counts: an insert or snapshot
row adds one copy of its ``after`` image, a delete removes one copy of its ``before`` image,
an update does both. :func:`row_deltas` sums them per distinct row; :func:`apply_counts` adds
them to a base's counts and writes each row that many times (below zero, a delete of a row
from before the change log began, counts as zero).

Adding counts is not idempotent, unlike setting the newest change per key: a range applied
twice counts twice. So :mod:`.mirror` merges into a keyless mirror only while it is exactly at
the Delta version its state remembers, and rebuilds it from the change log otherwise (a crash
between the mirror's commit and the state's).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F  # noqa: N812 (the PySpark idiom)

from cdc_platform.spark.names import col, quote_identifier
from cdc_platform.spark.types import TableSchema

__all__ = ["apply_counts", "delta_column", "delta_counts", "merge_rows", "merge_sql", "row_deltas"]


def delta_column(target: TableSchema) -> str:
    """The deltas' column with a distinct row's net count change over the applied range."""
    return target.engine.of("delta")


def row_deltas(events: DataFrame, target: TableSchema) -> DataFrame:
    """Per distinct row touched by ``events`` (key events): its net count change, non-zero."""
    delta = delta_column(target)
    sign = F.when(col(target.engine.deleted), F.lit(-1)).otherwise(F.lit(1)).cast("long")
    return (
        events.groupBy(*[col(n) for n in target.names])
        .agg(F.sum(sign).alias(delta))
        .where(col(delta) != F.lit(0))
    )


def _copies(frame: DataFrame, count: Column, target: TableSchema) -> DataFrame:
    """Each row of ``frame`` ``count`` times (none when ``count`` <= 0)."""
    return frame.where(count > F.lit(0)).select(
        *[col(n) for n in target.names],
        F.explode(F.array_repeat(F.lit(True), count.cast("int"))).alias(target.engine.of("copy")),
    )


def apply_counts(base: DataFrame | None, deltas: DataFrame, target: TableSchema) -> DataFrame:
    """The rows after adding ``deltas`` to ``base``'s row counts (the DataFrame form)."""
    names, delta = target.names, delta_column(target)
    counted = deltas.select(*[col(n) for n in names], col(delta))
    if base is not None:
        one = F.lit(1).cast("long").alias(delta)
        counted = (
            base.select(*[col(n) for n in names], one)
            .unionByName(counted)
            .groupBy(*[col(n) for n in names])
            .agg(F.sum(col(delta)).alias(delta))
        )
    return _copies(counted, col(delta), target).select(*[col(n) for n in names])


def merge_rows(mirror: DataFrame, deltas: DataFrame, target: TableSchema) -> DataFrame:
    """Source rows of the keyless MERGE: copies to add (the engine's deleted column false,
    never match), and for every row that loses copies one marker (true, matches all its
    copies in the mirror) plus the copies it keeps. Identical rows cannot be told apart, so a
    row losing copies is deleted and written again as often as it remains."""
    cols = [col(n) for n in target.names]
    long, delta, hit = "long", delta_column(target), target.engine.of("hit")
    deleted = target.engine.deleted
    losing = (
        mirror.select(*cols, F.lit(0).cast(long).alias(hit), F.lit(1).cast(long).alias(delta))
        .unionByName(
            deltas.where(col(delta) < F.lit(0)).select(
                *cols, F.lit(1).cast(long).alias(hit), col(delta)
            )
        )
        .groupBy(*cols)
        .agg(F.max(col(hit)).alias(hit), F.sum(col(delta)).alias(delta))
        .where(col(hit) == F.lit(1))
    )
    markers = losing.select(*cols, F.lit(True).alias(deleted))
    kept = _copies(losing, col(delta), target).select(*cols, F.lit(False).alias(deleted))
    added = _copies(deltas, col(delta), target).select(*cols, F.lit(False).alias(deleted))
    return markers.unionByName(kept).unionByName(added)


def delta_counts(deltas: DataFrame, target: TableSchema) -> tuple[int, int]:
    """(copies added, copies removed) of a deltas frame."""
    delta = col(delta_column(target))
    row = deltas.agg(
        F.sum(F.when(delta > F.lit(0), delta)).alias("added"),
        F.sum(F.when(delta < F.lit(0), -delta)).alias("removed"),
    ).collect()[0]
    return int(row["added"] or 0), int(row["removed"] or 0)


def merge_sql(table_ref: str, view: str, target: TableSchema) -> str:
    """MERGE of :func:`merge_rows`: markers delete every copy, other rows are inserted."""
    q = quote_identifier
    names, deleted = target.names, q(target.engine.deleted)
    same = " AND ".join(f"t.{q(n)} <=> s.{q(n)}" for n in names)
    columns = ", ".join(q(n) for n in names)
    values = ", ".join(f"s.{q(n)}" for n in names)
    # every name is a quoted identifier; no value is spliced into the statement
    return (
        f"MERGE INTO {table_ref} AS t USING {q(view)} AS s "  # noqa: S608 (Spark SQL of quoted identifiers, no user values)
        f"ON s.{deleted} AND {same} "
        "WHEN MATCHED THEN DELETE "
        f"WHEN NOT MATCHED AND NOT s.{deleted} THEN INSERT ({columns}) VALUES ({values})"
    )
