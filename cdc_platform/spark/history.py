"""Daily figures of the change log and mirrors "as of the end of day D": history and backfills.

Days are UTC calendar days of ``ts``, the source's binlog timestamp of the transaction, so a
day's figures describe what happened at the source that day, whenever it reached the lake;
late arrivals land in the day they happened. The change log is append-only and ``seq`` never
changes, so a finished day's figures and as-of mirror never change either: a partition can be
recomputed (backfilled) at any time with the same result.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from datetime import time as dtime

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 (the PySpark idiom)

from cdc_platform.errors import CdcError, MirrorError
from cdc_platform.spark.locations import delta_version, table_exists, table_facts
from cdc_platform.spark.mirror_result import MirrorResult
from cdc_platform.spark.mirror_state import MirrorState, schema_signature, state_history
from cdc_platform.spark.names import col
from cdc_platform.spark.plan import apply_plan, key_events, net_changes
from cdc_platform.spark.swaps import follow_swap
from cdc_platform.spark.target import MirrorTarget
from cdc_platform.spark.timeline import change_rows, read_change_log, timeline
from cdc_platform.spark.types import spark_type

__all__ = [
    "DailyTableStats",
    "change_stats",
    "daily_change_stats",
    "day_bounds",
    "mirror_as_of",
    "seq_bound",
]

logger = logging.getLogger("cdc_platform.spark.history")


@dataclass(frozen=True, slots=True)
class DailyTableStats:
    """One table's change-log figures for one UTC day (by ``ts``)."""

    day: date
    db: str | None
    table: str | None
    """None for DDL the source could not tie to a table."""
    inserts: int
    updates: int
    deletes: int
    snapshots: int
    """Rows read by a snapshot or a reconciliation (op ``r``)."""
    ddl: int
    rows: int
    """All change-log rows of the table that day."""
    bytes: int
    """UTF-8 bytes of the JSON row images and DDL text (pk, before, after, ddl)."""
    max_lag_seconds: float
    """Largest ``committed_at - ts``: from the source's commit to the lake's."""
    first_seq: int
    last_seq: int


def day_bounds(day: date) -> tuple[datetime, datetime]:
    """[start, end) of a UTC day as aware datetimes."""
    start = datetime.combine(day, dtime(0), tzinfo=UTC)
    return start, start + timedelta(days=1)


def _in_day(frame: DataFrame, day: date) -> DataFrame:
    start, end = day_bounds(day)
    return frame.where((F.col("ts") >= F.lit(start)) & (F.col("ts") < F.lit(end)))


def _bytes(name: str) -> Column:
    return F.coalesce(F.octet_length(F.col(name)), F.lit(0))


def daily_change_stats(
    spark: SparkSession, change_log_uri: str, day: date
) -> list[DailyTableStats]:
    """Per table: counts by op, bytes and max lag of the change-log rows with ``ts`` on
    ``day`` (UTC); tables without rows that day are absent. One aggregation query."""
    try:
        return change_stats(read_change_log(spark, change_log_uri), day)
    except CdcError:
        raise
    except Exception as exc:  # pyspark / grpc / py4j errors
        raise MirrorError(f"daily figures of {day} from {change_log_uri} failed: {exc}") from exc


def change_stats(changes: DataFrame, day: date) -> list[DailyTableStats]:
    """:func:`daily_change_stats` of a change-log DataFrame (any source, e.g. Parquet)."""
    op = F.col("op")
    lag = (F.unix_micros(F.col("committed_at")) - F.unix_micros(F.col("ts"))) / F.lit(1e6)
    rows = (
        _in_day(changes, day)
        .groupBy("db", "table")
        .agg(
            F.count(F.when(op == "c", 1)).alias("inserts"),
            F.count(F.when(op == "u", 1)).alias("updates"),
            F.count(F.when(op == "d", 1)).alias("deletes"),
            F.count(F.when(op == "r", 1)).alias("snapshots"),
            F.count(F.when(op == "ddl", 1)).alias("ddl"),
            F.count(F.lit(1)).alias("rows"),
            F.sum(_bytes("pk") + _bytes("before") + _bytes("after") + _bytes("ddl")).alias("bytes"),
            F.max(lag).alias("max_lag"),
            F.min("seq").alias("first_seq"),
            F.max("seq").alias("last_seq"),
        )
        .collect()
    )
    stats = [
        DailyTableStats(
            day=day,
            db=r["db"],
            table=r["table"],
            inserts=int(r["inserts"]),
            updates=int(r["updates"]),
            deletes=int(r["deletes"]),
            snapshots=int(r["snapshots"]),
            ddl=int(r["ddl"]),
            rows=int(r["rows"]),
            bytes=int(r["bytes"] or 0),
            max_lag_seconds=float(r["max_lag"] or 0.0),
            first_seq=int(r["first_seq"]),
            last_seq=int(r["last_seq"]),
        )
        for r in rows
    ]
    return sorted(stats, key=lambda s: (s.db or "", s.table or ""))


def seq_bound(
    spark: SparkSession, change_log_uri: str, db: str, table: str, end_of_day: date
) -> int:
    """Highest seq of ``db.table`` with ``ts`` before the end of ``end_of_day`` (0: none).

    The as-of state is the change log's prefix up to that seq, so it is a state the table
    really had (the binlog order), and it contains every change timestamped on or before
    the day.
    """
    _, end = day_bounds(end_of_day)
    frame = change_rows(read_change_log(spark, change_log_uri), db, table, 0)
    row = frame.where(F.col("ts") < F.lit(end)).agg(F.max("seq").alias("s")).collect()[0]
    return int(row["s"] or 0)


def _base_version(
    history: list[MirrorState], bound: int, wanted: object, reset_seq: int | None
) -> MirrorState | None:
    """The newest remembered mirror version usable as the starting point for ``bound``."""
    usable = [
        s
        for s in history
        if s.mirror_version is not None
        and s.last_seq <= bound
        and (reset_seq is None or s.last_seq >= reset_seq)
        and schema_signature(s.schema) == wanted
    ]
    return max(usable, key=lambda s: s.last_seq) if usable else None


def mirror_as_of(
    spark: SparkSession,
    source: MirrorTarget,
    end_of_day: date,
    target_uri: str,
    *,
    from_mirror: bool = True,
) -> MirrorResult:
    """Write the state of ``source``'s table at the end of ``end_of_day`` (UTC) to
    ``target_uri``.

    The state is the change log up to :func:`seq_bound`, in the schema the table had then.
    With ``from_mirror``, the live mirror's newest remembered version at or before that seq
    (same schema, no truncate since) is read with ``VERSION AS OF`` and only the changes after
    it are applied; otherwise, or when that version is gone (vacuum), the table's whole
    history is replayed. Both give the same rows. Overwrites ``target_uri``. The storage
    options and ``zero_dates`` are ``source``'s (:class:`~.target.MirrorTarget`).
    """
    change_log_uri, db, table = source.change_log, source.db, source.table
    storage_options, zero_dates = source.storage_options, source.zero_dates
    started = time.perf_counter()
    try:
        changes = read_change_log(spark, change_log_uri)
        bound = seq_bound(spark, change_log_uri, db, table, end_of_day)
        line = timeline(changes, db, table, lo=0, hi=bound, zero_dates=zero_dates)
        reset = line.reset_seq  # a schema tool's swap, followed, still bounds the usable bases
        changes, line = follow_swap(changes, line, zero_dates)
        if line.target is None:  # the table had no rows (or no known schema) by then
            logger.info("%s.%s: nothing to mirror as of %s", db, table, end_of_day)
            return MirrorResult(
                db=db,
                table=table,
                mirror_uri=target_uri,
                mode="noop",
                previous_seq=0,
                last_seq=bound,
                changes=0,
                rows_inserted=0,
                rows_updated=0,
                rows_deleted=0,
                mirror_rows=0,
                change_log_version=None,
                mirror_version=None,
                seconds=time.perf_counter() - started,
            )
        target = line.target
        base: DataFrame | None = None
        start = line.reset_seq or 0
        if from_mirror:
            history = state_history(spark, source.mirror_root, db, table, storage_options)
            state = _base_version(history, bound, schema_signature(target), reset)
            live = source.uri
            if state is not None and table_exists(spark, live, storage_options):
                try:
                    base = (
                        spark.read.format("delta")
                        .option("versionAsOf", state.mirror_version)
                        .load(live)
                        .select(*[col(n) for n in target.names])
                    )
                    # fails here when the version is gone; a mirror written before its key's
                    # dates were kept as text has other types: replay then
                    if [f.dataType for f in base.schema] != [
                        spark_type(c, db=db, table=table) for c in target.columns
                    ]:
                        raise MirrorError(f"{db}.{table}: mirror version has other types")
                    start = state.last_seq
                except Exception as exc:  # version vacuumed or unreadable: replay instead
                    logger.info("%s.%s: mirror version unusable (%s); replaying", db, table, exc)
                    base = None
        rows = change_rows(changes, db, table, start, bound)
        latest = net_changes(key_events(rows, line), target)
        data = apply_plan(base, latest, target)
        data.write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(
            target_uri
        )
        facts = table_facts(target_uri, storage_options)
        if facts is not None and facts.rows is not None:
            count = facts.rows  # from the log: a count is a Spark job of its own
        else:
            count = spark.read.format("delta").load(target_uri).count()
    except CdcError:
        raise
    except Exception as exc:  # pyspark / grpc / py4j errors
        raise MirrorError(
            f"{db}.{table}: as-of mirror for {end_of_day} failed: {exc}", db=db, table=table
        ) from exc
    return MirrorResult(
        db=db,
        table=table,
        mirror_uri=target_uri,
        mode="as_of",
        previous_seq=start,
        last_seq=bound,
        changes=line.row_changes,
        rows_inserted=count,
        rows_updated=0,
        rows_deleted=0,
        mirror_rows=count,
        change_log_version=delta_version(change_log_uri, storage_options),
        mirror_version=facts.version if facts is not None else None,
        seconds=time.perf_counter() - started,
        columns=tuple(target.names),
        last_ts=line.last_ts,
    )
