"""The binlog source: MySQL/MariaDB row changes as a stream of ChangeEvents.

With :mod:`.transactions`, :mod:`.table_maps`, :mod:`.rows_framing` and :mod:`.decode_pool`,
the only modules that import pymysqlreplication. The library frames the replication stream and
parses table maps, except for the rows events of known tables, framed from the raw packets by
:mod:`.rows_framing` (and decoded in worker processes by :mod:`.decode_pool` when
``decode_workers`` is not 1, all but the small ones); everything with a correctness consequence
is decided by these:

- transaction boundaries (MariaDB's GTID event instead of BEGIN, XidEvent or a ``COMMIT``
  query at the end, DDL on its own) and the resume positions that follow from them
  (:mod:`.transactions`);
- row values, decoded from the rows-event bytes by :mod:`cdc_platform.source.values` because
  the library's decoding loses data (docs/types.md), with the table maps of :mod:`.table_maps`;
- reconnection: the library silently reconnects from the end of the last event it read,
  which may be in the middle of a transaction and, with GTIDs, from the original start GTID.
  The source refuses that reconnect and restarts the reader itself from the last transaction
  boundary it fully emitted, skipping the events of a half-emitted transaction;
- a purged binlog or GTID gap at start fails loudly (BinlogGapError) instead of skipping.
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import threading
import time
from collections.abc import Callable, Generator, Iterator
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from pydantic import SecretStr
from pymysqlreplication import BinLogStreamReader
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

from cdc_platform.config.source import SourceConfig
from cdc_platform.config.start import StartConfig
from cdc_platform.errors import SourceError, SourceServerChangedError
from cdc_platform.events import (
    ChangeEvent,
    PreparedXa,
    ResumePosition,
    ServerIdentity,
)
from cdc_platform.source.binlog_server import BinlogServer, SourceInfo
from cdc_platform.source.filters import TableFilter, filter_fingerprint
from cdc_platform.source.mysql import Connection, connection_over, library_connection
from cdc_platform.source.mysql_errors import GAP_ADVICE, STREAM_ERRORS, StreamLostError
from cdc_platform.source.stream.ddl_index import DUMP_WRITE_TIMEOUT, DdlIndex, LaterStatement
from cdc_platform.source.stream.decode_pool import DecodePool, StreamHooks, ordered_events
from cdc_platform.source.stream.rows_framing import FramingReader
from cdc_platform.source.stream.start_position import resolve_start
from cdc_platform.source.stream.table_maps import JSON_VALID_CHECK, Catalog, TablePlans, enum_labels
from cdc_platform.source.stream.transactions import TransactionAssembler
from cdc_platform.source.stream.xa import XaAge, aging_prepared
from cdc_platform.source.stream.xa_failover import prepared_here, relocate_held
from cdc_platform.source.stream.xa_rows import XaBudget, XaRows

__all__ = ["BinlogSource", "SourceInfo"]

_READING_PREPARED = "reading a prepared XA transaction from"

log = logging.getLogger("cdc_platform.source")

_R = TypeVar("_R")

_READER_EVENTS = [
    RotateEvent,
    MariadbGtidEvent,
    GtidEvent,
    QueryEvent,
    XidEvent,
    TableMapEvent,
    WriteRowsEvent,
    UpdateRowsEvent,
    DeleteRowsEvent,
    PartialUpdateRowsEvent,
    XAPrepareEvent,
    HeartbeatLogEvent,
    NotImplementedEvent,
]
"""Everything the source acts on. NotImplementedEvent is kept (not filtered, the library's
default) so that event types the library cannot decode are noticed instead of dropped."""


class BinlogSource:
    """Reads one server's binlog as ChangeEvents, from a resume position or the current end.

    ``events()`` is a blocking generator meant for one reader thread; ``stop()`` may be
    called from any thread and ends it promptly. ``reconnects`` counts the times the stream
    was lost and re-established from the last fully emitted transaction boundary. ``server``
    is the identity of the server the events come from, set before the first event of each
    connection and named in each transaction read on it (``Transaction.server``, so that a
    checkpoint names it): a file/position resume on another server is refused
    (SourceServerChangedError), a GTID resume continues there. ``decode_pool``: the worker
    pool to decode rows events in (None: one of ``decode_workers`` processes, or none for 1);
    the source closes it when it ends.
    """

    def __init__(  # noqa: PLR0913 (the config, then keyword-only options)
        self,
        config: SourceConfig,
        *,
        resume: ResumePosition | None = None,
        password: str | SecretStr | None = None,
        clock: Callable[[], float] = time.monotonic,
        heartbeats: bool = False,
        lean_framing: bool = True,
        decode_pool: DecodePool | None = None,
    ) -> None:
        self.config = config
        self._heartbeats = heartbeats
        """Emit an idle COMMIT on each server heartbeat (the streaming runtime asks for them)."""
        self.resume = resume
        self.reconnects = 0
        self.binlog_server = BinlogServer(config, password)
        """The server's questions and the MySQL boundary every connection goes through."""
        self._clock = clock
        self._tables = TableFilter(config.include_tables, config.exclude_tables)
        self._filters = filter_fingerprint(config.include_tables, config.exclude_tables)
        self._stop = threading.Event()
        self._sock_lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._stream_thread: int | None = None
        self._control: Connection | None = None
        self._history = DdlIndex()
        self._delay = config.reconnect_initial_seconds
        self.server: ServerIdentity | None = None
        self._lean_framing = lean_framing
        self._xa_budget = XaBudget(config.xa_memory_bytes)
        self._assembling: TransactionAssembler | None = None
        self._xa_age = XaAge(self.binlog_server.retention_seconds, self._where)
        workers = config.decode_processes()
        if decode_pool is None and workers > 1:
            decode_pool = DecodePool(workers)
        self._pool = decode_pool
        """Rows events decoded in worker processes (lean framing only), or in this thread."""
        if not lean_framing:
            self._pool = None
        """Frame the rows events of known tables from the raw packets (:mod:`.rows_framing`);
        False leaves every event to the library (the reference the lean path is tested on)."""

    # -- the server ----------------------------------------------------------------------------

    def _where(self) -> str:
        return self.binlog_server.where()

    def _mariadb(self) -> bool:
        return self.binlog_server.is_mariadb()

    def check(self) -> SourceInfo:
        """Verify binlog settings and grants; SourceSettingsError lists every problem and fix."""
        return self.binlog_server.check()

    def current_position(self) -> ResumePosition:
        """The server's current binlog end, as a position to start reading from."""
        return self.binlog_server.current_position()

    def start_position(self, start: StartConfig) -> ResumePosition:
        """Where a destination without a checkpoint begins: ``start`` resolved on the server."""
        return resolve_start(self.binlog_server, start)

    def _same_server(
        self, position: ResumePosition, recorded: ServerIdentity | None
    ) -> ServerIdentity:
        """Check that ``position`` may be read on the server now behind the address.

        File/position coordinates recorded on another server are refused; with a GTID state
        to resume from, reading continues on the new server (a promoted replica). Positions
        recorded before identities were kept (``recorded`` None) are accepted as they are.
        """
        found = self.binlog_server.identity()
        if recorded is not None and not recorded.same_server(found):
            if not self._use_gtid(position):
                raise SourceServerChangedError(
                    f"{position.file}:{position.pos} is a position in the binlog of "
                    f"{recorded}, but {self._where()} is {found}: the source primary was "
                    f"switched, and a binlog of the same name on another server holds other "
                    "transactions, so reading it from this position would lose or repeat "
                    "changes. To continue on the new server, resume by GTID (source.resume_by: "
                    "gtid, MariaDB; the checkpoint's GTID state is "
                    f"{position.gtid_set or 'unknown'}), or take a new snapshot "
                    "(cdc-platform snapshot); if this is the same server with a new server_id, "
                    "reset the checkpoint",
                    recorded=str(recorded),
                    found=str(found),
                )
            log.warning(
                "the binlog position %s was recorded on %s; %s is %s: continuing there by GTID",
                position,
                recorded,
                self._where(),
                found,
            )
        elif recorded is None and self.server is None:
            log.info(
                "%s has no server identity; recording %s from the next commit", position, found
            )
        self.server = found
        return found

    def _prepare(self, start: ResumePosition) -> ResumePosition:
        """Refuse a start position whose binlog is gone or that another server recorded;
        fill in the GTID state if missing."""
        self._same_server(start, start.server)
        return self.binlog_server.check_start(start, by_gtid=self._use_gtid(start))

    def _use_gtid(self, start: ResumePosition) -> bool:
        return self.config.resume_by == "gtid" and start.gtid_set is not None and self._mariadb()

    def events(self) -> Generator[ChangeEvent, None, None]:
        """Blocking generator of change events, from the resume position or the current end.

        Ends when :meth:`stop` is called. Server loss is retried forever with exponential
        backoff (each attempt logged); a purged position or bad settings raise SourceError.
        """
        for events in self.event_lists():
            yield from events

    def event_lists(self) -> Generator[list[ChangeEvent], None, None]:
        """:meth:`events` in the non-empty lists the binlog's events produce (mostly a whole
        transaction each), so a consumer can store them with one call. Decode workers start
        at the first rows event sent to them (never, for a stream of small events)."""
        try:
            yield from self._events()
        finally:
            if self._pool is not None:
                self._pool.close()

    def _events(self) -> Generator[list[ChangeEvent], None, None]:
        start = self._until_reachable(lambda: self._prepare(self.resume or self.current_position()))
        if start is None:
            return
        if self.config.resume_by == "gtid" and not self._use_gtid(start):
            log.warning("no GTID state to resume from; resuming by file/position from %s", start)
        plans = TablePlans(
            self._tables, self._catalog, is_mariadb=self._mariadb(), later=self._later
        )
        assembler = self._assembler(start, plans)
        self._delay = self.config.reconnect_initial_seconds
        position = start
        while not self._stop.is_set():
            # The address may lead to another server now (a switched primary).
            if self.reconnects and not self._recheck_server(position, assembler):
                return
            assembler.server = self.server  # named in each transaction of this connection
            reader = self._reader(position, plans)
            plans.attach(reader)
            lost = False
            try:
                yield from self._stream(reader, assembler)
                return
            except STREAM_ERRORS as exc:
                if self._stop.is_set():
                    return
                lost = True
                position = self._lost(exc, assembler, position)
                if self._stop.wait(self._delay):
                    return
                self._delay = min(self._delay * 2, self.config.reconnect_max_seconds)
            except SourceError:
                raise
            except Exception as exc:
                if self._stop.is_set():
                    return
                raise self._unexpected(exc, position) from exc
            finally:
                # Ending (stop, consumer gone, error): end the server's dump thread too.
                self._close(reader, end_dump_thread=not lost)

    def _recheck_server(self, position: ResumePosition, assembler: TransactionAssembler) -> bool:
        """After a reconnect: another server behind the address is refused (file/position) or
        followed by GTID, with the held XA transactions' places in its binlog
        (:func:`.xa_failover.relocate_held`); False once stopped."""
        before = self.server

        def check() -> bool:
            found = self._same_server(position, self.server)
            return relocate_held(self.binlog_server, assembler, before, found)

        return self._until_reachable(check) is not None

    def _unexpected(self, exc: Exception, position: ResumePosition) -> SourceError:
        """The error ending the stream for a failure that is not the server's going away."""
        where = f"the binlog of {self._where()} after {position}"
        if isinstance(exc, BrokenProcessPool):
            return SourceError(
                f"a decode worker process ended abruptly (killed, or out of memory) while "
                f"reading {where}: {exc!r}; the next run starts new workers and resumes after "
                "the last committed batch (decode_workers: 1 decodes in the reader thread)"
            )
        return SourceError(f"cannot read {where}: {exc!r}")

    def _assembler(self, start: ResumePosition, plans: TablePlans) -> TransactionAssembler:
        """The assembler for a stream from ``start``, holding the rows of the XA transactions
        prepared before it (read again from their prepared groups; found by GTID when the
        checkpoint was taken on another server, :mod:`.xa_failover`)."""
        start = prepared_here(self.binlog_server, start, self.server)
        assembler = TransactionAssembler(
            start,
            self._tables,
            plans,
            clock=self._clock,
            filters=self._filters,
            heartbeats=self._heartbeats,
            xa_budget=self._xa_budget,
        )
        if start.xa_prepared:
            self._warn_aging(start.xa_prepared)
        for xa in start.xa_prepared:
            assembler.adopt_prepared(xa, *self._read_prepared(xa))
        self._assembling = assembler
        return assembler

    def _warn_aging(self, prepared: tuple[PreparedXa, ...]) -> None:
        """Say loudly when a prepared XA transaction's group is in the oldest retained binlog
        (:func:`.xa.aging_prepared`): someone must commit or roll it back before it is purged."""
        logs = [str(row[0]) for row in self.binlog_server.query("SHOW BINARY LOGS")]
        for xa in aging_prepared(prepared, logs):
            log.warning(
                "XA transaction %s, prepared at %s:%s and still not committed or rolled back, "
                "is in the oldest binlog %s retains: once it is purged this destination cannot "
                "restart (its rows are read again from there); resolve it on the server (XA "
                "RECOVER, then XA COMMIT or XA ROLLBACK) or keep the binlogs longer",
                xa.xid,
                xa.file,
                xa.pos,
                self._where(),
            )

    @property
    def xa_memory_bytes(self) -> int:
        """What the held rows of prepared XA transactions keep in memory now (the rest is
        spilled, :mod:`.xa_rows`)."""
        return self._xa_budget.in_memory

    def oldest_prepared_xa_age(self) -> float | None:
        """Seconds since the longest-prepared XA transaction this stream holds was prepared,
        None when none is held; warns as it ages toward the binlog retention
        (:class:`.xa.XaAge`)."""
        assembler = self._assembling
        return self._xa_age.age(assembler.oldest_prepared() if assembler else None, time.time())

    def _until_reachable(self, step: Callable[[], _R]) -> _R | None:
        """``step`` (queries before a binlog read), retried with the reconnect backoff while
        the server cannot be reached; None once :meth:`stop` was called."""
        while True:
            try:
                return step()
            except SourceError as exc:
                if not exc.transient or self._stop.is_set():
                    raise
                log.warning("%s; retrying in %.1fs", exc, self._delay)
                if self._stop.wait(self._delay):
                    return None
                self._delay = min(self._delay * 2, self.config.reconnect_max_seconds)

    def _stream(
        self, reader: BinLogStreamReader, assembler: TransactionAssembler
    ) -> Iterator[list[ChangeEvent]]:
        """Event lists of one reader until stop() (returns) or the connection is lost
        (raises)."""
        if self._pool is not None:
            hooks = StreamHooks(reader.fetchone, self._stop, self._reset_delay, self._more_waiting)
            yield from ordered_events(hooks, assembler, self._pool)
            return
        fetch = reader.fetchone
        feed = assembler.feed
        stop = self._stop
        while not stop.is_set():
            event = fetch()
            if event is None:
                raise StreamLostError("the server ended the binlog stream")
            self._delay = self.config.reconnect_initial_seconds
            out = feed(event)
            if out:
                yield out

    def _reset_delay(self) -> None:
        self._delay = self.config.reconnect_initial_seconds

    def _more_waiting(self) -> bool:
        """Whether more of the binlog stream has arrived than was read (the socket has data)."""
        sock = self._sock
        if sock is None:
            return False
        try:
            readable, _, _ = select.select([sock], [], [], 0)
        except (OSError, ValueError):
            return False
        return bool(readable)

    def _read_prepared(self, xa: PreparedXa) -> tuple[XaRows, int]:
        """The rows of an XA transaction prepared before the resume position and committed
        after it: its group is read again from its start, up to its XA PREPARE."""
        start = ResumePosition(xa.file, xa.pos)
        plans = TablePlans(
            self._tables, self._catalog, is_mariadb=self._mariadb(), later=self._later
        )
        assembler = TransactionAssembler(
            start, self._tables, plans, clock=self._clock,
            filters=self._filters, xa_budget=self._xa_budget,
        )  # fmt: skip
        try:
            reader = self._reader(start, plans)
        except STREAM_ERRORS as exc:
            raise self.binlog_server.mysql.error(
                exc, "reading a prepared XA transaction from", start
            ) from None
        plans.attach(reader)
        try:
            while not self._stop.is_set():
                event = reader.fetchone()
                if event is None:
                    break
                assembler.feed(event)
                held = assembler.prepared_rows(xa.xid)
                if held is not None:
                    return held
                if isinstance(event, (XidEvent, XAPrepareEvent)):
                    break  # the group at that position ended without preparing this XID
        except STREAM_ERRORS as exc:
            raise self.binlog_server.mysql.error(
                exc, "reading a prepared XA transaction from", start
            ) from None
        finally:
            self._close(reader, end_dump_thread=True)
        raise SourceError(
            f"XA transaction {xa.xid} is listed as prepared at {xa.file}:{xa.pos} in the "
            f"checkpoint, but its XA PREPARE is not there; {GAP_ADVICE}"
        )

    def _lost(
        self, exc: BaseException, assembler: TransactionAssembler, read_from: ResumePosition
    ) -> ResumePosition:
        """Where to reconnect after a loss; raises if reconnecting cannot help (bad grants,
        a refused position, another reader with this server_id)."""
        error = self.binlog_server.mysql.error(exc, "streaming the binlog of", read_from)
        if not error.transient:
            raise error from None
        position = assembler.restart()
        self.reconnects += 1
        log.warning(
            "binlog stream from %s lost (%s); reconnect %d in %.1fs from %s",
            self._where(),
            exc,
            self.reconnects,
            self._delay,
            position,
        )
        return position

    def stop(self) -> None:
        """End :meth:`events` promptly, from any thread, even while it blocks or backs off."""
        self._stop.set()
        with self._sock_lock:
            sock = self._sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # wakes a recv() blocked in the reader thread

    @property
    def stopped(self) -> bool:
        """True once :meth:`stop` was called."""
        return self._stop.is_set()

    def _reader(self, start: ResumePosition, plans: TablePlans) -> BinLogStreamReader:
        # Heartbeats arrive every heartbeat_seconds when idle: silence for several periods
        # means the server or the network is gone. The server waits DUMP_WRITE_TIMEOUT for a
        # reader that is busy (a DDL history scan, :mod:`.ddl_index`) before dropping it.
        settings = self.binlog_server.mysql.stream_settings(
            read_timeout=max(4 * self.config.heartbeat_seconds, 10.0)
        ) | {"init_command": f"SET SESSION net_write_timeout = {DUMP_WRITE_TIMEOUT}"}
        mode: dict[str, Any]
        if self._use_gtid(start):
            # The library ignores log_file/log_pos when is_mariadb=True; GTID needs auto_position.
            mode = {"is_mariadb": True, "auto_position": start.gtid_set}
        else:
            mode = {"is_mariadb": False, "log_file": start.file, "log_pos": start.pos}
        if self._lean_framing:
            mode["known"] = plans.knows
        log.info("reading the binlog of %s from %s", self._where(), start)
        return (FramingReader if self._lean_framing else BinLogStreamReader)(
            connection_settings=settings,
            server_id=self.config.server_id,
            resume_stream=True,
            blocking=True,
            only_events=_READER_EVENTS,
            filter_non_implemented_events=False,
            # See TablePlans: table maps are parsed once per table id, and re-parsed after
            # every rotation and DDL.
            freeze_schema=True,
            slave_heartbeat=self.config.heartbeat_seconds,
            pymysql_wrapper=self._stream_connector(),
            enable_logging=False,
            **mode,
        )

    def _stream_connector(self) -> Callable[..., Connection]:
        """pymysql factory for one reader: opens its socket so stop() can shut it down,
        and refuses the library's own reconnect (it would resume mid-transaction)."""
        opened = False

        def connect(**kwargs: Any) -> Connection:
            nonlocal opened
            if kwargs.get("db") == "information_schema":  # the library's control connection
                return library_connection(kwargs)
            if opened:
                raise StreamLostError("binlog connection lost")
            opened = True
            sock = self.binlog_server.mysql.open_socket()
            with self._sock_lock:
                if self._stop.is_set():
                    sock.close()
                    raise StreamLostError("stopped")
                self._sock = sock
            conn = connection_over(sock, kwargs)
            with self._sock_lock:
                self._stream_thread = conn.thread_id()  # type: ignore[no-untyped-call]  # pymysql's thread_id has no annotations
            return conn

        return connect

    def _close(self, reader: BinLogStreamReader, *, end_dump_thread: bool) -> None:
        with self._sock_lock:
            self._sock = None
            thread_id, self._stream_thread = self._stream_thread, None
        try:
            reader.close()
        except Exception:  # closing a dead connection may fail in many ways
            log.debug("closing the binlog reader failed", exc_info=True)
        if thread_id is not None and end_dump_thread:
            self._end_dump_thread(thread_id)
        if self._control is not None:
            try:
                self._control.close()
            except Exception:
                log.debug("closing the control connection failed", exc_info=True)
            self._control = None

    def _end_dump_thread(self, thread_id: int) -> None:
        """When reading ends, end the server's binlog dump thread now rather than at its next
        heartbeat: until then it pins its binlog file against PURGE BINARY LOGS. A user may
        always kill its own connections; failures only mean the thread is gone already."""
        self.binlog_server.end_connection(thread_id)

    def _later(self, file: str, pos: int) -> list[LaterStatement]:
        """The binlog's DDL after ``file``:``pos``, kept over reconnects (:mod:`.ddl_index`)."""
        self._control = self._control or self.binlog_server.connect()
        return self._history.after(self._control, self.server, file, pos)

    def _catalog(self, db: str, table: str) -> Catalog:
        """What the binlog's table map cannot say about a table, from information_schema."""
        self._control = self._control or self.binlog_server.connect()
        catalog = Catalog()
        with self._control.cursor() as cur:
            cur.execute(
                "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE FROM information_schema.COLUMNS "
                "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
                (db, table),
            )
            names: list[str] = []
            for name, data_type, column_type in cur.fetchall():
                names.append(str(name))
                if data_type in ("enum", "set"):
                    catalog.labels[str(name)] = enum_labels(str(column_type))
                elif data_type in ("uuid", "inet4", "inet6"):
                    catalog.logical[str(name)] = str(data_type)
            catalog.columns = tuple(names)
            cur.execute(
                "SELECT UNIX_TIMESTAMP(CREATE_TIME) FROM information_schema.TABLES "
                "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                (db, table),
            )
            row = cur.fetchone()
            if row is not None and row[0] is not None:
                catalog.defined_at = int(row[0])
            if self._mariadb():
                cur.execute(
                    "SELECT CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS "
                    "WHERE CONSTRAINT_SCHEMA = %s AND TABLE_NAME = %s",
                    (db, table),
                )
                for (clause,) in cur.fetchall():
                    match = JSON_VALID_CHECK.fullmatch(str(clause).strip())
                    if match:
                        catalog.logical[match.group(1).replace("``", "`")] = "json"
        return catalog
