"""A mirror through an online schema-change tool's swap: the shadow's rows become the table's.

When the newest reset of a table's timeline is the tool's swap (``RENAME TABLE t TO _t_old,
_t_new TO t``, :func:`~cdc_platform.source.stream.swaps.swapped_in_shadow`) and the change log
holds the shadow's whole life (the same test the re-read after DDL made, so the source copied
nothing again), the table is rebuilt from a view of the change log in which the shadow's rows,
from its ``CREATE TABLE`` to the swap, stand under the table's name, followed by the table's
own rows after the swap. The tool's copy and the changes it replayed into the shadow are, row
event for row event, how the shadow came to hold what the table holds after the swap.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812 (the PySpark idiom)

from cdc_platform.source.stream.swaps import creates_table, shadow_streamed, swapped_in_shadow
from cdc_platform.spark.timeline import Timeline, timeline
from cdc_platform.spark.types import ZeroDates

__all__ = ["follow_swap"]


def follow_swap(
    changes: DataFrame, line: Timeline, zero_dates: ZeroDates = "string"
) -> tuple[DataFrame, Timeline]:
    """``changes`` and ``line`` (a rebuild's, from seq 0) seen through a followed swap at the
    line's reset; both unchanged when that reset is no such swap."""
    swap = line.reset_seq
    statement = next((s for seq, s in line.ddls if seq == swap), None)
    shadow = swapped_in_shadow(statement, line.db, line.table) if statement else None
    if swap is None or shadow is None:
        return changes, line
    mine = (F.col("db") == F.lit(line.db)) & (F.col("table") == F.lit(shadow))
    rows = changes.where(mine & (F.col("seq") < F.lit(swap))).select("seq", "op", "ddl")
    ordered = sorted((int(r["seq"]), str(r["op"]), r["ddl"]) for r in rows.collect())
    created = [seq for seq, op, ddl in ordered if op == "ddl" and ddl and creates_table(ddl)]
    if not created or not shadow_streamed([(op, ddl) for _, op, ddl in ordered]):
        return changes, line
    start = created[-1]
    table = (F.col("db") == F.lit(line.db)) & (F.col("table") == F.lit(line.table))
    own_after = table & (F.col("seq") > F.lit(swap))
    shadow_life = mine & (F.col("seq") >= F.lit(start)) & (F.col("seq") < F.lit(swap))
    database_ddl = (F.col("db") == F.lit(line.db)) & F.col("table").isNull()
    view = changes.where(
        own_after | shadow_life | (database_ddl & (F.col("seq") > F.lit(start)))
    ).withColumn("table", F.when(mine, F.lit(line.table)).otherwise(F.col("table")))
    followed = timeline(view, line.db, line.table, lo=0, hi=line.hi, zero_dates=zero_dates)
    return view, followed
