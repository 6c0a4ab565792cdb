"""The binlog source: MySQL/MariaDB row changes as a stream of ChangeEvents.

With :mod:`.transactions` and :mod:`.table_maps`, the only modules that import
pymysqlreplication. The library frames the replication stream and parses table maps;
everything with a correctness consequence is decided by these three:

- transaction boundaries (MariaDB's GTID event instead of BEGIN, XidEvent or a ``COMMIT``
  query at the end, DDL on its own) and the resume positions that follow from them
  (:mod:`.transactions`);
- row values, decoded from the rows-event bytes by :mod:`cdc_platform.source.values` because
  the library's decoding loses data (FACTS.md), with the table maps of :mod:`.table_maps`;
- reconnection: the library silently reconnects from the end of the last event it read,
  which may be in the middle of a transaction and, with GTIDs, from the original start GTID.
  The source refuses that reconnect and restarts the reader itself from the last transaction
  boundary it fully emitted, skipping the events of a half-emitted transaction;
- a purged binlog or GTID gap at start fails loudly (BinlogGapError) instead of skipping.
"""

from __future__ import annotations

import contextlib
import logging
import re
import socket
import struct
import threading
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import pymysql
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

from cdc_platform.config.models import SourceConfig
from cdc_platform.errors import (
    BinlogGapError,
    BinlogReadError,
    ServerIdConflictError,
    SourceConnectionError,
    SourceError,
    SourceServerChangedError,
    SourceSettingsError,
)
from cdc_platform.events import (
    BinlogPosition,
    ChangeEvent,
    PreparedXa,
    ResumePosition,
    ServerIdentity,
)
from cdc_platform.source.filters import TableFilter
from cdc_platform.source.table_maps import JSON_VALID_CHECK, Catalog, TablePlans, enum_labels
from cdc_platform.source.transactions import (
    GAP_ADVICE,
    TransactionAssembler,
    filter_fingerprint,
)

__all__ = ["BinlogSource", "SourceInfo"]

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


_ACCESS_DENIED = frozenset({1045, 1698})
_NO_PRIVILEGE = frozenset({1044, 1142, 1227, 1370})
_BINLOG_DUMP_ERROR = 1236
_SAME_SERVER_ID = 4052
"""MariaDB's ER_SLAVE_SAME_ID, sent to the older of two dumps with one server_id."""
_PARSE_ERROR = 1064
_SAME_ID_TEXT = "same server_uuid/server_id"
"""MySQL sends this conflict as error 1236 with this text."""
_GAP_TEXT = re.compile(
    r"could not find (first log file|gtid)|purged|impossible position"
    r"|not in the master's binlog",
    re.I,
)
"""1236 messages (MariaDB and MySQL) that mean the position is no longer, or never was, in the
server's binlog; every other 1236 is a read error (see :func:`_dump_refusal`)."""


class _StreamLostError(Exception):
    """The binlog connection is gone; the reader must be recreated from a boundary."""


_STREAM_LOST = (
    pymysql.err.OperationalError,
    pymysql.err.InterfaceError,
    pymysql.err.InternalError,
    OSError,
    EOFError,
    struct.error,
    _StreamLostError,
)
"""Errors after which a new connection may succeed (server restart, network loss)."""


@dataclass(frozen=True, slots=True)
class SourceInfo:
    """What :meth:`BinlogSource.check` found on the server."""

    version: str
    is_mariadb: bool
    server_id: int
    position: BinlogPosition
    """The server's current binlog end (SHOW MASTER STATUS)."""
    gtid_binlog_pos: str | None
    gtid_current_pos: str | None
    server: ServerIdentity | None = None
    """Which server this is; recorded with every checkpoint (see :class:`ServerIdentity`)."""


class BinlogSource:
    """Reads one server's binlog as ChangeEvents, from a resume position or the current end.

    ``events()`` is a blocking generator meant for one reader thread; ``stop()`` may be
    called from any thread and ends it promptly. ``reconnects`` counts the times the stream
    was lost and re-established from the last fully emitted transaction boundary. ``server``
    is the identity of the server the events come from, set before the first event of each
    connection: a file/position resume on another server is refused
    (SourceServerChangedError), a GTID resume continues there.
    """

    def __init__(
        self,
        config: SourceConfig,
        *,
        resume: ResumePosition | None = None,
        password: str | SecretStr | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.resume = resume
        self.reconnects = 0
        self._password = password
        self._clock = clock
        self._tables = TableFilter(config.include_tables, config.exclude_tables)
        self._filters = filter_fingerprint(config.include_tables, config.exclude_tables)
        self._stop = threading.Event()
        self._sock_lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._stream_thread: int | None = None
        self._control: pymysql.connections.Connection[Any] | None = None
        self._is_mariadb: bool | None = None
        self._delay = config.reconnect_initial_seconds
        self.server: ServerIdentity | None = None

    # -- connections ---------------------------------------------------------------------------

    def _secret(self) -> str:
        if self._password is None:
            self._password = self.config.password()
        if isinstance(self._password, SecretStr):
            return self._password.get_secret_value()
        return self._password

    def _where(self) -> str:
        return f"{self.config.host}:{self.config.port} as {self.config.user!r}"

    def _error(
        self, exc: BaseException, doing: str, position: ResumePosition | None = None
    ) -> SourceError:
        """Translate a pymysql/socket error; the password never appears in the message.

        ``position`` is where the refused binlog read started, named in dump errors.
        """
        code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
        text = str(exc.args[1]) if code is not None and len(exc.args) > 1 else str(exc)
        text = text.rstrip(".")
        secret = self._secret()
        if secret:
            text = text.replace(secret, "***")
        if code in _ACCESS_DENIED:
            error: SourceError = SourceConnectionError(
                f"access denied {doing} {self._where()}: {text}; check the user and the "
                f"password in ${self.config.password_env}"
            )
            error.transient = False
            return error
        if code in _NO_PRIVILEGE:
            return SourceSettingsError(
                f"user {self.config.user!r} lacks a privilege {doing}: {text}; run GRANT "
                f"SELECT, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO '{self.config.user}'@'%'"
            )
        if code == _SAME_SERVER_ID or (code == _BINLOG_DUMP_ERROR and _SAME_ID_TEXT in text):
            server_id = self.config.server_id
            return ServerIdConflictError(
                f"{self._where()} ended the binlog dump: another reader connected with the same "
                f"server_id {server_id} (error {code}: {text}). Two readers with one server_id "
                "end each other's dumps; give every destination and every replica its own "
                "server_id (source.server_id), or stop the other process reading as this "
                "destination",
                server_id=server_id,
            )
        if code == _BINLOG_DUMP_ERROR:
            return _dump_refusal(self._where(), text, position)
        return SourceConnectionError(f"cannot reach MySQL/MariaDB {doing} {self._where()}: {text}")

    def _connect(self) -> pymysql.connections.Connection[Any]:
        try:
            return pymysql.connect(
                host=self.config.host,
                port=self.config.port,
                user=self.config.user,
                password=self._secret(),
                connect_timeout=self.config.connect_timeout_seconds,
                read_timeout=max(30.0, self.config.connect_timeout_seconds),
                autocommit=True,
                charset="utf8mb4",
            )
        except (pymysql.MySQLError, OSError) as exc:
            raise self._error(exc, "connecting to") from None

    def _query(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """One query on a short-lived connection (settings checks, positions)."""
        with self._connect() as conn, conn.cursor() as cur:
            try:
                cur.execute(sql, args)
                return list(cur.fetchall())
            except (pymysql.MySQLError, OSError) as exc:
                raise self._error(exc, "querying") from None

    # -- checks --------------------------------------------------------------------------------

    def check(self) -> SourceInfo:
        """Verify binlog settings and grants; SourceSettingsError lists every problem and fix."""
        with self._connect() as conn, conn.cursor() as cur:
            try:
                cur.execute("SELECT VERSION(), @@server_id")
                version, server_id = cur.fetchone() or ("", 0)
                cur.execute(
                    "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('log_bin', 'binlog_format', "
                    "'binlog_row_image', 'binlog_row_metadata', 'log_bin_compress', "
                    "'binlog_transaction_compression', 'binlog_row_value_options', "
                    "'gtid_binlog_pos', 'gtid_current_pos')"
                )
                variables = {str(k).lower(): str(v) for k, v in cur.fetchall()}
                cur.execute("SHOW GRANTS")
                grants = [str(row[0]) for row in cur.fetchall()]
                status = self._status_if_allowed(cur) if variables.get("log_bin") == "ON" else None
                is_mariadb = "mariadb" in str(version).lower()
                self._is_mariadb = is_mariadb
                server = _identity(cur, is_mariadb)
            except (pymysql.MySQLError, OSError) as exc:
                raise self._error(exc, "checking") from None
        problems = _settings_problems(variables, is_mariadb)
        if int(server_id) == self.config.server_id:
            problems.append(
                f"the reader's server_id {self.config.server_id} equals the source server's own "
                "server_id; choose another server_id in the destination's source config"
            )
        if self.config.resume_by == "gtid" and not is_mariadb:
            problems.append(
                "resume_by=gtid is supported on MariaDB only; set resume_by: file for MySQL"
            )
        missing = _missing_grants(grants)
        if missing:
            problems.append(
                f"user {self.config.user!r} lacks {', '.join(missing)}; run GRANT "
                f"{', '.join(missing)} ON *.* TO '{self.config.user}'@'%'"
            )
        if problems:
            raise SourceSettingsError(
                f"{self._where()} cannot be used for lossless CDC: " + "; ".join(problems)
            )
        if status is None:
            raise SourceSettingsError(f"{self._where()} reports no binlog position")
        return SourceInfo(
            version=str(version),
            is_mariadb=is_mariadb,
            server_id=int(server_id),
            position=BinlogPosition(str(status[0]), int(status[1])),
            gtid_binlog_pos=variables.get("gtid_binlog_pos"),
            gtid_current_pos=variables.get("gtid_current_pos"),
            server=server,
        )

    @staticmethod
    def _status_if_allowed(cur: Any) -> tuple[Any, ...] | None:
        """SHOW MASTER STATUS, or None without REPLICATION CLIENT (reported with the grants)."""
        try:
            return _binlog_status(cur)
        except pymysql.MySQLError as exc:
            if exc.args and exc.args[0] in _NO_PRIVILEGE:
                return None
            raise

    def _mariadb(self) -> bool:
        if self._is_mariadb is None:
            version = self._query("SELECT VERSION()")[0][0]
            self._is_mariadb = "mariadb" in str(version).lower()
        return self._is_mariadb

    def current_position(self) -> ResumePosition:
        """The server's current binlog end, as a position to start reading from.

        On MariaDB the GTID state comes from ``BINLOG_GTID_POS(file, pos)`` so that file,
        position and GTID state describe the same point even while the server writes.
        """
        with self._connect() as conn, conn.cursor() as cur:
            try:
                status = _binlog_status(cur)
                if status is None:
                    raise SourceSettingsError(
                        "binary logging is off (log_bin=OFF); start the server with "
                        "log_bin=mysql-bin"
                    )
                file, pos = str(status[0]), int(status[1])
                gtid: str | None = None
                if self._mariadb():
                    cur.execute("SELECT BINLOG_GTID_POS(%s, %s)", (file, pos))
                    row = cur.fetchone()
                    gtid = None if row is None or row[0] is None else str(row[0])
                elif len(status) > 4 and status[4]:
                    # MySQL: Executed_Gtid_Set, read with file and position in one statement.
                    gtid = "".join(str(status[4]).split())
                server = _identity(cur, self._mariadb())
            except (pymysql.MySQLError, OSError) as exc:
                raise self._error(exc, "reading the binlog position of") from None
        return ResumePosition(file=file, pos=pos, gtid_set=gtid, server=server)

    def _server_identity(self) -> ServerIdentity:
        with self._connect() as conn, conn.cursor() as cur:
            try:
                return _identity(cur, self._mariadb())
            except (pymysql.MySQLError, OSError) as exc:
                raise self._error(exc, "identifying") from None

    def _same_server(
        self, position: ResumePosition, recorded: ServerIdentity | None
    ) -> ServerIdentity:
        """Check that ``position`` may be read on the server now behind the address.

        File/position coordinates recorded on another server are refused; with a GTID state
        to resume from, reading continues on the new server (a promoted replica). Positions
        recorded before identities were kept (``recorded`` None) are accepted as they are.
        """
        found = self._server_identity()
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
        logs = {str(name): int(size) for name, size, *_ in self._query("SHOW BINARY LOGS")}
        if self._use_gtid(start):
            assert start.gtid_set is not None
            self._check_gtid_gap(start.gtid_set, next(iter(logs)) if logs else None)
        else:
            size = logs.get(start.file)
            if size is None:
                raise BinlogGapError(
                    f"binlog {start.file} was purged; {GAP_ADVICE} (the server's binlogs: "
                    f"{_log_range(list(logs))})"
                )
            if start.pos > size:
                raise BinlogGapError(
                    f"position {start.pos} is beyond the end of {start.file} ({size} bytes): the "
                    f"server's binlog was reset or rewritten; {GAP_ADVICE}"
                )
        if start.gtid_set is None and self._mariadb():
            rows = self._query("SELECT BINLOG_GTID_POS(%s, %s)", (start.file, start.pos))
            if rows and rows[0][0] is not None:
                return ResumePosition(start.file, start.pos, str(rows[0][0]), start.skip_events)
        return start

    def _use_gtid(self, start: ResumePosition) -> bool:
        return self.config.resume_by == "gtid" and start.gtid_set is not None and self._mariadb()

    def _check_gtid_gap(self, gtid_set: str, first_log: str | None) -> None:
        """A GTID state older than the oldest binlog's Gtid_list means purged transactions."""
        if first_log is None:
            raise BinlogGapError(f"the server has no binlog files; {GAP_ADVICE}")
        head = self._query("SHOW BINLOG EVENTS IN %s LIMIT 3", (first_log,))
        oldest = next((_parse_gtids(str(r[5])) for r in head if r[2] == "Gtid_list"), {})
        current = _parse_gtids(str(self._query("SELECT @@GLOBAL.gtid_binlog_pos")[0][0] or ""))
        wanted = _parse_gtids(gtid_set)
        for domain, seq in oldest.items():
            if wanted.get(domain, 0) < seq:
                raise BinlogGapError(
                    f"GTID state {gtid_set or '(empty)'} is older than the oldest binlog "
                    f"{first_log}, which starts after {domain}-{seq}: transactions were purged; "
                    f"{GAP_ADVICE}"
                )
        for domain, seq in wanted.items():
            if seq > current.get(domain, 0):
                raise BinlogGapError(
                    f"GTID state {gtid_set} is ahead of the server's binlog "
                    f"({_format_gtids(current) or 'empty'}): the binlog was reset or this is "
                    f"another server; {GAP_ADVICE}"
                )

    # -- streaming -----------------------------------------------------------------------------

    def events(self) -> Generator[ChangeEvent, None, None]:
        """Blocking generator of change events, from the resume position or the current end.

        Ends when :meth:`stop` is called. Server loss is retried forever with exponential
        backoff (each attempt logged); a purged position or bad settings raise SourceError.
        """
        start = self._until_reachable(lambda: self._prepare(self.resume or self.current_position()))
        if start is None:
            return
        if self.config.resume_by == "gtid" and not self._use_gtid(start):
            log.warning("no GTID state to resume from; resuming by file/position from %s", start)
        plans = TablePlans(self._tables, self._catalog, is_mariadb=self._mariadb())
        assembler = self._assembler(start, plans)
        self._delay = self.config.reconnect_initial_seconds
        position = start
        while not self._stop.is_set():
            if self.reconnects:
                # The address may lead to another server now (a switched primary).
                checked = self._until_reachable(
                    lambda: self._same_server(position, self.server)  # noqa: B023
                )
                if checked is None:
                    return
            reader = self._reader(position)
            plans.attach(reader)
            lost = False
            try:
                yield from self._stream(reader, assembler)
                return
            except _STREAM_LOST as exc:
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
                raise SourceError(
                    f"cannot read the binlog of {self._where()} after {position}: {exc!r}"
                ) from exc
            finally:
                # Ending (stop, consumer gone, error): end the server's dump thread too.
                self._close(reader, end_dump_thread=not lost)

    def _assembler(self, start: ResumePosition, plans: TablePlans) -> TransactionAssembler:
        """The assembler for a stream from ``start``, holding the rows of the XA transactions
        prepared before it (read again from their prepared groups)."""
        assembler = TransactionAssembler(
            start,
            self._tables,
            plans,
            is_mariadb=self._mariadb(),
            clock=self._clock,
            filters=self._filters,
        )
        for xa in start.xa_prepared:
            assembler.adopt_prepared(xa, self._read_prepared(xa))
        return assembler

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
    ) -> Iterator[ChangeEvent]:
        """Events of one reader until stop() (returns) or the connection is lost (raises)."""
        fetch = reader.fetchone
        feed = assembler.feed
        stop = self._stop
        while not stop.is_set():
            event = fetch()
            if event is None:
                raise _StreamLostError("the server ended the binlog stream")
            self._delay = self.config.reconnect_initial_seconds
            out = feed(event)
            if out:
                yield from out

    def _read_prepared(self, xa: PreparedXa) -> list[ChangeEvent]:
        """The rows of an XA transaction prepared before the resume position and committed
        after it: its group is read again from its start, up to its XA PREPARE."""
        start = ResumePosition(xa.file, xa.pos)
        plans = TablePlans(self._tables, self._catalog, is_mariadb=self._mariadb())
        assembler = TransactionAssembler(
            start, self._tables, plans, is_mariadb=self._mariadb(), clock=self._clock,
            filters=self._filters,
        )  # fmt: skip
        try:
            reader = self._reader(start)
        except _STREAM_LOST as exc:
            raise self._error(exc, "reading a prepared XA transaction from", start) from None
        plans.attach(reader)
        try:
            while not self._stop.is_set():
                event = reader.fetchone()
                if event is None:
                    break
                assembler.feed(event)
                rows = assembler.prepared_rows(xa.xid)
                if rows is not None:
                    return rows
                if isinstance(event, (XidEvent, XAPrepareEvent)):
                    break  # the group at that position ended without preparing this XID
        except _STREAM_LOST as exc:
            raise self._error(exc, "reading a prepared XA transaction from", start) from None
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
        error = self._error(exc, "streaming the binlog of", read_from)
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

    def _reader(self, start: ResumePosition) -> BinLogStreamReader:
        settings = {
            "host": self.config.host,
            "port": self.config.port,
            "user": self.config.user,
            "passwd": self._secret(),
            "connect_timeout": self.config.connect_timeout_seconds,
            # Heartbeats arrive every heartbeat_seconds when idle: silence for several
            # periods means the server or the network is gone.
            "read_timeout": max(4 * self.config.heartbeat_seconds, 10.0),
            "charset": "utf8mb4",
        }
        mode: dict[str, Any]
        if self._use_gtid(start):
            # The library ignores log_file/log_pos when is_mariadb=True; GTID needs auto_position.
            mode = {"is_mariadb": True, "auto_position": start.gtid_set}
        else:
            mode = {"is_mariadb": False, "log_file": start.file, "log_pos": start.pos}
        log.info("reading the binlog of %s from %s", self._where(), start)
        return BinLogStreamReader(
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

    def _stream_connector(self) -> Callable[..., pymysql.connections.Connection[Any]]:
        """pymysql factory for one reader: opens its socket so stop() can shut it down,
        and refuses the library's own reconnect (it would resume mid-transaction)."""
        opened = False

        def connect(**kwargs: Any) -> pymysql.connections.Connection[Any]:
            nonlocal opened
            if kwargs.get("db") == "information_schema":  # the library's control connection
                return pymysql.connect(**kwargs)
            if opened:
                raise _StreamLostError("binlog connection lost")
            opened = True
            sock = socket.create_connection(
                (self.config.host, self.config.port), timeout=self.config.connect_timeout_seconds
            )
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            with self._sock_lock:
                if self._stop.is_set():
                    sock.close()
                    raise _StreamLostError("stopped")
                self._sock = sock
            conn = pymysql.connections.Connection(**kwargs, defer_connect=True)
            conn.connect(sock)
            with self._sock_lock:
                self._stream_thread = conn.thread_id()  # type: ignore[no-untyped-call]
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
        try:
            with (
                pymysql.connect(
                    host=self.config.host,
                    port=self.config.port,
                    user=self.config.user,
                    password=self._secret(),
                    connect_timeout=min(self.config.connect_timeout_seconds, 2.0),
                    read_timeout=2.0,
                ) as conn,
                conn.cursor() as cur,
            ):
                cur.execute("KILL CONNECTION %s", (thread_id,))
        except (pymysql.MySQLError, OSError):
            log.debug("ending binlog dump thread %d failed", thread_id, exc_info=True)

    def _catalog(self, db: str, table: str) -> Catalog:
        """What the binlog's table map cannot say about a table, from information_schema."""
        if self._control is None:
            self._control = self._connect()
        catalog = Catalog()
        with self._control.cursor() as cur:
            cur.execute(
                "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE FROM information_schema.COLUMNS "
                "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s "
                "AND DATA_TYPE IN ('uuid', 'inet4', 'inet6', 'enum', 'set')",
                (db, table),
            )
            for name, data_type, column_type in cur.fetchall():
                if data_type in ("enum", "set"):
                    catalog.labels[str(name)] = enum_labels(str(column_type))
                else:
                    catalog.logical[str(name)] = str(data_type)
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


# -- settings helpers ---------------------------------------------------------------------------


def _identity(cur: Any, is_mariadb: bool) -> ServerIdentity:
    """The connected server's identity (see :class:`ServerIdentity`)."""
    if is_mariadb:
        cur.execute("SELECT @@server_id, @@gtid_domain_id")
        server_id, domain = cur.fetchone()
        return ServerIdentity(int(server_id), gtid_domain_id=int(domain))
    cur.execute("SELECT @@server_id, @@server_uuid")
    server_id, uuid = cur.fetchone()
    return ServerIdentity(int(server_id), server_uuid=str(uuid))


def _binlog_status(cur: Any) -> tuple[Any, ...] | None:
    try:
        cur.execute("SHOW MASTER STATUS")
    except pymysql.err.ProgrammingError as exc:  # MySQL 8.4 renamed it
        if exc.args[0] != _PARSE_ERROR:
            raise
        cur.execute("SHOW BINARY LOG STATUS")
    row: tuple[Any, ...] | None = cur.fetchone()
    return row


_REQUIRED_SETTINGS = (
    ("binlog_format", "ROW"),
    ("binlog_row_image", "FULL"),
    ("binlog_row_metadata", "FULL"),
)


def _settings_problems(variables: dict[str, str], is_mariadb: bool) -> list[str]:
    problems: list[str] = []
    if variables.get("log_bin", "OFF").upper() not in ("ON", "1"):
        problems.append(
            "binary logging is off (log_bin=OFF); start the server with log_bin=mysql-bin "
            "and a non-zero server_id"
        )
    for name, wanted in _REQUIRED_SETTINGS:
        value = variables.get(name)
        if value is None:
            problems.append(
                f"the server has no {name} setting; lossless CDC needs MariaDB >= 10.5 or "
                "MySQL >= 8.0.14"
            )
        elif value.upper() != wanted:
            problems.append(f"{name} is {value}; set {name}={wanted} in the server config")
    if is_mariadb and variables.get("log_bin_compress", "OFF").upper() in ("ON", "1"):
        problems.append(
            "log_bin_compress is ON; set log_bin_compress=OFF in the server config "
            "(compressed rows events cannot be decoded)"
        )
    if variables.get("binlog_transaction_compression", "OFF").upper() in ("ON", "1"):
        problems.append(
            "binlog_transaction_compression is ON; set binlog_transaction_compression=OFF "
            "(compressed transactions cannot be decoded)"
        )
    if variables.get("binlog_row_value_options", ""):
        problems.append(
            "binlog_row_value_options is PARTIAL_JSON; set binlog_row_value_options='' "
            "(partial JSON updates are not full row images)"
        )
    return problems


_GRANT = re.compile(r"^GRANT\s+(?P<privs>.+?)\s+ON\s+(?P<scope>\S+)\s+TO\s", re.I | re.S)
_REQUIRED_GRANTS = (
    ("REPLICATION SLAVE", {"REPLICATION SLAVE", "ALL PRIVILEGES", "ALL"}, True),
    (
        "REPLICATION CLIENT",
        {"REPLICATION CLIENT", "BINLOG MONITOR", "SUPER", "ALL PRIVILEGES", "ALL"},
        True,
    ),
    ("SELECT", {"SELECT", "ALL PRIVILEGES", "ALL"}, False),
)


def _missing_grants(grants: list[str]) -> list[str]:
    """Privileges missing from SHOW GRANTS (global ones for replication, any SELECT)."""
    global_privs: set[str] = set()
    any_privs: set[str] = set()
    for line in grants:
        match = _GRANT.match(line)
        if match is None:
            continue
        privs = re.sub(r"\([^)]*\)", "", match["privs"])  # column lists of table grants
        names = {" ".join(p.split()).upper() for p in privs.split(",")}
        any_privs |= names
        if match["scope"] == "*.*":
            global_privs |= names
    return [
        name
        for name, accepted, need_global in _REQUIRED_GRANTS
        if not (accepted & (global_privs if need_global else any_privs))
    ]


def _dump_refusal(where: str, text: str, position: ResumePosition | None) -> SourceError:
    """Error 1236: a gap when the position is gone, otherwise a read error that a new
    snapshot would not cure (the offset is no event start, the binlog is damaged, ...)."""
    start = f" from {position.file}:{position.pos}" if position is not None else ""
    text = text.rstrip(".")
    if _GAP_TEXT.search(text):
        return BinlogGapError(
            f"{where} no longer has the binlog to read{start}: {text}; {GAP_ADVICE}"
        )
    return BinlogReadError(
        f"{where} refused to send its binlog{start}: {text}. The binlog is not purged: the "
        "position is not the start of an event in this server's binlog (a checkpoint made on "
        "another server, or a damaged binlog), or an event is larger than max_allowed_packet. "
        "Check the server's error log; the change log is intact and resumes from the same "
        "position once the cause is fixed"
    )


def _parse_gtids(text: str) -> dict[int, int]:
    """Highest sequence number per domain of a MariaDB GTID list ('[0-1-5,1-2-3]' or bare)."""
    out: dict[int, int] = {}
    for item in text.strip().strip("[]").split(","):
        parts = item.strip().split("-")
        if len(parts) == 3 and all(p.isdigit() for p in parts):
            domain, seq = int(parts[0]), int(parts[2])
            out[domain] = max(seq, out.get(domain, 0))
    return out


def _format_gtids(gtids: dict[int, int]) -> str:
    return ",".join(f"{d}-?-{s}" for d, s in sorted(gtids.items()))


def _log_range(names: list[str]) -> str:
    if not names:
        return "no binlog files"
    return f"{names[0]} to {names[-1]}" if len(names) > 1 else names[0]
