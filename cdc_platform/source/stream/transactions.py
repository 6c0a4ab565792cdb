"""Transaction assembly: binlog events in, ChangeEvents with exact transaction boundaries out.

MariaDB sends a GTID event instead of BEGIN; an XidEvent or a ``COMMIT`` query ends a
transaction; DDL is its own transaction. The assembler also tracks the resume position after
every boundary, so the source can restart from the last transaction it fully emitted.

The state of where assembly is (the open transaction, the last boundary, the quiet and idle
COMMITs) lives in :mod:`.boundaries`; this module says what each event means.

Only committed transactions come out. The rows of a transaction are held back until its end
event (up to a bound, beyond which a big transaction streams so the store can commit it in
chunks), so a group the binlog never ends is dropped rather than captured. A two-phase XA
transaction's rows are held until the server's ``XA COMMIT`` and then emitted as that group's
rows; ``XA ROLLBACK`` drops them. A resume inside a transaction (``skip_events``) is checked
against that transaction's identity and the table filters the skip was counted with.
"""

from __future__ import annotations

import logging
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
    PreparedXa,
    ResumePosition,
)
from cdc_platform.source.filters import (
    Statement,
    StatementKind,
    classify_statement,
    statement_label,
)
from cdc_platform.source.stream.boundaries import AssemblySettings, TransactionBoundaries
from cdc_platform.source.stream.refusals import (
    ANONYMOUS_GTID_EVENT,
    partial_json_error,
    refuse_statement_dml,
    refuse_unknown_event,
    txn_name,
)
from cdc_platform.source.stream.row_changes import row_changes
from cdc_platform.source.stream.rows_framing import (
    UPDATE,
    RowsFrame,
    frame_library_event,
)
from cdc_platform.source.stream.table_maps import TablePlans
from cdc_platform.source.stream.xa import XaState, xa_statement
from cdc_platform.source.stream.xa_rows import XaRows
from cdc_platform.source.values import RowDecoder

log = logging.getLogger("cdc_platform.source")


_MARIADB_FL_STANDALONE = 0x01
"""MariaDB GTID flag: the group is one statement with no COMMIT (DDL and the like)."""
_MARIADB_FL_PREPARED_XA = 0x40
"""MariaDB GTID flag: the group is an XA transaction that ends with XA PREPARE."""

_TABLE_STATEMENTS = frozenset({StatementKind.DDL, StatementKind.ADMIN, StatementKind.DML})
"""Statements after which table ids may describe other table definitions."""

__all__ = ["TransactionAssembler"]


class TransactionAssembler(TransactionBoundaries):
    """Turns the library's events into ChangeEvents with transaction boundaries and indices.

    What each event means (GTID, query, XA, rows, heartbeat) is decided here; what a restart
    needs and what begins and ends a transaction is kept by its base,
    :class:`~.boundaries.TransactionBoundaries`. ``settings`` are the source's
    (:class:`~.boundaries.AssemblySettings`), ``plans`` the table maps of this assembler's reader.
    """

    def __init__(
        self, start: ResumePosition, plans: TablePlans, settings: AssemblySettings
    ) -> None:
        super().__init__(start, plans, settings)
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
        if kind is StatementKind.ADMIN:
            self._passed_over(event, sql)
        return self._statement_done(event)  # DML on tables not captured, ADMIN

    def _passed_over(self, event: Any, sql: str) -> None:
        """Say (once per statement, by its verb only) what the stream read and let pass."""
        log.info(
            "passed over %s at %s: it changes no captured table",
            statement_label(sql),
            self._here(event),
        )

    def _statement_done(self, event: Any) -> list[ChangeEvent]:
        """A statement that emits nothing; it ends its group if the group is that statement."""
        if self._txn is None or self._standalone:
            self._ensure_txn(event)
            return self._end(event)
        return []

    def _ddl(self, event: Any, statement: Statement, sql: str) -> list[ChangeEvent]:
        tables = self._captured(statement)
        if tables is None:
            self._passed_over(event, sql)
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
