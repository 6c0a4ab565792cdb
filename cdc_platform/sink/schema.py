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
from typing import Any

import pyarrow as pa

from cdc_platform.events import BinlogPosition, ChangeEvent, EventKind, Op, ResumePosition

__all__ = [
    "CHANGE_LOG_SCHEMA",
    "PARTITION_COLUMNS",
    "STATS_COLUMNS",
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
    kept as two lists so that a large chunk becomes Arrow columns without one event object
    per row.
    """

    db: str
    table: str
    columns: str
    """The table's `columns` JSON, the same for every row."""
    position: BinlogPosition
    timestamp: int
    """Seconds since the epoch, the rows' ``ts``."""
    pks: Sequence[str]
    images: Sequence[str]

    def __post_init__(self) -> None:
        if len(self.pks) != len(self.images):
            raise ValueError(f"{len(self.pks)} keys but {len(self.images)} row images")

    def __len__(self) -> int:
        return len(self.pks)


def row_events(events: Sequence[ChangeEvent]) -> list[ChangeEvent]:
    """The events that become rows: ROW and DDL. COMMIT events only mark boundaries."""
    return [e for e in events if e.kind is not EventKind.COMMIT]


def _op_of(event: ChangeEvent) -> str:
    if event.kind is EventKind.DDL:
        return Op.DDL.value
    if event.op is None:
        raise ValueError(f"row event at {event.position} index {event.index} has no op")
    return event.op.value


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
    """
    values: dict[str, list[Any]] = {
        "op": [_op_of(e) for e in events],
        "db": [e.db or None for e in events],
        "table": [e.table or None for e in events],
        "pk": [e.pk for e in events],
        "before": [e.before for e in events],
        "after": [e.after for e in events],
        "ddl": [e.ddl for e in events],
        "columns": [e.columns for e in events],
        "binlog_file": [e.position.file for e in events],
        "binlog_pos": [e.position.pos for e in events],
        "txn_index": [e.index for e in events],
        "gtid": [e.txn.gtid for e in events],
        "server_id": [e.txn.server_id for e in events],
        "ts": [e.txn.timestamp * 1_000_000 for e in events],
    }
    if snapshot is not None:
        _extend(values, snapshot)
    n = len(values["op"])
    committed_us = int(committed_at.timestamp() * 1_000_000)
    resume_col: list[str | None] = [None] * n
    if n:
        resume_col[-1] = resume.to_json()
    columns: dict[str, pa.Array] = {
        name: pa.array(column, CHANGE_LOG_SCHEMA.field(name).type)
        for name, column in values.items()
    }
    columns.update(
        {
            "seq": pa.array(range(first_seq, first_seq + n), pa.int64()),
            "batch_seq": pa.array([batch_seq] * n, pa.int64()),
            "epoch": pa.array([epoch] * n, pa.int64()),
            "resume_position": pa.array(resume_col, pa.string()),
            "committed_at": pa.array([committed_us] * n, _TIMESTAMP),
        }
    )
    return pa.Table.from_pydict(columns, schema=CHANGE_LOG_SCHEMA)


def _extend(values: dict[str, list[Any]], rows: RowsAtCut) -> None:
    """Append ``rows`` to the column lists (see :class:`RowsAtCut`)."""
    n = len(rows)
    constant: dict[str, Any] = {
        "op": Op.SNAPSHOT.value,
        "db": rows.db or None,
        "table": rows.table or None,
        "before": None,
        "ddl": None,
        "columns": rows.columns,
        "binlog_file": rows.position.file,
        "binlog_pos": rows.position.pos,
        "gtid": None,
        "server_id": 0,
        "ts": rows.timestamp * 1_000_000,
    }
    for name, value in constant.items():
        values[name].extend([value] * n)
    values["pk"].extend(rows.pks)
    values["after"].extend(rows.images)
    values["txn_index"].extend(range(n))
