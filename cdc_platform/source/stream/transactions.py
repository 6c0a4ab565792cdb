"""Transaction assembly: binlog events in, ChangeEvents with exact transaction boundaries out.

MariaDB sends a GTID event instead of BEGIN; an XidEvent or a ``COMMIT`` query ends a
transaction; DDL is its own transaction. The assembler also tracks the resume position after
every boundary, so the source can restart from the last transaction it fully emitted.

Only committed transactions come out. The rows of a transaction are held back until its end
event (up to a bound, beyond which a big transaction streams so the store can commit it in
chunks), so a group the binlog never ends is dropped rather than captured. A two-phase XA
transaction's rows are held until the server's ``XA COMMIT`` and then emitted as that group's
rows; ``XA ROLLBACK`` drops them. A resume inside a transaction (``skip_events``) is checked
against that transaction's identity and the table filters the skip was counted with.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from pymysqlreplication.event import (
    GtidEvent,
    HeartbeatLogEvent,
    MariadbGtidEvent,
    NotImplementedEvent,
    QueryEvent,
    RotateEvent,
    XAPrepareEvent,
    XidEvent,
)
from pymysqlreplication.row_event import (
    DeleteRowsEvent,
    PartialUpdateRowsEvent,
    TableMapEvent,
    UpdateRowsEvent,
    WriteRowsEvent,
)

from cdc_platform.errors import SourceError
from cdc_platform.events import (
    BinlogPosition,
    ChangeEvent,
    EventKind,
    Op,
    PreparedXa,
    ResumePosition,
    ServerIdentity,
    Transaction,
)
from cdc_platform.source.filters import Statement, StatementKind, TableFilter, classify_statement
from cdc_platform.source.mysql import GAP_ADVICE
from cdc_platform.source.stream.refusals import (
    ANONYMOUS_GTID_EVENT,
    check_resume_filters,
    check_same_transaction,
    partial_json_error,
    refuse_statement_dml,
    refuse_unknown_event,
    txn_name,
)
from cdc_platform.source.stream.row_changes import HeldRows, row_changes
from cdc_platform.source.stream.rows_framing import (
    UPDATE,
    RowsFrame,
    frame_library_event,
    header_of,
)
from cdc_platform.source.stream.table_maps import TablePlans
from cdc_platform.source.stream.xa import XaState, xa_statement
from cdc_platform.source.stream.xa_rows import XaBudget, XaRows
from cdc_platform.source.values import RowDecoder

log = logging.getLogger("cdc_platform.source")


_MARIADB_FL_STANDALONE = 0x01
"""MariaDB GTID flag: the group is one statement with no COMMIT (DDL and the like)."""
_MARIADB_FL_PREPARED_XA = 0x40
"""MariaDB GTID flag: the group is an XA transaction that ends with XA PREPARE."""

_TABLE_STATEMENTS = frozenset({StatementKind.DDL, StatementKind.ADMIN, StatementKind.DML})
"""Statements after which table ids may describe other table definitions."""

_QUIET_COMMIT_INTERVAL = 1.0
"""Seconds between COMMIT events of transactions whose rows were all filtered out."""


__all__ = ["TransactionAssembler"]


# -- transactions -------------------------------------------------------------------------------


class TransactionAssembler:
    """Turns the library's events into ChangeEvents with transaction boundaries and indices.

    Keeps what a restart needs: the last boundary fully emitted (file, end position, GTID
    state) or, inside a transaction, its start and how many of its events were emitted.
    """

    def __init__(  # noqa: PLR0913 (the start and filters; clocks and fingerprint keyword-only)
        self,
        start: ResumePosition,
        tables: TableFilter,
        plans: TablePlans,
        *,
        clock: Callable[[], float],
        filters: str | None = None,
        wall_clock: Callable[[], float] = time.time,
        heartbeats: bool = False,
        xa_budget: XaBudget | None = None,
    ) -> None:
        self._tables = tables
        self._plans = plans
        self._clock = clock
        self._wall_clock = wall_clock
        self._heartbeats = heartbeats
        self._filters = filters
        self._file = start.file
        self._boundary = BinlogPosition(start.file, start.pos)
        self._gtid_state = start.gtid_set
        self._skip = start.skip_events
        self._expect: ResumePosition | None = start if start.skip_events else None
        """The transaction a non-zero skip belongs to, until the stream shows it."""
        check_resume_filters(start, filters)
        self._xa = XaState(start.xa_prepared, xa_budget)
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
        self._handlers: dict[type, Callable[[Any], list[ChangeEvent]]] = {
            WriteRowsEvent: self._library_rows,
            UpdateRowsEvent: self._library_rows,
            DeleteRowsEvent: self._library_rows,
            TableMapEvent: self._table_map,
            XidEvent: self._end,
            MariadbGtidEvent: self._mariadb_gtid,
            QueryEvent: self._query,
            RotateEvent: self._rotate,
            HeartbeatLogEvent: self._heartbeat,
            GtidEvent: self._mysql_gtid,
            NotImplementedEvent: self._unknown,
            XAPrepareEvent: self._xa_prepare,
            PartialUpdateRowsEvent: self._partial_update,
            RowsFrame: self._framed_rows,
        }

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

    def adopt_prepared(self, xa: PreparedXa, rows: XaRows, prepared_at: int) -> None:
        """Rows of a prepared XA transaction read before the stream's start (after a restart
        from a checkpoint that lists it); they come out at its XA COMMIT."""
        self._xa.adopt(xa, rows, prepared_at)

    def relocate_prepared(
        self, move: Callable[[tuple[PreparedXa, ...]], Sequence[PreparedXa]]
    ) -> None:
        """The pending XA transactions at ``move``'s places (another server's binlog)."""
        if self._xa.pending:
            self._xa.relocate(tuple(move(self._xa.pending)))

    def prepared_rows(self, xid: str) -> tuple[XaRows, int] | None:
        """The held rows of a prepared XA transaction seen by this assembler and the binlog
        time of its prepared group, if any."""
        rows, at = self._xa.rows_of(xid), self._xa.prepared_at(xid)
        return None if rows is None or at is None else (rows, at)

    def oldest_prepared(self) -> tuple[str, int] | None:
        """(XID, binlog time) of the longest-prepared XA transaction held, if any."""
        return self._xa.oldest()

    def feed(self, event: Any) -> list[ChangeEvent]:
        """The change events one library event produces (mostly none or one rows event's)."""
        handler = self._handlers.get(type(event))
        return handler(event) if handler is not None else []

    def _table_map(self, event: Any) -> list[ChangeEvent]:
        self._plans.table_map(event)
        return []

    def _mariadb_gtid(self, event: Any) -> list[ChangeEvent]:
        out = self._begin(event, event.gtid, bool(event.flags & _MARIADB_FL_STANDALONE))
        self._xa.new_group(hold=bool(event.flags & _MARIADB_FL_PREPARED_XA))
        return out

    def _mysql_gtid(self, event: Any) -> list[ChangeEvent]:
        # MySQL: a BEGIN query follows for DML; DDL comes alone. Its GTID ('uuid:gno') is kept
        # like MariaDB's, so checkpoints carry the executed GTID set.
        return self._begin(event, event.gtid, standalone=True)

    def _heartbeat(self, event: Any) -> list[ChangeEvent]:
        ident, pos = getattr(event, "ident", ""), event.packet.log_pos
        return self._idle(event.packet.server_id, BinlogPosition(ident, pos) if ident else None)

    def _partial_update(self, event: Any) -> list[ChangeEvent]:
        raise partial_json_error(self._here(event))

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

    # -- rows ------------------------------------------------------------------------------

    def _library_rows(self, event: Any) -> list[ChangeEvent]:
        """A rows event the library framed (a table whose map came after the reader's check)."""
        if self._plans.get(event.table_id) is None:
            return []  # filtered: the rows are never decoded
        return self._framed_rows(frame_library_event(event))

    def decoder_of(self, frame: RowsFrame) -> RowDecoder | None:
        """The decoder of a rows event's table, None for a table the filters leave out."""
        return self._plans.get(frame.table_id)

    def feed_decoded(
        self, frame: RowsFrame, decoder: RowDecoder, decoded: Sequence[tuple[str, ...]]
    ) -> list[ChangeEvent]:
        """The change events of a rows event whose rows were decoded elsewhere (a worker
        process) with ``decoder``, the one :meth:`decoder_of` gave when it was read: the same
        as :meth:`feed` would have given then."""
        return self._rows_out(frame, decoder, decoded)

    def _framed_rows(self, frame: RowsFrame) -> list[ChangeEvent]:
        """A rows event framed from the raw packet (:mod:`.rows_framing`) or by the library."""
        decoder = self._plans.get(frame.table_id)
        if decoder is None:
            return []  # filtered: the rows are never decoded
        if frame.kind == UPDATE:
            decoded: Sequence[tuple[str, ...]] = decoder.updates(
                frame.rows, frame.present, frame.present_after
            )
        else:
            decoded = decoder.images(frame.rows, frame.present)
        return self._rows_out(frame, decoder, decoded)

    def _rows_out(
        self, frame: RowsFrame, decoder: RowDecoder, decoded: Sequence[tuple[str, ...]]
    ) -> list[ChangeEvent]:
        txn = self._txn if self._txn is not None else self._ensure_txn(frame)
        position = BinlogPosition(self._file, frame.log_pos)
        out, self._index = row_changes(
            frame, decoder, decoded, txn=txn, position=position, index=self._index, skip=self._skip
        )
        if not out:
            return []
        out = self._held.add(out, hold_all=self._xa.hold)
        if out:
            self._idle_commit = None
        return out

    # -- statements --------------------------------------------------------------------------

    def _query(self, event: Any) -> list[ChangeEvent]:
        schema = event.schema
        default_db = schema.decode("utf-8", "replace") if isinstance(schema, bytes) else schema
        sql: str = event.query
        statement = classify_statement(sql, default_db)
        kind = statement.kind
        if kind in _TABLE_STATEMENTS:
            self._plans.invalidate()
        if kind is StatementKind.DDL:
            return self._ddl(event, statement, sql)
        if kind is StatementKind.BEGIN:
            self._ensure_txn(event)
            self._standalone = False
            return []
        if kind is StatementKind.SAVEPOINT:
            return []
        if kind is StatementKind.XA:
            return self._xa_query(event, sql)
        if kind is StatementKind.ROLLBACK:
            log.warning(
                "ROLLBACK ends the binlog transaction at %s; its logged changes (on "
                "non-transactional tables) are kept",
                self._here(event),
            )
        elif kind is StatementKind.DML:
            refuse_statement_dml(statement, sql, self._tables, self._here(event))
        if kind is StatementKind.COMMIT or kind is StatementKind.ROLLBACK:
            return self._end(event)
        return self._statement_done(event)  # DML on tables not captured, ADMIN

    def _statement_done(self, event: Any) -> list[ChangeEvent]:
        """A statement that emits nothing; it ends its group if the group is that statement."""
        if self._txn is None or self._standalone:
            self._ensure_txn(event)
            return self._end(event)
        return []

    def _ddl(self, event: Any, statement: Statement, sql: str) -> list[ChangeEvent]:
        tables = self._captured(statement)
        if tables is None:
            return self._statement_done(event)
        txn_open = self._txn is not None
        self._ensure_txn(event)
        if not txn_open:
            self._standalone = True
        if sql.rstrip().upper().endswith("START TRANSACTION"):
            self._standalone = False  # MySQL 8 atomic CREATE TABLE ... SELECT
        if self._standalone:
            return self._finish(self._here(event), (tables, sql))
        # DDL inside a transaction (MariaDB CREATE TABLE ... SELECT): a DDL event ends a
        # transaction, so it is emitted at the transaction's end, after its rows.
        self._pending_ddl.append((tables, sql))
        return []

    def _captured(self, statement: Statement) -> list[tuple[str, str]] | None:
        """Every captured (db, table) a DDL statement names, each once and in order (``[(db,
        "")]`` for one naming no table), or None when filtered out."""
        tables = self._tables
        if statement.tables:
            named = [(db, t) for db, t in dict.fromkeys(statement.tables) if tables.captures(db, t)]
            return named or None
        if tables.matches_database(statement.database):
            return [(statement.database, "")]
        return None

    def _xa_query(self, event: Any, sql: str) -> list[ChangeEvent]:
        verb, xid = xa_statement(sql)
        if verb in ("START", "BEGIN"):
            # MySQL: the group ends with XA PREPARE (held until XA COMMIT) or, one phase,
            # with an XA_prepare event flagged one_phase (committed there).
            self._ensure_txn(event)
            self._standalone = False
            self._xa.hold = True
            return []
        if verb == "END":
            self._xa.xid = xid
            return []
        if verb not in ("COMMIT", "ROLLBACK"):
            return []
        if self._txn is not None and not self._standalone:
            return self._end(event)  # one-phase XA inside its own group
        return self._xa_resolve(event, verb, xid)

    def _xa_resolve(self, event: Any, verb: str, xid: str) -> list[ChangeEvent]:
        """The group that commits or rolls back an earlier XA PREPARE: a commit's rows are
        the prepared ones, at this group's position, in the order the server commits."""
        txn = self._ensure_txn(event)
        prepared = self._xa.rows_of(xid)
        if verb == "ROLLBACK":
            self._txn = replace(txn, xa_resolves=xid)
            return self._end(event)
        if prepared is None:
            log.warning(
                "XA COMMIT %s at %s: its XA PREPARE is before where this destination started "
                "reading, so its rows are not captured (re-snapshot the tables it changed)",
                xid,
                self._here(event),
            )
            return self._end(event)
        txn = replace(txn, xa_resolves=xid)
        self._txn = txn
        self._held.events = XaState.committed(prepared, txn, self._here(event), self._skip)
        self._index = len(prepared)
        return self._end(event)

    def _xa_prepare(self, event: Any) -> list[ChangeEvent]:
        """End of an XA group: MySQL's one-phase commit, or a prepared transaction whose rows
        wait for the XA COMMIT (they are not committed yet)."""
        if event.one_phase:
            return self._end(event)
        txn = self._txn
        if txn is None:
            return []
        if self._held.streaming:
            raise SourceError(
                f"XA transaction {txn_name(txn.gtid, txn.start)} was prepared at "
                f"{self._here(event)} after its rows were passed on as committed"
            )
        self._xa.prepare(txn, self._held.take_held(), str(event.xid))
        self._close(self._here(event), txn)
        return []

    def _unknown(self, event: Any) -> list[ChangeEvent]:
        event_type = event.packet.event_type
        refuse_unknown_event(event_type, self._here(event))
        if event_type == ANONYMOUS_GTID_EVENT:
            return self._begin(event, None, standalone=True)
        return []
