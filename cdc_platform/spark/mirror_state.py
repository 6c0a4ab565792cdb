"""How far each mirror got: a small Delta table beside it, one row per apply.

``<mirror_root>/_cdc_state/<db>.<table>`` holds the last applied seq, the schema the mirror
has, the change-log and mirror versions and the counts of the newest :data:`STATE_HISTORY`
applies. It is written *after* the mirror's commit and is only an optimisation of where to
start: a lost state means one rebuild.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import types as T  # noqa: N812 (the PySpark idiom)

from cdc_platform.errors import UnsupportedColumnTypeError
from cdc_platform.spark.locations import state_uri, table_exists
from cdc_platform.spark.types import ColumnSpec, TableSchema, parse_columns, spark_type

__all__ = [
    "STATE_FORMAT_VERSION",
    "STATE_HISTORY",
    "MirrorState",
    "read_state",
    "schema_signature",
    "state_history",
    "write_state",
]


STATE_FORMAT_VERSION = 1


STATE_HISTORY = 1000
"""State rows kept per mirror (the newest); older applies are forgotten."""

_STATE_SCHEMA = T.StructType(
    [
        T.StructField("format_version", T.IntegerType(), False),
        T.StructField("apply_id", T.LongType(), False),
        T.StructField("db", T.StringType(), False),
        T.StructField("table", T.StringType(), False),
        T.StructField("last_seq", T.LongType(), False),
        T.StructField("schema", T.StringType(), True),
        T.StructField("mode", T.StringType(), False),
        T.StructField("change_log_version", T.LongType(), True),
        T.StructField("mirror_version", T.LongType(), True),
        T.StructField("rows_inserted", T.LongType(), False),
        T.StructField("rows_updated", T.LongType(), False),
        T.StructField("rows_deleted", T.LongType(), False),
        T.StructField("mirror_rows", T.LongType(), False),
        T.StructField("applied_at", T.TimestampType(), False),
    ]
)


@dataclass(frozen=True, slots=True)
class MirrorState:
    """One apply as remembered in the state table."""

    apply_id: int
    last_seq: int
    schema: TableSchema | None
    mode: str
    change_log_version: int | None
    mirror_version: int | None
    mirror_rows: int
    applied_at: datetime
    rows_inserted: int = 0
    rows_updated: int = 0
    rows_deleted: int = 0


def state_history(
    spark: SparkSession,
    root: str,
    db: str,
    table: str,
    storage_options: Mapping[str, str] | None = None,
) -> list[MirrorState]:
    """Every remembered apply of the mirror, oldest first (empty when none)."""
    uri = state_uri(root, db, table)
    if not table_exists(spark, uri, storage_options):
        return []
    rows = spark.read.format("delta").load(uri).collect()
    states = [
        MirrorState(
            apply_id=int(r["apply_id"]),
            last_seq=int(r["last_seq"]),
            schema=parse_columns(r["schema"]) if r["schema"] else None,
            mode=str(r["mode"]),
            change_log_version=r["change_log_version"],
            mirror_version=r["mirror_version"],
            mirror_rows=int(r["mirror_rows"]),
            applied_at=r["applied_at"],
            rows_inserted=int(r["rows_inserted"]),
            rows_updated=int(r["rows_updated"]),
            rows_deleted=int(r["rows_deleted"]),
        )
        for r in rows
        if r["format_version"] == STATE_FORMAT_VERSION
    ]
    return sorted(states, key=lambda s: s.apply_id)


def read_state(
    spark: SparkSession,
    root: str,
    db: str,
    table: str,
    storage_options: Mapping[str, str] | None = None,
) -> MirrorState | None:
    """The newest remembered apply of the mirror, or None."""
    history = state_history(spark, root, db, table, storage_options)
    return history[-1] if history else None


def write_state(
    spark: SparkSession,
    root: str,
    db: str,
    table: str,
    history: list[MirrorState],
) -> None:
    """Overwrite the state table with the newest STATE_HISTORY applies (one small file)."""
    rows: list[tuple[Any, ...]] = []
    for s in history[-STATE_HISTORY:]:
        rows.append(
            (
                STATE_FORMAT_VERSION,
                s.apply_id,
                db,
                table,
                s.last_seq,
                s.schema.to_json() if s.schema is not None else None,
                s.mode,
                s.change_log_version,
                s.mirror_version,
                s.rows_inserted,
                s.rows_updated,
                s.rows_deleted,
                s.mirror_rows,
                s.applied_at,
            )
        )
    frame = spark.createDataFrame(rows, _STATE_SCHEMA).coalesce(1)
    frame.write.format("delta").mode("overwrite").save(state_uri(root, db, table))


def schema_signature(schema: TableSchema | None) -> list[tuple[str, str, bool]] | None:
    """What the mirror's layout depends on: names, Spark types and key, in order."""
    if schema is None:
        return None
    keys = set(schema.key)

    def type_key(spec: ColumnSpec) -> str:
        try:
            return str(spark_type(spec).simpleString())
        except UnsupportedColumnTypeError:  # raised with the table's name when it is used
            return "unsupported:" + spec.type

    return [(c.name, type_key(c), c.name in keys) for c in schema.columns]
