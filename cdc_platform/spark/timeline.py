"""What the change log says about one table between two seqs: step 1 of the mirror plan.

:func:`timeline` reads, for a seq range of one table, the schema versions the rows show
(distinct ``columns`` JSON with their seq range), the DDL statements, and from them the
*target* schema (the newest version, plus DDL that came after its last row), the last
statement after which the table starts empty (``TRUNCATE``, ``DROP TABLE``, a rename to or
from it, ``TRUNCATE`` / ``DROP`` / ``EXCHANGE PARTITION``, ``CREATE OR REPLACE``, ``DROP
DATABASE``: rows the source re-reads follow those that replace rows) and whether the table is
gone. The rows themselves become typed changes per key in :mod:`.plan`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 (the PySpark idiom)

from cdc_platform.source.stream.ddl_effects import Effect
from cdc_platform.spark import ddl as ddl_parser
from cdc_platform.spark.types import TableSchema, ZeroDates, parse_columns, with_zero_dates

__all__ = [
    "ROW_OPS",
    "SchemaVersion",
    "Timeline",
    "change_rows",
    "read_change_log",
    "timeline",
]

_IF_NOT_EXISTS = re.compile(r"\bIF\s+NOT\s+EXISTS\b", re.IGNORECASE)

ROW_OPS = ("c", "u", "d", "r")
"""Change-log ops that change rows (``ddl`` rows do not)."""


@dataclass(frozen=True, slots=True)
class SchemaVersion:
    """One table schema as the change log shows it, and where."""

    columns: str | None
    """The ``columns`` JSON exactly as in the change log; None for a schema derived from DDL."""
    schema: TableSchema
    min_seq: int
    max_seq: int


@dataclass(frozen=True, slots=True)
class Timeline:
    """What the change log says about one table between two seqs (``lo`` excluded)."""

    db: str
    table: str
    lo: int
    hi: int
    """Highest seq of the table in the range (``lo`` when the range is empty)."""
    row_changes: int
    """Rows with op c/u/d/r in the range."""
    versions: tuple[SchemaVersion, ...]
    """Observed schemas, oldest last use first (ordered by ``max_seq``)."""
    ddls: tuple[tuple[int, str], ...]
    """(seq, statement) of the table's DDL rows, in seq order."""
    target: TableSchema | None
    """Schema after the range: the newest version plus the DDL after its last row."""
    reset_seq: int | None = None
    """seq of the last statement that emptied or replaced the table in the range (TRUNCATE,
    DROP TABLE, a rename, partition truncation or exchange...): earlier rows do not count."""
    renamed: bool = field(default=False)
    """Whether any DDL in the range renames a column."""
    last_ts: datetime | None = None
    """Newest binlog timestamp (``ts``) in the range: how current the result is."""
    dropped: str | None = None
    """Why the table no longer exists at the end of the range ("dropped", "renamed to db.t",
    "database dropped"), or None when it does."""

    @property
    def empty(self) -> bool:
        """No rows of the table in the range."""
        return self.hi <= self.lo


def read_change_log(spark: SparkSession, change_log_uri: str) -> DataFrame:
    """The change log as a DataFrame (``columns`` added as null for logs written before it)."""
    frame = spark.read.format("delta").load(change_log_uri)
    if "columns" not in frame.columns:
        frame = frame.withColumn("columns", F.lit(None).cast("string"))
    return frame


def change_rows(
    changes: DataFrame, db: str, table: str, lo: int, hi: int | None = None
) -> DataFrame:
    """Rows of one table with ``lo < seq <= hi``, and the DDL rows of its database that name
    no table (``DROP DATABASE``); the (db, table) filter prunes partitions."""
    # only database-level DDL rows have no table; both sides are partition filters
    database_ddl = F.col("table").isNull()
    condition = (F.col("db") == F.lit(db)) & ((F.col("table") == F.lit(table)) | database_ddl)
    condition &= F.col("seq") > F.lit(lo)
    if hi is not None:
        condition &= F.col("seq") <= F.lit(hi)
    return changes.where(condition)


def timeline(  # noqa: PLR0913 (the changes and the table; the range keyword-only)
    changes: DataFrame,
    db: str,
    table: str,
    *,
    lo: int,
    hi: int | None = None,
    base: TableSchema | None = None,
    zero_dates: ZeroDates = "string",
) -> Timeline:
    """Schema versions, DDL and target schema of ``db.table`` for ``lo < seq <= hi``.

    ``base`` is the schema in force at ``lo`` (e.g. the mirror's), used when no row of the
    range shows one; ``zero_dates`` how the target holds temporal columns. Two small
    queries: versions grouped by ``columns``, and the DDL rows.
    """
    rows = change_rows(changes, db, table, lo, hi)
    is_ddl = (F.col("op") == F.lit("ddl")) & F.col("ddl").isNotNull()
    groups = (
        rows.groupBy("columns")
        .agg(
            F.min("seq").alias("min_seq"),
            F.max("seq").alias("max_seq"),
            F.count(F.when(F.col("op").isin(*ROW_OPS), 1)).alias("row_changes"),
            F.max(F.unix_micros(F.col("ts"))).alias("max_ts"),
            # the DDL rows ride along: one query, not two (each is a job on a JVM engine)
            F.collect_list(F.when(is_ddl, F.struct("seq", "ddl", "table"))).alias("ddl_rows"),
        )
        .collect()
    )
    if not groups:
        target = with_zero_dates(base, zero_dates) if base is not None else None
        return Timeline(db, table, lo, lo, 0, (), (), target)
    top = max(int(g["max_seq"]) for g in groups)
    row_changes = sum(int(g["row_changes"]) for g in groups)
    last_ts = datetime.fromtimestamp(max(int(g["max_ts"]) for g in groups) / 1e6, UTC)
    versions = sorted(
        (
            SchemaVersion(
                g["columns"],
                with_zero_dates(parse_columns(g["columns"]), zero_dates),
                int(g["min_seq"]),
                int(g["max_seq"]),
            )
            for g in groups
            if g["columns"] is not None
        ),
        key=lambda v: v.max_seq,
    )
    ddl_rows = sorted((r for g in groups for r in g["ddl_rows"]), key=lambda r: int(r["seq"]))
    ddls = tuple((int(r["seq"]), str(r["ddl"])) for r in ddl_rows if r["table"] is not None)
    target, start = (versions[-1].schema, versions[-1].max_seq) if versions else (base, lo)
    reset_seq: int | None = None
    dropped: tuple[int, str] | None = None
    for row in ddl_rows:
        seq, statement = int(row["seq"]), str(row["ddl"])
        effect = ddl_parser.table_effect(statement, db, table, database_level=row["table"] is None)
        if effect is not None and effect.effect is not Effect.REREAD:
            reset_seq = seq
            gone = effect.effect is Effect.DROPPED
            dropped = (seq, ddl_parser.dropped_reason(effect)) if gone else None
        if row["table"] is None:
            continue
        if ddl_parser.is_reset(statement):
            reset_seq = seq
        if ddl_parser.creates_table(statement):
            dropped = None
        if seq <= start:
            continue
        created = ddl_parser.create_table_schema(statement)
        if created is not None and (target is None or not _IF_NOT_EXISTS.search(statement)):
            target = created  # IF NOT EXISTS on an existing table changes nothing
        elif target is not None:
            target = ddl_parser.apply_clauses(target, ddl_parser.parse_alter(statement))
    renamed = any(ddl_parser.renames(statement) for _, statement in ddls)
    last_row = max((v.max_seq for v in versions), default=lo)
    if dropped is not None and last_row > dropped[0]:
        dropped = None  # rows after the drop: the table was created again
    return Timeline(
        db,
        table,
        lo,
        top,
        row_changes,
        tuple(versions),
        ddls,
        with_zero_dates(target, zero_dates) if target is not None else None,
        reset_seq,
        renamed,
        last_ts,
        dropped[1] if dropped is not None else None,
    )
