"""What observers hear of each commit to a change log (the CLI log, Dagster materializations).

Its own module because every writer of the change log reports the same way: the streaming
runtime, the snapshot and the repair writer beside it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from cdc_platform.events import ChangeEvent, EventKind, Op, ResumePosition

__all__ = ["CommitReport", "count_ops", "count_transactions", "ddl_rows"]


def count_ops(events: Iterable[ChangeEvent]) -> tuple[tuple[str, int], ...]:
    """Rows per operation (``c``, ``u``, ``d``, ``r``, ``ddl``) among ``events``, sorted by op;
    COMMIT events are not rows."""
    counts = Counter(
        str(e.op) for e in events if e.kind is not EventKind.COMMIT and e.op is not None
    )
    return tuple(sorted(counts.items()))


def count_transactions(events: Iterable[ChangeEvent]) -> int:
    """Source transactions that end among ``events`` and changed captured tables: a DDL, or a
    COMMIT after rows (not the COMMIT of a transaction with nothing captured, nor a heartbeat,
    nor the DDL rows the platform writes itself, server id 0: a snapshot's table definition).
    Counted the same wherever the events are committed: by the stream, or beside it in a
    snapshot's segment (the binlog read while a table is copied)."""
    return sum(
        1
        for e in events
        if e.txn.server_id != 0
        and (
            e.kind is EventKind.DDL
            or (e.kind is EventKind.COMMIT and e.index > 0 and not e.txn.idle)
        )
    )


def ddl_rows(events: Iterable[ChangeEvent]) -> tuple[tuple[str, str, str], ...]:
    """``(db, table, statement)`` of each DDL row among ``events``."""
    return tuple((e.db, e.table, e.ddl) for e in events if e.op is Op.DDL and e.ddl is not None)


@dataclass(frozen=True, slots=True)
class CommitReport:
    """One committed batch, as reported to observers (CLI log, Dagster materializations)."""

    destination: str
    batch_seq: int
    version: int
    rows: int
    events: int
    resume: ResumePosition
    epoch: int
    lag_seconds: float
    """Commit time minus the binlog timestamp of the batch's last transaction."""
    commit_seconds: float
    partial: bool
    ops: tuple[tuple[str, int], ...] = ()
    """Rows per operation (:func:`count_ops`)."""
    transactions: int = 0
    """Source transactions this commit completed (0 for a snapshot chunk or a repair)."""
    rereads: tuple[str, ...] = ()
    """Tables this commit's DDL listed for a re-read (``db.table``; see backfill/reread.py)."""
