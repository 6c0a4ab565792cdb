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

from cdc_platform.spark.names import DELETED, col, quote_identifier
from cdc_platform.spark.types import TableSchema

__all__ = ["DELTA", "apply_counts", "delta_counts", "merge_rows", "merge_sql", "row_deltas"]

DELTA = "_cdc_delta"
"""Net change of a distinct row's count over the applied range."""
_HIT = "_cdc_hit"


def row_deltas(events: DataFrame, target: TableSchema) -> DataFrame:
    """Per distinct row touched by ``events`` (key events): its net count change, non-zero."""
    sign = F.when(F.col(DELETED), F.lit(-1)).otherwise(F.lit(1)).cast("long")
    return (
        events.groupBy(*[col(n) for n in target.names])
        .agg(F.sum(sign).alias(DELTA))
        .where(F.col(DELTA) != F.lit(0))
    )


def _copies(frame: DataFrame, count: Column, names: list[str]) -> DataFrame:
    """Each row of ``frame`` ``count`` times (none when ``count`` <= 0)."""
    return frame.where(count > F.lit(0)).select(
        *[col(n) for n in names],
        F.explode(F.array_repeat(F.lit(True), count.cast("int"))).alias("_cdc_copy"),
    )


def apply_counts(base: DataFrame | None, deltas: DataFrame, target: TableSchema) -> DataFrame:
    """The rows after adding ``deltas`` to ``base``'s row counts (the DataFrame form)."""
    names = target.names
    counted = deltas.select(*[col(n) for n in names], F.col(DELTA))
    if base is not None:
        one = F.lit(1).cast("long").alias(DELTA)
        counted = (
            base.select(*[col(n) for n in names], one)
            .unionByName(counted)
            .groupBy(*[col(n) for n in names])
            .agg(F.sum(DELTA).alias(DELTA))
        )
    return _copies(counted, F.col(DELTA), names).select(*[col(n) for n in names])


def merge_rows(mirror: DataFrame, deltas: DataFrame, target: TableSchema) -> DataFrame:
    """Source rows of the keyless MERGE: copies to add (``_cdc_deleted`` false, never match),
    and for every row that loses copies one marker (true, matches all its copies in the
    mirror) plus the copies it keeps. Identical rows cannot be told apart, so a row losing
    copies is deleted and written again as often as it remains."""
    names = target.names
    cols = [col(n) for n in names]
    long = "long"
    losing = (
        mirror.select(*cols, F.lit(0).cast(long).alias(_HIT), F.lit(1).cast(long).alias(DELTA))
        .unionByName(
            deltas.where(F.col(DELTA) < F.lit(0)).select(
                *cols, F.lit(1).cast(long).alias(_HIT), F.col(DELTA)
            )
        )
        .groupBy(*cols)
        .agg(F.max(_HIT).alias(_HIT), F.sum(DELTA).alias(DELTA))
        .where(F.col(_HIT) == F.lit(1))
    )
    markers = losing.select(*cols, F.lit(True).alias(DELETED))
    kept = _copies(losing, F.col(DELTA), names).select(*cols, F.lit(False).alias(DELETED))
    added = _copies(deltas, F.col(DELTA), names).select(*cols, F.lit(False).alias(DELETED))
    return markers.unionByName(kept).unionByName(added)


def delta_counts(deltas: DataFrame) -> tuple[int, int]:
    """(copies added, copies removed) of a deltas frame."""
    row = deltas.agg(
        F.sum(F.when(F.col(DELTA) > F.lit(0), F.col(DELTA))).alias("added"),
        F.sum(F.when(F.col(DELTA) < F.lit(0), -F.col(DELTA))).alias("removed"),
    ).collect()[0]
    return int(row["added"] or 0), int(row["removed"] or 0)


def merge_sql(table_ref: str, view: str, target: TableSchema) -> str:
    """MERGE of :func:`merge_rows`: markers delete every copy, other rows are inserted."""
    q = quote_identifier
    names = target.names
    same = " AND ".join(f"t.{q(n)} <=> s.{q(n)}" for n in names)
    columns = ", ".join(q(n) for n in names)
    values = ", ".join(f"s.{q(n)}" for n in names)
    # every name is a quoted identifier; no value is spliced into the statement
    return (
        f"MERGE INTO {table_ref} AS t USING {q(view)} AS s "  # noqa: S608
        f"ON s.{q(DELETED)} AND {same} "
        "WHEN MATCHED THEN DELETE "
        f"WHEN NOT MATCHED AND NOT s.{q(DELETED)} THEN INSERT ({columns}) VALUES ({values})"
    )
