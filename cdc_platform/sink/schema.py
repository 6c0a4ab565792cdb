"""Arrow schema of the change log and the conversion of a batch of events into one Arrow table.

Columns, in order (Delta types in brackets):

============== ================ ===========================================================
op             string           c / u / d / r (snapshot) for rows, ``ddl`` for DDL
db             string, part.    schema name; null when the event has none (DDL without USE)
table          string, part.    table name; null for DDL not bound to one table
pk             string           JSON object of the primary key (null for DDL)
before         string           JSON row image before the change (null for inserts, DDL)
after          string           JSON row image after the change (null for deletes, DDL)
ddl            string           the statement, DDL rows only
columns        string           JSON column list of the row's table (events.COLUMNS_DOC);
                                repeated per row, dictionary-encoded in Parquet, so cheap
binlog_file    string           binlog file of the event
binlog_pos     long             END position of the binlog event (several rows may share it)
txn_index      long             0-based index of the event in its transaction
gtid           string           the transaction's GTID, when the server assigned one
server_id      long             originating server id
ts             timestamp (UTC)  binlog timestamp of the transaction, microseconds
seq            long             strictly increasing per destination, from 1, no gaps
batch_seq      long             the sink batch (= Delta commit) the row was written by
epoch          long             HA lease epoch of the writer (fencing token)
resume_position string          ResumePosition.to_json() on the LAST row of each commit
committed_at   timestamp (UTC)  wall clock of the writer when the commit was built
============== ================ ===========================================================

Partitioned by ``db`` and ``table``: downstream mirrors are built per source table, and a
partition filter on ``(db, table)`` lets every reader skip all other tables' files from the
Delta log alone, without opening any Parquet footer. Empty names are written as null, because
Delta stores an empty partition value as null anyway; making it explicit keeps readers
(delta-rs, Spark) in agreement.

Integers are all int64 so no source value (``server_id`` is unsigned 32-bit) can overflow, and
timestamps are UTC-adjusted ``timestamp`` rather than ``timestamp_ntz``, which needs a newer
Delta writer feature that some readers lack.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import pyarrow as pa

from cdc_platform.events import BinlogPosition, ChangeEvent, EventKind, Op, ResumePosition

__all__ = [
    "CHANGE_LOG_SCHEMA",
    "PARTITION_COLUMNS",
    "STATS_COLUMNS",
    "WRITE_SCHEMA",
    "RowsAtCut",
    "events_to_table",
    "row_events",
]

_TIMESTAMP = pa.timestamp("us", tz="UTC")

CHANGE_LOG_SCHEMA: pa.Schema = pa.schema(
    [
        pa.field("op", pa.string(), nullable=False),
        pa.field("db", pa.string()),
        pa.field("table", pa.string()),
        pa.field("pk", pa.string()),
        pa.field("before", pa.string()),
        pa.field("after", pa.string()),
        pa.field("ddl", pa.string()),
        pa.field("columns", pa.string()),
        pa.field("binlog_file", pa.string(), nullable=False),
        pa.field("binlog_pos", pa.int64(), nullable=False),
        pa.field("txn_index", pa.int64(), nullable=False),
        pa.field("gtid", pa.string()),
        pa.field("server_id", pa.int64(), nullable=False),
        pa.field("ts", _TIMESTAMP, nullable=False),
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("batch_seq", pa.int64(), nullable=False),
        pa.field("epoch", pa.int64(), nullable=False),
        pa.field("resume_position", pa.string()),
        pa.field("committed_at", _TIMESTAMP, nullable=False),
    ]
)
"""The change log's columns; see the module docstring for their meaning."""

PARTITION_COLUMNS: tuple[str, ...] = ("db", "table")

STATS_COLUMNS: tuple[str, ...] = (
    "op",
    "binlog_file",
    "binlog_pos",
    "ts",
    "seq",
    "batch_seq",
    "epoch",
    "committed_at",
)
"""Columns with min/max statistics in the Delta log (``delta.dataSkippingStatsColumns``).

Readers skip files by seq, batch, time or binlog position; min/max of JSON images prunes
nothing. Leaving them out makes every add action smaller, and delta-rs re-reads all add actions
of the table on each commit, so that cost is paid per commit (measured, bench/delta_commits.py).
"""


@dataclass(frozen=True, slots=True)
class RowsAtCut:
    """Rows read from one table (a snapshot chunk), written as op ``r`` after a commit's events.

    The same rows as :func:`cdc_platform.backfill.segments.events_at_cut` makes of them (one
    transaction at ``position`` with server id 0 and no GTID; ``txn_index`` = the row's index),
    kept as two lists (or Arrow string arrays: a spilled part, :mod:`.spilled_rows`) so that
    a large chunk becomes Arrow columns without one event object per row.
    """

    db: str
    table: str
    columns: str
    """The table's `columns` JSON, the same for every row."""
    position: BinlogPosition
    timestamp: int
    """Seconds since the epoch, the rows' ``ts``."""
    pks: Sequence[str] | pa.Array
    images: Sequence[str] | pa.Array
    first_index: int = 0
    """``txn_index`` of the first row: a part of a larger set of rows at the same cut."""

    def __post_init__(self) -> None:
        if len(self.pks) != len(self.images):
            raise ValueError(f"{len(self.pks)} keys but {len(self.images)} row images")

    def __len__(self) -> int:
        return len(self.pks)


def row_events(events: Sequence[ChangeEvent]) -> list[ChangeEvent]:
    """The events that become rows: ROW and DDL. COMMIT events only mark boundaries."""
    return [e for e in events if e.kind is not EventKind.COMMIT]


def events_to_table(  # noqa: PLR0913 (the events; the rest are keyword-only commit fields)
    events: Sequence[ChangeEvent],
    *,
    first_seq: int,
    batch_seq: int,
    epoch: int,
    resume: ResumePosition,
    committed_at: datetime,
    snapshot: RowsAtCut | None = None,
) -> pa.Table:
    """One commit's rows: ``events`` must already be the row-producing ones (:func:`row_events`),
    followed by the ``snapshot`` rows, if any.

    Row ``i`` gets ``seq = first_seq + i``; the last row carries the resume position, so the
    checkpoint survives in the data even after the commit's metadata is cleaned from the log.
    Built column by column from one pass over the events (this runs in the committing thread,
    under the interpreter lock the reader thread needs).
    """
    parts = [_event_columns(events)] if events else []
    if snapshot is not None and len(snapshot):
        parts.append(_snapshot_columns(snapshot))
    n = len(events) + (len(snapshot) if snapshot is not None else 0)
    columns: dict[str, pa.Array | pa.ChunkedArray] = {}
    for name in _SOURCE_COLUMNS:
        kind = WRITE_SCHEMA.field(name).type
        if not parts:
            columns[name] = pa.array([], kind)
        elif len(parts) == 1:
            columns[name] = parts[0][name]
        else:
            columns[name] = pa.chunked_array([part[name] for part in parts], kind)
    committed_us = int(committed_at.timestamp() * 1_000_000)
    resume_col: list[str | None] = [None] * n
    if n:
        resume_col[-1] = resume.to_json()
    columns["seq"] = pa.array(range(first_seq, first_seq + n), pa.int64())
    # Constant columns from lists: pa.repeat would import pyarrow.compute (12 MB).
    columns["batch_seq"] = pa.array([batch_seq] * n, pa.int64())
    columns["epoch"] = pa.array([epoch] * n, pa.int64())
    columns["resume_position"] = pa.array(resume_col, pa.string())
    columns["committed_at"] = pa.array([committed_us] * n, _TIMESTAMP)
    return pa.Table.from_pydict(columns, schema=WRITE_SCHEMA)


_COLUMNS_TYPE = pa.dictionary(pa.int32(), pa.string())

WRITE_SCHEMA: pa.Schema = CHANGE_LOG_SCHEMA.set(
    CHANGE_LOG_SCHEMA.get_field_index("columns"),
    CHANGE_LOG_SCHEMA.field("columns").with_type(_COLUMNS_TYPE),
)
"""The schema of a commit's Arrow table: :data:`CHANGE_LOG_SCHEMA` with `columns` as a
dictionary of strings. delta-rs writes it as the table's string column (readers through the
Delta schema get strings; the Parquet files hold the values dictionary-encoded either way)."""

_SOURCE_COLUMNS: tuple[str, ...] = tuple(
    name
    for name in CHANGE_LOG_SCHEMA.names
    if name not in ("seq", "batch_seq", "epoch", "resume_position", "committed_at")
)
"""The columns that come from the events or snapshot rows; the rest are the commit's."""


def _event_columns(events: Sequence[ChangeEvent]) -> dict[str, pa.Array]:
    """The source columns of ``events`` (see :func:`events_to_table`)."""
    ddl_kind = EventKind.DDL
    (ops, dbs, tables, pks, befores, afters, ddls, described, positions, indices, txns) = zip(
        *[
            (
                Op.DDL if e.kind is ddl_kind else e.op,
                e.db or None,
                e.table or None,
                e.pk,
                e.before,
                e.after,
                e.ddl,
                e.columns,
                e.position,
                e.index,
                e.txn,
            )
            for e in events
        ],
        strict=True,
    )
    if None in ops:
        event = events[ops.index(None)]
        raise ValueError(f"row event at {event.position} index {event.index} has no op")
    string, int64 = pa.string(), pa.int64()
    return {
        "op": pa.array(ops, string),
        "db": pa.array(dbs, string),
        "table": pa.array(tables, string),
        "pk": pa.array(pks, string),
        "before": pa.array(befores, string),
        "after": pa.array(afters, string),
        "ddl": pa.array(ddls, string),
        "columns": _repeated_strings(described),
        "binlog_file": pa.array([p.file for p in positions], string),
        "binlog_pos": pa.array([p.pos for p in positions], int64),
        "txn_index": pa.array(indices, int64),
        "gtid": pa.array([t.gtid for t in txns], string),
        "server_id": pa.array([t.server_id for t in txns], int64),
        "ts": pa.array([t.timestamp * 1_000_000 for t in txns], _TIMESTAMP),
    }


def _repeated_strings(values: Sequence[str | None]) -> pa.Array:
    """The `columns` column (a table's JSON, about 1 KB, the same on every row of the table)
    as a dictionary array: each distinct value converted once, about 11 MB less in an
    11,000-row commit's Arrow table, and a third of the time of converting every row's
    reference (measured). The change log's type stays string; see :data:`WRITE_SCHEMA`."""
    distinct: dict[str, int] = {}
    indices = [None if v is None else distinct.setdefault(v, len(distinct)) for v in values]
    return pa.DictionaryArray.from_arrays(
        pa.array(indices, pa.int32()), pa.array(list(distinct), pa.string())
    )


def _snapshot_columns(rows: RowsAtCut) -> dict[str, pa.Array]:
    """The source columns of snapshot rows (see :class:`RowsAtCut`)."""
    n = len(rows)

    def constant(value: object, kind: pa.DataType) -> pa.Array:
        return pa.array([value] * n, kind)

    string, int64 = pa.string(), pa.int64()
    return {
        "op": constant(Op.SNAPSHOT.value, string),
        "db": constant(rows.db or None, string),
        "table": constant(rows.table or None, string),
        "pk": pa.array(rows.pks, string),
        "before": pa.nulls(n, string),
        "after": pa.array(rows.images, string),
        "ddl": pa.nulls(n, string),
        "columns": pa.DictionaryArray.from_arrays(
            pa.array([0] * n, pa.int32()), pa.array([rows.columns], string)
        ),
        "binlog_file": constant(rows.position.file, string),
        "binlog_pos": constant(rows.position.pos, int64),
        "txn_index": pa.array(range(rows.first_index, rows.first_index + n), int64),
        "gtid": pa.nulls(n, string),
        "server_id": constant(0, int64),
        "ts": constant(rows.timestamp * 1_000_000, _TIMESTAMP),
    }
