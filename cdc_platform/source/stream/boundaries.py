"""Where transaction assembly is in the binlog: the open transaction and the last boundary.

The state a restart needs and the events that begin and end a transaction, beneath the event
handlers of :mod:`.transactions`: the last boundary fully emitted (file, end position, GTID
state) or, inside a transaction, its start and how many of its events were emitted; a group
the binlog never ends is dropped (or refused, once some of it was passed on); the DDL or
COMMIT event that ends a transaction, and the quiet and idle COMMITs that move the checkpoint
when nothing captured happens.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cdc_platform.errors import SourceError
from cdc_platform.events import (
    BinlogPosition,
    ChangeEvent,
    EventKind,
    Op,
    ResumePosition,
    ServerIdentity,
    Transaction,
)
from cdc_platform.source.filters import TableFilter
from cdc_platform.source.mysql_errors import GAP_ADVICE
from cdc_platform.source.stream.refusals import (
    check_resume_filters,
    check_same_transaction,
    txn_name,
)
from cdc_platform.source.stream.row_changes import HeldRows
from cdc_platform.source.stream.rows_framing import header_of
from cdc_platform.source.stream.table_maps import TablePlans
from cdc_platform.source.stream.xa import XaState
from cdc_platform.source.stream.xa_rows import XaBudget, XaRows

__all__ = ["AssemblySettings", "TransactionBoundaries"]

log = logging.getLogger("cdc_platform.source")

_QUIET_COMMIT_INTERVAL = 1.0
"""Seconds between COMMIT events of transactions whose rows were all filtered out."""


@dataclass(frozen=True, slots=True)
class AssemblySettings:
    """What every transaction assembler of one source assembles by: the stream's and the
    re-reads of prepared XA groups (:class:`~.binlog.BinlogSource`)."""

    tables: TableFilter
    """The captured tables."""
    clock: Callable[[], float]
    """Monotonic seconds, spacing the quiet COMMITs."""
    filters: str | None = None
    """The table filters' fingerprint, named in resume positions (a skip was counted with it)."""
    wall_clock: Callable[[], float] = time.time
    """The time of an idle COMMIT's transaction."""
    heartbeats: bool = False
    """Emit an idle COMMIT on each server heartbeat (the streaming runtime asks for them)."""
    xa_budget: XaBudget | None = None
    """The memory the held rows of prepared XA transactions share (None: a budget of its own)."""


class TransactionBoundaries:
    """The open transaction and the last boundary fully emitted, with what begins and ends
    transactions; :class:`~.transactions.TransactionAssembler` adds what each event means."""

    def __init__(
        self, start: ResumePosition, plans: TablePlans, settings: AssemblySettings
    ) -> None:
        self._tables = settings.tables
        self._plans = plans
        self._clock = settings.clock
        self._wall_clock = settings.wall_clock
        self._heartbeats = settings.heartbeats
        self._filters = settings.filters
        self._file = start.file
        self._boundary = BinlogPosition(start.file, start.pos)
        self._gtid_state = start.gtid_set
        self._skip = start.skip_events
        self._expect: ResumePosition | None = start if start.skip_events else None
        """The transaction a non-zero skip belongs to, until the stream shows it."""
        check_resume_filters(start, settings.filters)
        self._xa = XaState(start.xa_prepared, settings.xa_budget)
        self._held = HeldRows(spill=lambda: XaRows(self._xa.budget))
        self._txn: Transaction | None = None
        self._index = 0
        self._standalone = False
        self._pending_ddl: list[tuple[list[tuple[str, str]], str]] = []
        self._last_quiet = float("-inf")
        self._idle_commit: ChangeEvent | None = None
        self.server: ServerIdentity | None = None
        """The server the library's events come from now, named in every transaction begun
        (set by the source before the first event of each connection)."""

    def restart(self) -> ResumePosition:
        """Where a new reader starts after a loss; resets the per-stream state.

        Inside a transaction, the skip is what was emitted of it: never less than the skip
        the stream started with (a loss while re-reading an already committed prefix).
        """
        txn = self._txn
        if txn is not None:
            first = self._held.first_index()
            emitted = first if first is not None else self._index
            position = ResumePosition(
                txn.start.file,
                txn.start.pos,
                txn.gtid_set_before,
                max(emitted, self._skip),
                txn_gtid=txn.gtid,
                filters=self._filters,
                xa_prepared=txn.xa_prepared,
            )
        else:
            expect = self._expect
            position = ResumePosition(
                self._boundary.file,
                self._boundary.pos,
                self._gtid_state,
                self._skip,
                txn_gtid=expect.txn_gtid if expect is not None else None,
                filters=self._filters,
                xa_prepared=self._xa.pending,
            )
        self._txn = None
        self._index = 0
        self._skip = position.skip_events
        self._expect = position if position.skip_events else None
        self._held.drop()
        self._xa.hold = False
        self._pending_ddl = []
        self._plans.clear()
        return position

    def _here(self, event: Any) -> BinlogPosition:
        return BinlogPosition(self._file, header_of(event).log_pos)

    # -- transaction boundaries -----------------------------------------------------------------

    def _begin(self, event: Any, gtid: str | None, standalone: bool) -> list[ChangeEvent]:
        header = header_of(event)
        start = BinlogPosition(self._file, header.log_pos - header.event_size)
        if self._txn is not None:
            self._abandon(start)
        if self._expect is not None:
            check_same_transaction(self._expect, start, gtid)
            self._expect = None
        self._txn = Transaction(
            start=start,
            gtid=gtid,
            gtid_set_before=self._gtid_state,
            server_id=header.server_id,
            timestamp=event.timestamp,
            filters=self._filters,
            xa_prepared=self._xa.pending,
            server=self.server,
        )
        self._index = 0
        self._standalone = standalone
        self._pending_ddl = []
        self._xa.new_group()
        return []

    def _abandon(self, next_start: BinlogPosition) -> None:
        """A group with no end event before the next one: the server never committed it in
        its binlog (e.g. the binlog ends inside it), so none of its rows may be captured."""
        txn = self._txn
        assert txn is not None
        if self._held.streaming or self._skip > 0:
            raise SourceError(
                f"transaction {txn_name(txn.gtid, txn.start)} has no end event before "
                f"{next_start}, "
                f"but it was larger than the source holds back and {max(self._index, self._skip)}"
                " of its events were already passed on (and may be committed in chunks): the "
                f"change log holds changes the server never committed; {GAP_ADVICE}"
            )
        log.warning(
            "transaction %s has no end event before %s: the server never committed it in its "
            "binlog; its %d captured events are dropped",
            txn_name(txn.gtid, txn.start),
            next_start,
            self._held.count(),
        )
        self._held.drop()
        self._xa.hold = False
        self._txn = None
        self._index = 0
        self._pending_ddl = []

    def _end(self, event: Any) -> list[ChangeEvent]:
        return self._finish(self._here(event), None)

    def _finish(
        self, position: BinlogPosition, ddl: tuple[list[tuple[str, str]], str] | None
    ) -> list[ChangeEvent]:
        """End the open transaction at ``position`` with a DDL or COMMIT event.

        A DDL naming several captured tables (``DROP TABLE a, b``, ``RENAME TABLE a TO b``)
        is recorded once per table: op ``ddl`` rows of ROW kind for all but the last, whose
        DDL event ends the transaction (so a resume inside the group skips what landed).
        """
        txn = self._txn
        if txn is None:
            self._boundary = position
            return []
        if ddl is None and self._pending_ddl:
            names = list(dict.fromkeys(n for tables, _ in self._pending_ddl for n in tables))
            ddl = (names, ";\n".join(sql for _, sql in self._pending_ddl))
        out = self._held.take()
        event: ChangeEvent | None
        if ddl is not None:
            tables, sql = ddl
            for db, table in tables[:-1]:
                if self._index >= self._skip:
                    out.append(
                        ChangeEvent(
                            EventKind.ROW, txn, position, self._index, db=db, table=table,
                            op=Op.DDL, ddl=sql,
                        )
                    )  # fmt: skip
                self._index += 1
            db, table = tables[-1]
            event = ChangeEvent(
                EventKind.DDL, txn, position, self._index, db=db, table=table, op=Op.DDL, ddl=sql
            )
        else:
            event = ChangeEvent(EventKind.COMMIT, txn, position, self._index)
            if self._index == 0:
                event = self._quiet(event)
        if event is not None and event.index >= self._skip:
            self._idle_commit = None
            out.append(event)
        if out:
            self._idle_commit = None
        self._close(position, txn)
        self._xa.boundary(txn)
        return out

    def _close(self, position: BinlogPosition, txn: Transaction) -> None:
        """The open transaction ended at ``position``: the next boundary."""
        self._boundary = position
        self._gtid_state = txn.gtid_set_after
        self._txn = None
        self._index = 0
        self._skip = 0
        self._pending_ddl = []
        self._held.drop()
        self._xa.new_group()

    def _quiet(self, commit: ChangeEvent) -> ChangeEvent | None:
        """The COMMIT of a transaction with nothing captured: at most one per second, so the
        checkpoint advances under unrelated traffic without flooding the store."""
        now = self._clock()
        if now - self._last_quiet >= _QUIET_COMMIT_INTERVAL:
            self._last_quiet = now
            return commit
        self._idle_commit = commit
        return None

    def _idle(self, server_id: int, read_to: BinlogPosition | None) -> list[ChangeEvent]:
        """Heartbeat at ``read_to``: all is sent. Outside a transaction a held-back quiet COMMIT
        comes out, then (``heartbeats``) an idle COMMIT at the last boundary: the runtime and
        the snapshot's segments take from it that all up to ``read_to`` is read."""
        if self._txn is not None or self._expect is not None:
            return []
        out: list[ChangeEvent] = []
        commit = self._idle_commit
        if commit is not None:
            self._idle_commit = None
            self._last_quiet = self._clock()
            out.append(commit)
        boundary = self._boundary
        idle = Transaction(
            start=boundary,
            gtid=None,
            gtid_set_before=self._gtid_state,
            server_id=server_id,
            timestamp=int(self._wall_clock()),
            filters=self._filters,
            xa_prepared=self._xa.pending,
            idle=True,
            server=self.server,
            read_to=read_to,
        )
        if self._heartbeats:
            out.append(ChangeEvent(EventKind.COMMIT, idle, boundary, 0))
        return out

    def _rotate(self, event: Any) -> list[ChangeEvent]:
        self._file = event.next_binlog
        if event.timestamp != 0 and self._txn is None:
            # A real rotation at the end of a file (not the fake one each connection starts
            # with): the next boundary is the start of the new file.
            self._boundary = BinlogPosition(event.next_binlog, event.position)
        self._plans.clear()
        return []

    def _ensure_txn(self, event: Any) -> Transaction:
        if self._txn is None:
            # MySQL without GTIDs, or a stream that started oddly: open one here.
            self._begin(event, None, standalone=False)
        assert self._txn is not None
        return self._txn
