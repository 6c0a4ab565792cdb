"""From change-log rows to the newest typed change per primary key: the shared mirror plan.

Steps, all Spark DataFrame operations that Apache Spark runs as Sail does:

1. :func:`.timeline.timeline`: the schema versions, DDL and target schema of a seq range
   of one table (:mod:`.timeline`).
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

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F  # noqa: N812 (the PySpark idiom)

from cdc_platform.errors import SparkError
from cdc_platform.spark import ddl as ddl_parser
from cdc_platform.spark.multiset import apply_counts, row_deltas
from cdc_platform.spark.names import col, quote_identifier
from cdc_platform.spark.timeline import ROW_OPS, Timeline
from cdc_platform.spark.types import ColumnSpec, TableSchema, raw_struct, typed_value

__all__ = [
    "apply_plan",
    "key_condition",
    "key_events",
    "latest_per_key",
    "name_mappings",
    "net_changes",
]


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
