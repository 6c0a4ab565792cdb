"""What a merge apply changes, counted from its staging table without a Spark job.

A merge apply writes the newest change per key (or, for a keyless table, each distinct row's
net count change) to a staging table before its ``MERGE``. The counts it reports are a small
aggregate of two columns of that table. Spark counted them with a query of its own: on a JVM
engine three jobs, about a sixth of a small apply's CPU (measured: 1.2 of 6.9 JVM CPU-seconds
per apply of 20 changes). delta-rs reads the two columns where it speaks the lake's storage;
Spark still counts where it does not, or when delta-rs refuses the table.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable
from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812 (the PySpark idiom)

from cdc_platform.spark import multiset
from cdc_platform.spark.locations import is_lake_uri
from cdc_platform.spark.names import quote_identifier
from cdc_platform.spark.types import TableSchema

__all__ = ["key_counts", "multiset_counts"]

logger = logging.getLogger("cdc_platform.spark.staged_counts")

EXISTED_KINDS = ("update", "delete")
"""A key whose first change in the range is one of these was in the mirror before it."""


def key_counts(
    final: DataFrame,
    uri: str,
    target: TableSchema,
    storage_options: Mapping[str, str] | None = None,
) -> tuple[int, int, int]:
    """(inserted, updated, deleted) keys of a keyed staging table at ``uri`` (``final``: the
    same table as a DataFrame, for Spark to count when delta-rs cannot).

    A key first seen as an insert and still present is inserted; an existing key still
    present is updated; an existing key gone is deleted; a key inserted and deleted within
    the range is none of them.
    """
    first_kind, deleted = target.engine.first_kind, target.engine.deleted
    columns = _read_columns(uri, (first_kind, deleted), storage_options)
    if columns is None:
        return _spark_key_counts(final, first_kind, deleted)
    existed = pc.fill_null(pc.is_in(columns[0], value_set=pa.array(EXISTED_KINDS)), False)
    gone = pc.fill_null(columns[1], False)

    def count(mask: pa.ChunkedArray) -> int:
        return int(pc.sum(pc.cast(mask, pa.int64())).as_py() or 0)

    return (
        count(pc.and_(pc.invert(existed), pc.invert(gone))),
        count(pc.and_(existed, pc.invert(gone))),
        count(pc.and_(existed, gone)),
    )


def multiset_counts(
    final: DataFrame,
    uri: str,
    target: TableSchema,
    storage_options: Mapping[str, str] | None = None,
) -> tuple[int, int]:
    """(copies added, copies removed) of a keyless staging table of row count changes."""
    name = multiset.delta_column(target)
    columns = _read_columns(uri, (name,), storage_options)
    if columns is None:
        return multiset.delta_counts(final, target)
    delta = columns[0]
    added = pc.sum(pc.if_else(pc.greater(delta, 0), delta, 0)).as_py()
    removed = pc.sum(pc.if_else(pc.less(delta, 0), pc.negate(delta), 0)).as_py()
    return int(added or 0), int(removed or 0)


def _read_columns(
    uri: str, names: tuple[str, ...], storage_options: Mapping[str, str] | None
) -> list[pa.ChunkedArray] | None:
    """The columns of the Delta table at ``uri`` read by delta-rs, or None when it cannot."""
    if not is_lake_uri(uri):
        return None
    try:
        table = DeltaTable(uri, storage_options=dict(storage_options or {}) or None)
        data = table.to_pyarrow_table(columns=list(names))
    except Exception as exc:  # e.g. a table feature delta-rs lacks: Spark counts instead
        logger.debug("staging table %s counted by Spark (delta-rs: %s)", uri, exc)
        return None
    return [data.column(name) for name in names]


def _spark_key_counts(final: DataFrame, first_kind: str, deleted: str) -> tuple[int, int, int]:
    existed = F.col(quote_identifier(first_kind)).isin(*EXISTED_KINDS)
    gone = F.col(quote_identifier(deleted))
    row = final.agg(
        F.count(F.when(~existed & ~gone, 1)).alias("inserted"),
        F.count(F.when(existed & ~gone, 1)).alias("updated"),
        F.count(F.when(existed & gone, 1)).alias("deleted"),
    ).collect()[0]
    return int(row["inserted"]), int(row["updated"]), int(row["deleted"])
