"""A table without a primary key: compare source and mirror as multisets of rows."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812 (the PySpark idiom)

from cdc_platform.reconcile.comparison import TableComparison
from cdc_platform.spark.names import col
from cdc_platform.spark.types import TableSchema

__all__ = ["compare_multiset"]


def compare_multiset(
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
