"""The binlog source: MySQL/MariaDB row changes as a stream of ChangeEvents.

The only module that imports pymysqlreplication. The library frames the replication stream
and parses table maps; everything with a correctness consequence is decided here:

- transaction boundaries (MariaDB's GTID event instead of BEGIN, XidEvent or a ``COMMIT``
  query at the end, DDL on its own) and the resume positions that follow from them;
- row values, decoded from the rows-event bytes by :mod:`cdc_platform.source.values` because
  the library's decoding loses data (FACTS.md);
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
from dataclasses import dataclass, field
from typing import Any

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
from pymysqlreplication.json_binary import parse_json
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
    SourceConnectionError,
    SourceError,
    SourceSettingsError,
)
from cdc_platform.events import (
    BinlogPosition,
    ChangeEvent,
    EventKind,
    Op,
    ResumePosition,
    Transaction,
)
from cdc_platform.source.filters import Statement, StatementKind, TableFilter, classify_statement
from cdc_platform.source.values import ColumnSpec, FieldType, RowDecoder, python_codec

__all__ = ["BinlogSource", "SourceInfo"]

log = logging.getLogger("cdc_platform.source")

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

_MARIADB_COMPRESSED_EVENTS = frozenset(range(0xA5, 0xAC))
"""QUERY_COMPRESSED and the six *_ROWS_COMPRESSED events (log_bin_compress=ON)."""
_MYSQL_TRANSACTION_PAYLOAD = 0x28
_INCIDENT_EVENT = 0x1A
_ANONYMOUS_GTID_EVENT = 0x22
_MARIADB_FL_STANDALONE = 0x01
"""MariaDB GTID flag: the group is one statement with no COMMIT (DDL and the like)."""

_GAP_ADVICE = (
    "the change log cannot be continued without loss; take a new snapshot "
    "(cdc-platform snapshot) or reset the checkpoint"
)
_ACCESS_DENIED = frozenset({1045, 1698})
_NO_PRIVILEGE = frozenset({1044, 1142, 1227, 1370})
_BINLOG_DUMP_ERROR = 1236
_PARSE_ERROR = 1064

_TABLE_STATEMENTS = frozenset({StatementKind.DDL, StatementKind.ADMIN, StatementKind.DML})
"""Statements after which table ids may describe other table definitions."""

_QUIET_COMMIT_INTERVAL = 1.0
"""Seconds between COMMIT events of transactions whose rows were all filtered out."""


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


class BinlogSource:
    """Reads one server's binlog as ChangeEvents, from a resume position or the current end.

    ``events()`` is a blocking generator meant for one reader thread; ``stop()`` may be
    called from any thread and ends it promptly. ``reconnects`` counts the times the stream
    was lost and re-established from the last fully emitted transaction boundary.
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
        self._stop = threading.Event()
        self._sock_lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._stream_thread: int | None = None
        self._control: pymysql.connections.Connection[Any] | None = None
        self._is_mariadb: bool | None = None
        self._delay = config.reconnect_initial_seconds

    # -- connections ---------------------------------------------------------------------------

    def _secret(self) -> str:
        if self._password is None:
            self._password = self.config.password()
        if isinstance(self._password, SecretStr):
            return self._password.get_secret_value()
        return self._password

    def _where(self) -> str:
        return f"{self.config.host}:{self.config.port} as {self.config.user!r}"

    def _error(self, exc: BaseException, doing: str) -> SourceError:
        """Translate a pymysql/socket error; the password never appears in the message."""
        code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
        text = str(exc)
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
        if code == _BINLOG_DUMP_ERROR:
            return BinlogGapError(f"the server refused the binlog position: {text}; {_GAP_ADVICE}")
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
            except (pymysql.MySQLError, OSError) as exc:
                raise self._error(exc, "checking") from None
        is_mariadb = "mariadb" in str(version).lower()
        self._is_mariadb = is_mariadb
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
            except (pymysql.MySQLError, OSError) as exc:
                raise self._error(exc, "reading the binlog position of") from None
        return ResumePosition(file=file, pos=pos, gtid_set=gtid)

    def _prepare(self, start: ResumePosition) -> ResumePosition:
        """Refuse a start position whose binlog is gone; fill in the GTID state if missing."""
        logs = {str(name): int(size) for name, size, *_ in self._query("SHOW BINARY LOGS")}
        if self._use_gtid(start):
            assert start.gtid_set is not None
            self._check_gtid_gap(start.gtid_set, next(iter(logs)) if logs else None)
        else:
            size = logs.get(start.file)
            if size is None:
                raise BinlogGapError(
                    f"binlog {start.file} was purged; {_GAP_ADVICE} (the server's binlogs: "
                    f"{_log_range(list(logs))})"
                )
            if start.pos > size:
                raise BinlogGapError(
                    f"position {start.pos} is beyond the end of {start.file} ({size} bytes): the "
                    f"server's binlog was reset or rewritten; {_GAP_ADVICE}"
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
            raise BinlogGapError(f"the server has no binlog files; {_GAP_ADVICE}")
        head = self._query("SHOW BINLOG EVENTS IN %s LIMIT 3", (first_log,))
        oldest = next((_parse_gtids(str(r[5])) for r in head if r[2] == "Gtid_list"), {})
        current = _parse_gtids(str(self._query("SELECT @@GLOBAL.gtid_binlog_pos")[0][0] or ""))
        wanted = _parse_gtids(gtid_set)
        for domain, seq in oldest.items():
            if wanted.get(domain, 0) < seq:
                raise BinlogGapError(
                    f"GTID state {gtid_set or '(empty)'} is older than the oldest binlog "
                    f"{first_log}, which starts after {domain}-{seq}: transactions were purged; "
                    f"{_GAP_ADVICE}"
                )
        for domain, seq in wanted.items():
            if seq > current.get(domain, 0):
                raise BinlogGapError(
                    f"GTID state {gtid_set} is ahead of the server's binlog "
                    f"({_format_gtids(current) or 'empty'}): the binlog was reset or this is "
                    f"another server; {_GAP_ADVICE}"
                )

    # -- streaming -----------------------------------------------------------------------------

    def events(self) -> Generator[ChangeEvent, None, None]:
        """Blocking generator of change events, from the resume position or the current end.

        Ends when :meth:`stop` is called. Server loss is retried forever with exponential
        backoff (each attempt logged); a purged position or bad settings raise SourceError.
        """
        start = self._prepare(self.resume or self.current_position())
        if self.config.resume_by == "gtid" and not self._use_gtid(start):
            log.warning("no GTID state to resume from; resuming by file/position from %s", start)
        plans = _TablePlans(self._tables, self._catalog, is_mariadb=self._mariadb())
        assembler = _Assembler(
            start,
            self._tables,
            plans,
            is_mariadb=self._mariadb(),
            clock=self._clock,
        )
        self._delay = self.config.reconnect_initial_seconds
        position = start
        while not self._stop.is_set():
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
                position = self._lost(exc, assembler)
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

    def _stream(self, reader: BinLogStreamReader, assembler: _Assembler) -> Iterator[ChangeEvent]:
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

    def _lost(self, exc: BaseException, assembler: _Assembler) -> ResumePosition:
        """Where to reconnect after a loss; raises if reconnecting cannot help."""
        code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
        if code in _ACCESS_DENIED or code in _NO_PRIVILEGE or code == _BINLOG_DUMP_ERROR:
            raise self._error(exc, "streaming the binlog of") from None
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
            # FACTS.md: is_mariadb=True ignores log_file/log_pos; it needs auto_position.
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
            # See _TablePlans: table maps are parsed once per table id, and re-parsed after
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

    def _catalog(self, db: str, table: str) -> _Catalog:
        """What the binlog's table map cannot say about a table, from information_schema."""
        if self._control is None:
            self._control = self._connect()
        catalog = _Catalog()
        with self._control.cursor() as cur:
            cur.execute(
                "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE FROM information_schema.COLUMNS "
                "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s "
                "AND DATA_TYPE IN ('uuid', 'inet4', 'inet6', 'enum', 'set')",
                (db, table),
            )
            for name, data_type, column_type in cur.fetchall():
                if data_type in ("enum", "set"):
                    catalog.labels[str(name)] = _labels(str(column_type))
                else:
                    catalog.logical[str(name)] = str(data_type)
            if self._mariadb():
                cur.execute(
                    "SELECT CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS "
                    "WHERE CONSTRAINT_SCHEMA = %s AND TABLE_NAME = %s",
                    (db, table),
                )
                for (clause,) in cur.fetchall():
                    match = _JSON_VALID.fullmatch(str(clause).strip())
                    if match:
                        catalog.logical[match.group(1).replace("``", "`")] = "json"
        return catalog


@dataclass
class _Catalog:
    """Column facts from information_schema: MariaDB UUID/INET4/INET6/JSON columns (the binlog
    says BINARY(n) or LONGTEXT) and ENUM/SET labels (the library decodes the table map's
    labels as UTF-8 only, so labels in other charsets come out as '')."""

    logical: dict[str, str] = field(default_factory=dict)
    labels: dict[str, tuple[str, ...]] = field(default_factory=dict)


_LABEL = re.compile(r"'((?:[^']|'')*)'")


def _labels(column_type: str) -> tuple[str, ...]:
    """Labels of "enum('a','it''s')" (information_schema doubles quotes)."""
    inner = column_type[column_type.index("(") + 1 : column_type.rindex(")")]
    return tuple(m.group(1).replace("''", "'") for m in _LABEL.finditer(inner))


_JSON_VALID = re.compile(r"json_valid\(`((?:[^`]|``)+)`\)", re.IGNORECASE)


# -- settings helpers ---------------------------------------------------------------------------


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


# -- table maps ---------------------------------------------------------------------------------

_CHARACTER_TYPES = frozenset(
    {
        FieldType.STRING,
        FieldType.VARCHAR,
        FieldType.VAR_STRING,
        FieldType.BLOB,
        FieldType.TINY_BLOB,
        FieldType.MEDIUM_BLOB,
        FieldType.LONG_BLOB,
    }
)


def _mysql_json(raw: bytes) -> Any:
    """MySQL's binary JSON through the library's parser, with its bytes made text."""
    return _json_safe(parse_json(raw[0], raw[1:]))


def _json_safe(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, dict):
        return {_json_safe(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


class _TablePlans:
    """table id -> RowDecoder for captured tables (None for filtered ones).

    The reader runs with ``freeze_schema=True``: the library then parses a table map only the
    first time it sees the table id, which is most of its per-event cost when transactions
    are single rows. A table gets a new id when its definition changes and ids are only
    meaningful within one server run, but to be safe both maps, the library's and this one,
    are cleared on every rotation (a restart starts a new binlog file) and on every statement
    that is not transaction control (DDL), so the next table map is parsed again.
    """

    def __init__(
        self,
        tables: TableFilter,
        catalog: Callable[[str, str], _Catalog],
        *,
        is_mariadb: bool,
    ) -> None:
        self._tables = tables
        self._lookup = catalog
        self._mariadb = is_mariadb
        self._by_id: dict[int, tuple[tuple[Any, ...], RowDecoder] | None] = {}
        self._catalogs: dict[tuple[str, str], _Catalog] = {}
        self._reader: Any = None

    def attach(self, reader: BinLogStreamReader) -> None:
        """A new reader starts with an empty table map; so does this one."""
        self._reader = reader
        self._by_id.clear()

    def get(self, table_id: int) -> RowDecoder | None:
        """The decoder of a captured table, None for a filtered one."""
        try:
            entry = self._by_id[table_id]
        except KeyError:
            raise SourceError(
                f"rows event for table id {table_id} without a table map before it"
            ) from None
        return None if entry is None else entry[1]

    def clear(self) -> None:
        self._by_id.clear()
        if self._reader is not None:
            self._reader.table_map = {}

    def invalidate(self) -> None:
        """After DDL: table definitions (and the MariaDB type lookups) may have changed."""
        self.clear()
        self._catalogs.clear()

    def table_map(self, event: Any) -> None:
        schema: str = event.schema
        table: str = event.table
        if not self._tables.matches(schema, table):
            self._by_id[event.table_id] = None
            return
        columns = event.columns
        signature = (schema, table, tuple(c.type for c in columns), tuple(c.name for c in columns))
        cached = self._by_id.get(event.table_id)
        if cached is not None and cached[0] == signature:
            return
        self._by_id[event.table_id] = (signature, self._build(event, schema, table))

    def _build(self, event: Any, schema: str, table: str) -> RowDecoder:
        catalog = _Catalog()
        if any((self._mariadb and _may_be_logical(c)) or _labels_lost(c) for c in event.columns):
            key = (schema, table)
            if key not in self._catalogs:
                self._catalogs[key] = self._lookup(schema, table)
            catalog = self._catalogs[key]
        specs = [_column_spec(c, catalog, schema, table) for c in event.columns]
        metadata = getattr(event, "optional_metadata", None)
        primary_key: list[int] = list(getattr(metadata, "simple_primary_key_list", None) or [])
        if not primary_key:
            primary_key = list((getattr(metadata, "primary_keys_with_prefix", None) or {}).keys())
        return RowDecoder(schema, table, specs, primary_key, mysql_json=_mysql_json)


def _may_be_logical(column: Any) -> bool:
    if column.type == FieldType.STRING:
        return column.character_set_name == "binary" and column.max_length in (4, 16)
    return column.type == FieldType.BLOB and getattr(column, "length_size", 0) == 4


def _labels_lost(column: Any) -> bool:
    """ENUM/SET labels that were not UTF-8 in the table map come out of the library as ''."""
    labels = (column.enum_values or [""])[1:] + list(column.set_values or [])
    return column.type in (FieldType.ENUM, FieldType.SET) and "" in labels


def _column_spec(column: Any, catalog: _Catalog, schema: str, table: str) -> ColumnSpec:
    if not column.name:
        raise SourceSettingsError(
            f"the table map of {schema}.{table} has no column names; set "
            "binlog_row_metadata=FULL in the server config"
        )
    encoding: str | None = None
    if column.type in _CHARACTER_TYPES:
        charset = column.character_set_name or "utf8mb4"
        codec = python_codec(charset)
        if codec is None:
            raise SourceError(
                f"{schema}.{table}.{column.name} uses charset {charset}, which cannot be "
                "decoded; convert the column to utf8mb4 or exclude the table"
            )
        encoding = codec or None
    enum_values = tuple(column.enum_values[1:]) if column.enum_values else ()
    set_values = tuple(column.set_values or ())
    labels = catalog.labels.get(column.name)
    if labels is not None and _labels_lost(column):
        count = len(enum_values or set_values)
        if len(labels) == count:  # the same definition as the binlog's; else keep the binlog's
            enum_values, set_values = (labels, ()) if enum_values else ((), labels)
    return ColumnSpec(
        name=column.name,
        type=column.type,
        unsigned=bool(column.unsigned),
        encoding=encoding,
        max_length=getattr(column, "max_length", 0),
        length_size=getattr(column, "length_size", 0),
        fsp=getattr(column, "fsp", 0),
        precision=getattr(column, "precision", 0),
        scale=getattr(column, "decimals", 0),
        bits=getattr(column, "bits", 0),
        size=getattr(column, "size", 0),
        enum_values=enum_values,
        set_values=set_values,
        logical=catalog.logical.get(column.name),
    )


# -- transactions -------------------------------------------------------------------------------


class _Assembler:
    """Turns the library's events into ChangeEvents with transaction boundaries and indices.

    Keeps what a restart needs: the last boundary fully emitted (file, end position, GTID
    state) or, inside a transaction, its start and how many of its events were emitted.
    """

    def __init__(
        self,
        start: ResumePosition,
        tables: TableFilter,
        plans: _TablePlans,
        *,
        is_mariadb: bool,
        clock: Callable[[], float],
    ) -> None:
        self._tables = tables
        self._plans = plans
        self._mariadb = is_mariadb
        self._clock = clock
        self._file = start.file
        self._boundary = BinlogPosition(start.file, start.pos)
        self._gtid_state = start.gtid_set if is_mariadb else None
        self._skip = start.skip_events
        self._txn: Transaction | None = None
        self._index = 0
        self._standalone = False
        self._pending_ddl: list[tuple[str, str, str]] = []
        self._last_quiet = float("-inf")
        self._idle_commit: ChangeEvent | None = None
        self._handlers: dict[type, Callable[[Any], list[ChangeEvent]]] = {
            WriteRowsEvent: self._write_rows,
            UpdateRowsEvent: self._update_rows,
            DeleteRowsEvent: self._delete_rows,
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
        }

    def restart(self) -> ResumePosition:
        """Where a new reader starts after a loss; resets the per-stream state."""
        txn = self._txn
        if txn is not None:
            position = ResumePosition(
                txn.start.file, txn.start.pos, txn.gtid_set_before, self._index
            )
        else:
            position = ResumePosition(
                self._boundary.file, self._boundary.pos, self._gtid_state, self._skip
            )
        self._txn = None
        self._index = 0
        self._skip = position.skip_events
        self._pending_ddl = []
        self._plans.clear()
        return position

    def feed(self, event: Any) -> list[ChangeEvent]:
        """The change events one library event produces (mostly none or one rows event's)."""
        handler = self._handlers.get(type(event))
        return handler(event) if handler is not None else []

    def _table_map(self, event: Any) -> list[ChangeEvent]:
        self._plans.table_map(event)
        return []

    def _mariadb_gtid(self, event: Any) -> list[ChangeEvent]:
        return self._begin(event, event.gtid, bool(event.flags & _MARIADB_FL_STANDALONE))

    def _mysql_gtid(self, event: Any) -> list[ChangeEvent]:
        # MySQL: a BEGIN query follows for DML; DDL comes alone.
        return self._begin(event, None, standalone=True)

    def _heartbeat(self, event: Any) -> list[ChangeEvent]:
        return self._idle()

    def _partial_update(self, event: Any) -> list[ChangeEvent]:
        raise SourceSettingsError(
            f"partial JSON rows event at {self._here(event)}: binlog_row_value_options must "
            "be empty for full row images"
        )

    def _here(self, event: Any) -> BinlogPosition:
        return BinlogPosition(self._file, event.packet.log_pos)

    # -- transaction boundaries -----------------------------------------------------------------

    def _begin(self, event: Any, gtid: str | None, standalone: bool) -> list[ChangeEvent]:
        out: list[ChangeEvent] = []
        start = BinlogPosition(self._file, event.packet.log_pos - event.packet.event_size)
        if self._txn is not None:
            log.warning(
                "transaction %s at %s has no end event before %s; treating it as committed",
                self._txn.gtid,
                self._txn.start,
                start,
            )
            out = self._finish(start, None)
        self._txn = Transaction(
            start=start,
            gtid=gtid if self._mariadb else None,
            gtid_set_before=self._gtid_state,
            server_id=event.packet.server_id,
            timestamp=event.timestamp,
        )
        self._index = 0
        self._standalone = standalone
        self._pending_ddl = []
        return out

    def _end(self, event: Any) -> list[ChangeEvent]:
        return self._finish(self._here(event), None)

    def _finish(
        self, position: BinlogPosition, ddl: tuple[str, str, str] | None
    ) -> list[ChangeEvent]:
        """End the open transaction at ``position`` with a DDL or COMMIT event."""
        txn = self._txn
        if txn is None:
            self._boundary = position
            return []
        if ddl is None and self._pending_ddl:
            first_db, first_table, _ = self._pending_ddl[0]
            ddl = (first_db, first_table, ";\n".join(sql for _, _, sql in self._pending_ddl))
        out: list[ChangeEvent] = []
        event: ChangeEvent | None
        if ddl is not None:
            db, table, sql = ddl
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
        self._boundary = position
        if self._mariadb:
            self._gtid_state = txn.gtid_set_after
        self._txn = None
        self._index = 0
        self._skip = 0
        self._pending_ddl = []
        return out

    def _quiet(self, commit: ChangeEvent) -> ChangeEvent | None:
        """The COMMIT of a transaction with nothing captured: at most one per second, so the
        checkpoint advances under unrelated traffic without flooding the store."""
        now = self._clock()
        if now - self._last_quiet >= _QUIET_COMMIT_INTERVAL:
            self._last_quiet = now
            return commit
        self._idle_commit = commit
        return None

    def _idle(self) -> list[ChangeEvent]:
        """Heartbeat: the server is idle; hand out a held-back quiet COMMIT now."""
        commit = self._idle_commit
        if commit is None or self._txn is not None:
            return []
        self._idle_commit = None
        self._last_quiet = self._clock()
        return [commit]

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

    def _write_rows(self, event: Any) -> list[ChangeEvent]:
        return self._rows(event, WriteRowsEvent)

    def _update_rows(self, event: Any) -> list[ChangeEvent]:
        return self._rows(event, UpdateRowsEvent)

    def _delete_rows(self, event: Any) -> list[ChangeEvent]:
        return self._rows(event, DeleteRowsEvent)

    def _rows(self, event: Any, kind: type) -> list[ChangeEvent]:
        decoder = self._plans.get(event.table_id)
        if decoder is None:
            return []  # filtered: the rows are never decoded
        txn = self._txn if self._txn is not None else self._ensure_txn(event)
        packet = event.packet
        data: bytes = packet.read(event.event_size - packet.read_bytes)
        position = BinlogPosition(self._file, packet.log_pos)
        db, table, columns = decoder.db, decoder.table, decoder.columns_json
        index, skip = self._index, self._skip
        out: list[ChangeEvent] = []
        append = out.append
        if kind is UpdateRowsEvent:
            for before, after, pk in decoder.updates(
                data, event.columns_present_bitmap, event.columns_present_bitmap2
            ):
                if index >= skip:
                    append(
                        ChangeEvent(
                            EventKind.ROW, txn, position, index, db, table, Op.UPDATE, pk,
                            before, after, columns=columns,
                        )
                    )  # fmt: skip
                index += 1
        else:
            insert = kind is WriteRowsEvent
            op = Op.INSERT if insert else Op.DELETE
            for image, pk in decoder.images(data, event.columns_present_bitmap):
                if index >= skip:
                    append(
                        ChangeEvent(
                            EventKind.ROW, txn, position, index, db, table, op, pk,
                            None if insert else image, image if insert else None,
                            columns=columns,
                        )
                    )  # fmt: skip
                index += 1
        self._index = index
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
            self._refuse_statement_dml(event, statement, sql)
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
        db, table = tables
        if self._standalone:
            return self._finish(self._here(event), (db, table, sql))
        # DDL inside a transaction (MariaDB CREATE TABLE ... SELECT): a DDL event ends a
        # transaction, so it is emitted at the transaction's end, after its rows.
        self._pending_ddl.append((db, table, sql))
        return []

    def _captured(self, statement: Statement) -> tuple[str, str] | None:
        """(db, table) to report for a captured DDL statement, or None when filtered out."""
        tables = self._tables
        if statement.tables:
            for db, table in statement.tables:
                if tables.matches(db, table):
                    return db, table
            return None
        if tables.matches_database(statement.database):
            return statement.database, ""
        return None

    def _refuse_statement_dml(self, event: Any, statement: Statement, sql: str) -> None:
        tables = self._tables
        if statement.tables and not any(tables.matches(db, t) for db, t in statement.tables):
            return
        raise SourceSettingsError(
            f"statement-based DML at {self._here(event)} ({sql[:80]!r}): its rows are not in "
            "the binlog; every session must use binlog_format=ROW (a session set "
            "binlog_format=STATEMENT or MIXED); take a new snapshot of the affected tables"
        )

    def _xa_query(self, event: Any, sql: str) -> list[ChangeEvent]:
        words = sql.split()
        verb = words[1].upper() if len(words) > 1 else ""
        if verb in ("START", "BEGIN"):
            self._ensure_txn(event)
            self._standalone = False
            return []
        if verb in ("COMMIT", "ROLLBACK"):
            if self._txn is not None and not self._standalone:
                return self._end(event)  # one-phase XA inside its own group
            return self._statement_done(event)
        return []

    def _xa_prepare(self, event: Any) -> list[ChangeEvent]:
        if self._index > 0:
            raise SourceError(
                f"two-phase XA transaction with changes to captured tables at "
                f"{self._here(event)}: prepared XA transactions are not supported"
            )
        return self._end(event)

    def _unknown(self, event: Any) -> list[ChangeEvent]:
        event_type = event.packet.event_type
        if event_type in _MARIADB_COMPRESSED_EVENTS or event_type == _MYSQL_TRANSACTION_PAYLOAD:
            raise SourceSettingsError(
                f"compressed binlog event (type {event_type:#x}) at {self._here(event)}: set "
                "log_bin_compress=OFF (MariaDB) / binlog_transaction_compression=OFF (MySQL) "
                "and take a new snapshot"
            )
        if event_type == _INCIDENT_EVENT:
            raise SourceError(
                f"the server logged an INCIDENT at {self._here(event)}: changes may be missing "
                f"from its binlog; {_GAP_ADVICE}"
            )
        if event_type == _ANONYMOUS_GTID_EVENT:
            return self._begin(event, None, standalone=True)
        return []
