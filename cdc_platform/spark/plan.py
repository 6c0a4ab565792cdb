"""From change-log rows to the newest typed change per primary key: the shared mirror plan.

Steps, all Spark DataFrame operations that Apache Spark runs as Sail does:

1. :func:`timeline`: for a seq range of one table, the schema versions the rows show (distinct
   ``columns`` JSON with their seq range), the DDL statements, and from them the *target*
   schema (the newest version, plus DDL that came after its last row), the last statement
   after which the table starts empty (``TRUNCATE``, ``DROP TABLE``, a rename to or from it,
   ``TRUNCATE`` / ``DROP`` / ``EXCHANGE PARTITION``, ``CREATE OR REPLACE``, ``DROP DATABASE``:
   rows the source re-reads follow those that replace rows) and whether the table is gone.
2. :func:`name_mappings`: for every version, which of its columns each target column was,
   following renames (``RENAME COLUMN``, ``CHANGE``) between versions; a column added later
   maps to nothing, so older images give null for it.
3. :func:`key_events`: each change row becomes one or two *key events*: an upsert of the
   ``after`` image's key (insert, snapshot read, update) and a delete of the ``before`` image's
   key (delete, or an update that changed the primary key). Values are typed from the JSON
   text by :mod:`cdc_platform.spark.types`, for the target schema.
4. :func:`net_changes`: the newest event per key (by ``seq``) and the kind of the first
   one, which says whether the key existed before the range (for the counts); for a table
   without a primary key, the net count change per distinct row (:mod:`.multiset`).
5. :func:`apply_plan`: base state minus every touched key, plus the surviving upserts (the
   DataFrame form of the merge, for rebuilds, as-of mirrors and engines without MERGE).

Source column names may hold any character: every reference goes through
:func:`cdc_platform.spark.names.col`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 (the PySpark idiom)

from cdc_platform.errors import SparkError
from cdc_platform.source.stream.ddl_effects import Effect
from cdc_platform.spark import ddl as ddl_parser
from cdc_platform.spark.multiset import apply_counts, row_deltas
from cdc_platform.spark.names import col, quote_identifier
from cdc_platform.spark.types import (
    ColumnSpec,
    TableSchema,
    ZeroDates,
    parse_columns,
    raw_struct,
    typed_value,
    with_zero_dates,
)

__all__ = [
    "ROW_OPS",
    "SchemaVersion",
    "Timeline",
    "apply_plan",
    "change_rows",
    "key_condition",
    "key_events",
    "latest_per_key",
    "name_mappings",
    "net_changes",
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


def _step_back(names: Sequence[str], statements: Sequence[str]) -> dict[str, str | None]:
    """Run the column DDL in ``statements`` over ``names``: {name after: name before}."""
    alive: list[tuple[str, str | None]] = [(n, n) for n in names]  # (original, current)
    for statement in statements:
        for clause in ddl_parser.parse_alter(statement):
            if isinstance(clause, ddl_parser.RenameColumn):
                alive = [
                    (o, clause.new if c is not None and c.lower() == clause.old.lower() else c)
                    for o, c in alive
                ]
            elif isinstance(clause, ddl_parser.DropColumn):
                alive = [
                    (o, None if c is not None and c.lower() == clause.name.lower() else c)
                    for o, c in alive
                ]
    return {c.lower(): o for o, c in alive if c is not None}


def name_mappings(line: Timeline) -> dict[str | None, dict[str, str | None]]:
    """For each version (by its ``columns`` JSON; None: rows without one), the name each
    target column had in it, or None where the column did not exist yet.

    Versions are chained oldest to newest by ``max_seq``; between two neighbours, the DDL in
    between says which columns were renamed or dropped, so a dropped and re-added column of
    the same name is not mistaken for the old one.
    """
    target = line.target
    if target is None:
        return {}
    identity: dict[str, str | None] = {n: n for n in target.names}
    chain: list[tuple[str | None, list[str], int]] = [
        (v.columns, v.schema.names, v.max_seq) for v in line.versions
    ]
    chain.append((None, target.names, line.hi))
    mappings: dict[str | None, dict[str, str | None]] = {None: identity}
    current: dict[str, str | None] = dict(identity)  # target name -> name in chain[i + 1]
    for i in range(len(chain) - 2, -1, -1):
        columns, names, max_seq = chain[i]
        next_seq = chain[i + 1][2]
        between = [s for seq, s in line.ddls if max_seq < seq <= next_seq]
        back = _step_back(names, between)
        current = {t: (back.get(n.lower()) if n is not None else None) for t, n in current.items()}
        if columns is not None:
            mappings[columns] = dict(current)
    return mappings


def _raw(
    parsed: Column, target_name: str, mappings: dict[str | None, dict[str, str | None]]
) -> Column:
    """The raw JSON text of ``target_name`` in an image, whatever version the row has."""
    default = parsed.getField(target_name)
    cases = [
        (columns, mapping.get(target_name))
        for columns, mapping in mappings.items()
        if columns is not None and mapping.get(target_name) != target_name
    ]
    if not cases:
        return default
    expression: Column | None = None
    for columns, name in cases:
        # cast by name: a StringType object sent by a Spark Connect 4 client carries an explicit
        # collation, which Delta then writes as `string collate UTF8_BINARY` (delta-rs cannot
        # read such a table)
        value = parsed.getField(name) if name is not None else F.lit(None).cast("string")
        condition = F.col("columns") == F.lit(columns)
        expression = (
            F.when(condition, value) if expression is None else expression.when(condition, value)
        )
    assert expression is not None
    return expression.otherwise(default)


def _converted_versions(
    line: Timeline, mappings: dict[str | None, dict[str, str | None]], spec: ColumnSpec
) -> list[str]:
    """The versions (``columns`` JSON) in which the column had another type: their values
    are cast leniently (see :func:`typed_value`)."""
    wanted = _type_key(spec)
    converted: list[str] = []
    for version in line.versions:
        name = mappings.get(version.columns, {}).get(spec.name)
        if version.columns is None or name is None:
            continue
        old = next((c for c in version.schema.columns if c.name == name), None)
        if old is not None and _type_key(old) != wanted:
            converted.append(version.columns)
    return converted


def _type_key(spec: ColumnSpec) -> tuple[object, ...]:
    return (spec.type, spec.unsigned, spec.precision, spec.scale, spec.length, spec.values)


def key_events(rows: DataFrame, line: Timeline) -> DataFrame:
    """Typed key events: the target columns, and the engine's deleted / seq / kind columns
    (``line.target.engine``, never equal to a source column)."""
    target = line.target
    if target is None:
        raise SparkError(f"{line.db}.{line.table}: no schema known for the change log rows")
    e = target.engine
    mappings = name_mappings(line)
    every_name = sorted({n for m in mappings.values() for n in m.values() if n is not None})
    key_names = target.key
    key_raw_names = sorted(
        {n for m in mappings.values() for k in key_names if (n := m.get(k)) is not None}
    )
    after = F.from_json(F.col("after"), raw_struct(every_name))
    before = F.from_json(F.col("before"), raw_struct(key_raw_names))
    before_name = {k: e.numbered("before", i) for i, k in enumerate(key_names)}
    op_name, seq_name = e.of("op"), e.of("change_seq")

    def typed(raw: Column, spec: ColumnSpec) -> Column:
        strict = typed_value(raw, spec, db=line.db, table=line.table)
        converted = _converted_versions(line, mappings, spec)
        if not converted:
            return strict
        lenient = typed_value(raw, spec, lenient=True, db=line.db, table=line.table)
        return F.when(F.col("columns").isin(*converted), lenient).otherwise(strict)

    parsed = rows.where(F.col("op").isin(*ROW_OPS)).select(
        F.col("op").alias(op_name),
        F.col("seq").alias(seq_name),
        *[typed(_raw(after, c.name, mappings), c).alias(c.name) for c in target.columns],
        *[
            typed(_raw(before, k, mappings), target.column(k)).alias(before_name[k])
            for k in key_names
        ],
    )
    same_key: Column = F.lit(target.has_primary_key)  # keyless: an update is -1 and +1
    for k in key_names:
        same_key = same_key & col(k).eqNullSafe(col(before_name[k]))
    op, seq = col(op_name), col(seq_name)
    pk_changed = (op == F.lit("u")) & ~same_key
    types = {
        c.name: typed_value(F.lit(None).cast("string"), c, db=line.db, table=line.table)
        for c in target.columns
    }
    upsert = F.when(
        op.isin("c", "r", "u"),
        F.struct(
            *[col(c).alias(c) for c in target.names],
            F.lit(False).alias(e.deleted),
            seq.alias(e.seq),
            F.when((op == F.lit("u")) & same_key, F.lit("update"))
            .otherwise(F.lit("insert"))
            .alias(e.kind),
        ),
    )
    delete = F.when(
        (op == F.lit("d")) | pk_changed,
        F.struct(
            *[(col(before_name[c]) if c in key_names else types[c]).alias(c) for c in target.names],
            F.lit(True).alias(e.deleted),
            seq.alias(e.seq),
            # same expression shape as the upsert's kind: Sail 0.7.2 panics when the
            # structs in one array differ in a field's nullability (measured)
            F.when(op == F.lit("d"), F.lit("delete")).otherwise(F.lit("delete")).alias(e.kind),
        ),
    )
    event = e.of("event")
    return (
        parsed.select(F.explode(F.array(upsert, delete)).alias(event))
        .where(col(event).isNotNull())
        .select(
            *[col(event).getField(n).alias(n) for n in [*target.names, e.deleted, e.seq, e.kind]]
        )
    )


def latest_per_key(events: DataFrame, target: TableSchema) -> DataFrame:
    """Newest event per key, with the engine's first-kind column: the kind of the key's
    first event."""
    e = target.engine
    keys = target.key
    rest = [n for n in target.names if n not in keys]
    last = e.of("last")
    newest = F.max_by(F.struct(*[col(n) for n in rest], col(e.deleted), col(e.seq)), col(e.seq))
    return (
        events.groupBy(*[col(k) for k in keys])
        .agg(newest.alias(last), F.min_by(col(e.kind), col(e.seq)).alias(e.first_kind))
        .select(
            *[col(k) for k in keys],
            *[col(last).getField(n).alias(n) for n in rest],
            col(last).getField(e.deleted).alias(e.deleted),
            col(last).getField(e.seq).alias(e.seq),
            col(e.first_kind),
        )
        .select(*[col(n) for n in [*target.names, e.deleted, e.seq, e.first_kind]])
    )


def net_changes(events: DataFrame, target: TableSchema) -> DataFrame:
    """What a range of key events does to the table: the newest event per primary key, or
    for a table without one the net count change per distinct row (:mod:`.multiset`)."""
    if target.has_primary_key:
        return latest_per_key(events, target)
    return row_deltas(events, target)


def key_condition(target: TableSchema, left: str, right: str) -> str:
    """SQL join condition on the primary key (tables without one merge by :mod:`.multiset`)."""
    operator = "=" if target.has_primary_key else "<=>"
    q = quote_identifier
    return " AND ".join(f"{left}.{q(k)} {operator} {right}.{q(k)}" for k in target.key)


def apply_plan(base: DataFrame | None, latest: DataFrame, target: TableSchema) -> DataFrame:
    """State after the changes (:func:`net_changes`): ``base`` without every touched key,
    plus surviving upserts; for a table without a primary key, ``base`` with the counts."""
    if not target.has_primary_key:
        return apply_counts(base, latest, target)
    e = target.engine
    upserts = latest.where(~col(e.deleted)).select(*[col(n) for n in target.names])
    if base is None:
        return upserts
    touched_name = {k: e.numbered("touched", i) for i, k in enumerate(target.key)}
    touched = latest.select(*[col(k).alias(touched_name[k]) for k in target.key])
    condition: Column | None = None
    for k in target.key:
        part = col(k) == col(touched_name[k])
        condition = part if condition is None else condition & part
    kept = base.join(touched, on=condition, how="left_anti")
    return kept.select(*[col(n) for n in target.names]).unionByName(upserts)
