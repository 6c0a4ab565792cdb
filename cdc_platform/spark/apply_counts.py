"""The net counts of a merge apply (keys inserted, updated, deleted), from its staging table.

An apply writes the newest change per key to a staging table before its MERGE
(:mod:`.mirror`). The counts need two of its columns: the kind of each key's first change in
the range (an ``update`` or ``delete`` means the key existed before) and whether its newest
change deletes it. Read with delta-rs where it speaks the lake's storage, they cost no Spark
job: on the JVM engines a count over a table written a moment ago is three to six jobs (Delta
first rebuilds the new table's snapshot), and a small merge runs two fewer without it (its
MERGE reads the table anyway). Elsewhere, or when delta-rs cannot read the table, Spark counts
them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable
from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812 (the PySpark idiom)

from cdc_platform.spark.locations import is_lake_uri
from cdc_platform.spark.names import quote_identifier
from cdc_platform.spark.types import TableSchema

__all__ = ["staged_counts"]

logger = logging.getLogger("cdc_platform.spark.mirror")

EXISTED_KINDS = ("update", "delete")
"""A key whose first change in the range is one of these was in the mirror before it."""


def staged_counts(
    staged: DataFrame,
    staging_uri: str,
    target: TableSchema,
    storage_options: Mapping[str, str] | None = None,
) -> tuple[int, int, int]:
    """(inserted, updated, deleted) keys of the staged newest changes (``staged`` is the
    staging table read by Spark; ``staging_uri`` where it is)."""
    if is_lake_uri(staging_uri):
        first_kind, deleted = target.engine.first_kind, target.engine.deleted
        try:
            table = DeltaTable(
                staging_uri, storage_options=dict(storage_options or {}) or None
            ).to_pyarrow_table(columns=[first_kind, deleted])
        except Exception as exc:  # any delta-rs / storage problem: Spark counts instead
            logger.debug("staging table %s counted by Spark (delta-rs: %s)", staging_uri, exc)
        else:
            existed = pc.is_in(table[first_kind], value_set=pa.array(EXISTED_KINDS))
            gone = pc.fill_null(table[deleted], False)
            return (
                _true(pc.and_(pc.invert(existed), pc.invert(gone))),
                _true(pc.and_(existed, pc.invert(gone))),
                _true(pc.and_(existed, gone)),
            )
    return _spark_counts(staged, target)


def _true(mask: object) -> int:
    return int(pc.sum(pc.cast(mask, "int64")).as_py() or 0)


def _spark_counts(final: DataFrame, target: TableSchema) -> tuple[int, int, int]:
    existed = F.col(quote_identifier(target.engine.first_kind)).isin(*EXISTED_KINDS)
    deleted = F.col(quote_identifier(target.engine.deleted))
    row = final.agg(
        F.count(F.when(~existed & ~deleted, 1)).alias("inserted"),
        F.count(F.when(existed & ~deleted, 1)).alias("updated"),
        F.count(F.when(existed & deleted, 1)).alias("deleted"),
    ).collect()[0]
    return int(row["inserted"]), int(row["updated"]), int(row["deleted"])
