"""How far each mirror got: a small Delta table beside it, one row per apply.

``<mirror_root>/_cdc_state/<db>.<table>`` holds the last applied seq, the schema the mirror
has, the change-log and mirror versions and the counts of the newest :data:`STATE_HISTORY`
applies. It is written *after* the mirror's commit and is only an optimisation of where to
start: a lost state means one rebuild.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import SparkSession
from pyspark.sql import types as T  # noqa: N812 (the PySpark idiom)

from cdc_platform.errors import UnsupportedColumnTypeError
from cdc_platform.spark.locations import is_lake_uri, state_uri, table_exists
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


logger = logging.getLogger("cdc_platform.spark.mirror")

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


_STATE_ARROW = pa.schema(
    [
        pa.field("format_version", pa.int32(), nullable=False),
        pa.field("apply_id", pa.int64(), nullable=False),
        pa.field("db", pa.string(), nullable=False),
        pa.field("table", pa.string(), nullable=False),
        pa.field("last_seq", pa.int64(), nullable=False),
        pa.field("schema", pa.string()),
        pa.field("mode", pa.string(), nullable=False),
        pa.field("change_log_version", pa.int64()),
        pa.field("mirror_version", pa.int64()),
        pa.field("rows_inserted", pa.int64(), nullable=False),
        pa.field("rows_updated", pa.int64(), nullable=False),
        pa.field("rows_deleted", pa.int64(), nullable=False),
        pa.field("mirror_rows", pa.int64(), nullable=False),
        pa.field("applied_at", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)
""":data:`_STATE_SCHEMA` for delta-rs (Spark's TIMESTAMP is an instant: UTC in Delta)."""


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
    rows = _read_rows(spark, uri, storage_options)
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


def _read_rows(
    spark: SparkSession, uri: str, storage_options: Mapping[str, str] | None
) -> list[Mapping[str, Any]]:
    """The state table's rows: read with delta-rs where it speaks the lake's storage (a few
    kilobytes; a Spark job costs about a second on a JVM engine), else by Spark."""
    if is_lake_uri(uri):
        options = dict(storage_options or {}) or None
        try:
            rows: list[Mapping[str, Any]] = (
                DeltaTable(uri, storage_options=options).to_pyarrow_table().to_pylist()
            )
            return rows
        except Exception as exc:  # e.g. a table feature delta-rs lacks: Spark reads it
            logger.debug("state table %s read by Spark (delta-rs: %s)", uri, exc)
    return [r.asDict() for r in spark.read.format("delta").load(uri).collect()]


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


def write_state(  # noqa: PLR0913 (which mirror's state; the storage keyword-only)
    spark: SparkSession,
    root: str,
    db: str,
    table: str,
    history: list[MirrorState],
    *,
    storage_options: Mapping[str, str] | None = None,
) -> None:
    """Overwrite the state table with the newest STATE_HISTORY applies (one small file).

    Written with delta-rs where it speaks the lake's storage (one commit, no Spark job: on a
    JVM engine this small overwrite took as long as the MERGE), else, or when delta-rs
    refuses the table (a feature it lacks), by Spark."""
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
    uri = state_uri(root, db, table)
    if is_lake_uri(uri):
        names = [f.name for f in _STATE_ARROW]
        data = pa.Table.from_pylist([dict(zip(names, r, strict=True)) for r in rows], _STATE_ARROW)
        try:
            write_deltalake(
                uri,
                data,
                mode="overwrite",
                schema_mode="overwrite",
                storage_options=dict(storage_options or {}) or None,
            )
        except Exception as exc:  # a table feature delta-rs lacks, or a storage problem
            logger.debug("state table %s written by Spark (delta-rs: %s)", uri, exc)
        else:
            return
    frame = spark.createDataFrame(rows, _STATE_SCHEMA).coalesce(1)
    frame.write.format("delta").mode("overwrite").save(uri)


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
