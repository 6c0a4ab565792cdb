"""The source's failures as the engine's errors: one table for every reader of the server.

What pymysql, pymysqlreplication and the socket raise is turned here into the engine's errors
(:func:`classify`, :func:`translate`): which failure it is, whether a retry can help
(``transient``) and what to do about it. The password never appears in a message.

A reader differs only in what it tells the user to grant and in how it treats a server error
this table does not know: the binlog stream counts it as a lost stream (the dump connection
ends with varied server errors; a new connection from the last boundary is safe), every other
reader as a refusal. The connections themselves are opened by :mod:`.mysql`.
"""

from __future__ import annotations

import enum
import re
import socket
import struct
from dataclasses import dataclass
from typing import Protocol

import pymysql

from cdc_platform.config.source import SourceConfig
from cdc_platform.errors import (
    BinlogGapError,
    BinlogReadError,
    ServerIdConflictError,
    SourceConnectionError,
    SourceError,
    SourceLoginError,
    SourceSettingsError,
    SourceTableChangedError,
    SourceTableMissingError,
)
from cdc_platform.events import ResumePosition
from cdc_platform.infra.mysql_tls import is_tls_failure

__all__ = [
    "GAP_ADVICE",
    "MYSQL_ERRORS",
    "PARSE_ERROR",
    "SELECT_GRANTS",
    "STREAM_ERRORS",
    "Failure",
    "ReaderAdvice",
    "StreamLostError",
    "classify",
    "error_code",
    "is_missing_privilege",
    "is_missing_table",
    "mysql_error",
    "translate",
]


MYSQL_ERRORS: tuple[type[BaseException], ...] = (pymysql.MySQLError, OSError)
"""What a call on a source connection raises; :func:`translate` takes any of them."""

SELECT_GRANTS = "the reader needs SELECT on the captured tables"
"""Advice on a missing privilege for readers that only SELECT (snapshot, reconciliation)."""

GAP_ADVICE = (
    "the change log cannot be continued without loss; take a new snapshot "
    "(cdc-platform snapshot) or reset the checkpoint"
)
"""What to do about a :class:`~cdc_platform.errors.BinlogGapError`."""


PARSE_ERROR = 1064
"""ER_PARSE_ERROR: the server does not know the statement (e.g. a renamed SHOW)."""

_ACCESS_DENIED = frozenset({1045, 1698})
_NO_PRIVILEGE = frozenset({1044, 1142, 1143, 1227, 1370})
_MISSING_TABLE = frozenset({1146, 1049})
"""ER_NO_SUCH_TABLE, ER_BAD_DB_ERROR: the table (or its whole database) was dropped or renamed."""
_BAD_FIELD = 1054
_LOCK_WAIT = frozenset({1205, 1213})
"""Lock wait timeout, deadlock: another transaction held the rows; the same read may succeed."""
_SERVER_GONE = frozenset({1040, 1053, 1927})
"""Too many connections, server shutdown, connection killed: a new connection may succeed."""
_UNKNOWN_HOST = 2005
_CANNOT_CONNECT = 2003
_BINLOG_DUMP = 1236
_SAME_SERVER_ID = 4052
"""MariaDB's ER_SLAVE_SAME_ID, sent to the older of two dumps with one server_id."""
_SAME_ID_TEXT = "same server_uuid/server_id"
"""MySQL sends the server_id conflict as error 1236 with this text."""
_GAP_TEXT = re.compile(
    r"could not find (first log file|gtid)|purged|impossible position"
    r"|not in the master's binlog",
    re.I,
)
"""1236 messages (MariaDB and MySQL) that mean the position is no longer, or never was, in the
server's binlog; every other 1236 is a read error."""
_NAME_NOT_RESOLVED = re.compile(
    r"name or service not known|nodename nor servname|name resolution|getaddrinfo", re.I
)


class StreamLostError(Exception):
    """The binlog connection is gone (or a reconnect was refused); the reader must be
    recreated from a transaction boundary."""


_LOST_OUTSIDE_PYMYSQL = (OSError, EOFError, struct.error, StreamLostError)
"""Sockets, a stream ended mid-packet, a truncated packet, a refused reconnect."""

STREAM_ERRORS: tuple[type[BaseException], ...] = (
    pymysql.err.OperationalError,
    pymysql.err.InterfaceError,
    pymysql.err.InternalError,
    OSError,
    EOFError,
    struct.error,
    StreamLostError,
)
"""What a binlog stream raises when its connection fails; :func:`translate` says whether a
new connection may succeed."""


class Failure(enum.Enum):
    """What went wrong on the source, as far as the reader's next step is concerned."""

    ACCESS_DENIED = "access denied"
    UNKNOWN_HOST = "unknown host"
    CONNECTION_LOST = "connection lost"
    LOCK_WAIT = "lock wait"
    MISSING_TABLE = "missing table"
    CHANGED_COLUMNS = "changed columns"
    MISSING_PRIVILEGE = "missing privilege"
    SERVER_ID_CONFLICT = "server_id conflict"
    BINLOG_GAP = "binlog gap"
    BINLOG_READ = "binlog read refused"
    TLS = "tls refused"
    REFUSED = "refused"


def error_code(exc: BaseException) -> int | None:
    """The server's (or client library's) error number of ``exc``, if it has one."""
    args = exc.args
    return args[0] if args and isinstance(args[0], int) else None


def _text(exc: BaseException) -> str:
    """The error's own words (the server's message without the code tuple around it)."""
    args = exc.args
    text = str(args[1]) if error_code(exc) is not None and len(args) > 1 else str(exc)
    return text.rstrip(".") or type(exc).__name__


def classify(exc: BaseException) -> Failure:
    """Which failure a pymysql / pymysqlreplication / socket error is."""
    code = error_code(exc)
    if code == _BINLOG_DUMP:
        return _dump_failure(_text(exc))
    if is_tls_failure(exc):
        return Failure.TLS
    if code in _BY_CODE:
        return _BY_CODE[code]
    if isinstance(exc, socket.gaierror) or (
        code == _CANNOT_CONNECT and _NAME_NOT_RESOLVED.search(_text(exc))
    ):
        return Failure.UNKNOWN_HOST
    client_side = code is None or code < 1000 or 2000 <= code < 3000
    if isinstance(exc, _LOST_OUTSIDE_PYMYSQL) or (isinstance(exc, _CONNECTION) and client_side):
        return Failure.CONNECTION_LOST
    return Failure.REFUSED


def _dump_failure(text: str) -> Failure:
    """Error 1236: which refusal of a binlog dump the server's words describe."""
    if _SAME_ID_TEXT in text:
        return Failure.SERVER_ID_CONFLICT
    return Failure.BINLOG_GAP if _GAP_TEXT.search(text) else Failure.BINLOG_READ


_BY_CODE: dict[int, Failure] = {
    **dict.fromkeys(_ACCESS_DENIED, Failure.ACCESS_DENIED),
    **dict.fromkeys(_NO_PRIVILEGE, Failure.MISSING_PRIVILEGE),
    **dict.fromkeys(_LOCK_WAIT, Failure.LOCK_WAIT),
    **dict.fromkeys(_MISSING_TABLE, Failure.MISSING_TABLE),
    **dict.fromkeys(_SERVER_GONE, Failure.CONNECTION_LOST),
    _BAD_FIELD: Failure.CHANGED_COLUMNS,
    _UNKNOWN_HOST: Failure.UNKNOWN_HOST,
    _SAME_SERVER_ID: Failure.SERVER_ID_CONFLICT,
}
"""Server and client error numbers that say the failure by themselves."""

_CONNECTION = (pymysql.err.OperationalError, pymysql.err.InterfaceError, pymysql.err.InternalError)
"""pymysql's classes of client-side (code < 1000 or 2xxx) connection failures."""


def is_missing_table(exc: BaseException) -> bool:
    """Whether a pymysql error says the table (or its database) no longer exists."""
    return isinstance(exc, pymysql.MySQLError) and classify(exc) is Failure.MISSING_TABLE


def is_missing_privilege(exc: BaseException) -> bool:
    """Whether a pymysql error says the user lacks a privilege for the statement."""
    return isinstance(exc, pymysql.MySQLError) and classify(exc) is Failure.MISSING_PRIVILEGE


class ReaderAdvice(Protocol):
    """What a message says of the reader a failure happened to: the server it reads, the
    password to mask, and its advice (:class:`~.mysql.SourceServer` is one)."""

    config: SourceConfig
    purpose: str
    """Starts every message of a side reader (e.g. "snapshot")."""
    grants: str
    """What the reader tells a user who lacks a privilege."""
    unknown_is_lost: bool
    """A server error the table does not know is a lost connection (the binlog stream)."""

    def secret(self) -> str:
        """The password, masked in every message."""
        ...

    def where(self) -> str:
        """``host:port as 'user'``, as messages name the server."""
        ...


def mysql_error(exc: BaseException, doing: str) -> SourceError:
    """The engine's error for ``exc`` raised while ``doing``, where no server is at hand."""
    return translate(exc, doing)


def translate(
    exc: BaseException,
    doing: str,
    server: ReaderAdvice | None = None,
    position: ResumePosition | None = None,
) -> SourceError:
    """The engine's error for a pymysql / pymysqlreplication / socket error.

    ==================  ===========================  =========  ===============================
    failure             error                        transient  advice
    ==================  ===========================  =========  ===============================
    access denied       SourceLoginError             no         check user and password
    unknown host        SourceConnectionError        yes        check source.host
    connection lost     SourceConnectionError        yes        (reconnect)
    lock wait/deadlock  SourceConnectionError        yes        (retry)
    missing table       SourceTableMissingError      no         (the table was dropped)
    changed columns     SourceTableChangedError      yes        (read its columns again)
    missing privilege   SourceSettingsError          no         the reader's GRANT
    server_id conflict  ServerIdConflictError        no         one server_id per reader
    binlog gap (1236)   BinlogGapError               no         new snapshot / reset
    other 1236          BinlogReadError              no         the server's error log
    TLS refused         SourceSettingsError          no         source.tls, server's certs
    anything else       SourceError                  no         (lost, if ``unknown_is_lost``)
    ==================  ===========================  =========  ===============================

    ``position`` is where a refused binlog read started, named in dump errors.
    """
    failure = classify(exc)
    if failure is Failure.REFUSED and server is not None and server.unknown_is_lost:
        failure = Failure.CONNECTION_LOST
    detail = _text(exc)
    secret = server.secret() if server is not None else ""
    if secret:
        detail = detail.replace(secret, "***")
    code = error_code(exc)
    if code is not None and failure not in (Failure.BINLOG_GAP, Failure.BINLOG_READ):
        detail = f"error {code}: {detail}"
    where = server.where() if server is not None else ""
    context = _Context(" ".join(p for p in (doing, where) if p), detail, server, position)
    message = _message(failure, context)
    if server is not None and server.purpose:
        message = f"{server.purpose}: {message}"
    if failure is Failure.SERVER_ID_CONFLICT:
        return ServerIdConflictError(message, server_id=context.server_id)
    return _ERRORS[failure](message)


_ERRORS: dict[Failure, type[SourceError]] = {
    Failure.ACCESS_DENIED: SourceLoginError,
    Failure.UNKNOWN_HOST: SourceConnectionError,
    Failure.CONNECTION_LOST: SourceConnectionError,
    Failure.LOCK_WAIT: SourceConnectionError,
    Failure.MISSING_TABLE: SourceTableMissingError,
    Failure.CHANGED_COLUMNS: SourceTableChangedError,
    Failure.MISSING_PRIVILEGE: SourceSettingsError,
    Failure.BINLOG_GAP: BinlogGapError,
    Failure.BINLOG_READ: BinlogReadError,
    Failure.TLS: SourceSettingsError,
    Failure.REFUSED: SourceError,
}
"""The engine's error class of each failure (ServerIdConflictError also takes the id)."""


@dataclass(frozen=True, slots=True)
class _Context:
    place: str
    """What the reader was doing, and where (``connecting to host:port as 'user'``)."""
    detail: str
    """The library's words, with the error number and without the password."""
    server: ReaderAdvice | None
    position: ResumePosition | None

    @property
    def at(self) -> str:
        return f" {self.place}" if self.place else ""

    @property
    def where(self) -> str:
        return self.server.where() if self.server is not None else self.place

    @property
    def server_id(self) -> int:
        return self.server.config.server_id if self.server is not None else 0


def _message(failure: Failure, ctx: _Context) -> str:  # noqa: PLR0911 - one return per failure
    at, detail, server = ctx.at, ctx.detail, ctx.server
    if failure is Failure.ACCESS_DENIED:
        env = f"${server.config.password_env}" if server is not None else "the environment"
        return f"access denied{at}: {detail}; check the user and the password in {env}"
    if failure is Failure.UNKNOWN_HOST:
        return (
            f"cannot reach MySQL/MariaDB{at}: {detail}; the host name does not resolve "
            "(check source.host)"
        )
    if failure is Failure.CONNECTION_LOST:
        return f"cannot reach MySQL/MariaDB{at}: {detail}"
    if failure is Failure.LOCK_WAIT:
        return (
            f"lock wait timeout or deadlock{at}: {detail}; another transaction held the rows, "
            "a retry may succeed"
        )
    if failure is Failure.MISSING_TABLE:
        return f"a table or database does not exist{at}: {detail}"
    if failure is Failure.CHANGED_COLUMNS:
        return f"a table changed its columns{at} ({detail}); reading it again re-reads them"
    if failure is Failure.MISSING_PRIVILEGE:
        user = repr(server.config.user) if server is not None else "the source user"
        grants = server.grants if server is not None else SELECT_GRANTS
        return f"user {user} lacks a privilege{at}: {detail}; {grants}"
    if failure is Failure.SERVER_ID_CONFLICT:
        return (
            f"{ctx.where} ended the binlog dump: another reader connected with the same "
            f"server_id {ctx.server_id} ({detail}). Two readers with one server_id end each "
            "other's dumps; give every destination and every replica its own server_id "
            "(source.server_id), or stop the other process reading as this destination"
        )
    if failure in (Failure.BINLOG_GAP, Failure.BINLOG_READ):
        return _dump_refusal(failure, ctx)
    if failure is Failure.TLS:
        tls = server.config.tls if server is not None else None
        mode = f"source.tls.mode {tls.mode}" if tls is not None else "source.tls"
        ca = f", ca_file {tls.ca_file}" if tls is not None and tls.ca_file else ""
        return (
            f"TLS to MySQL/MariaDB failed{at} ({mode}{ca}): {detail}; check source.tls "
            "against the server's certificate and ssl settings"
        )
    return f"the server refused{at}: {detail}"


def _dump_refusal(failure: Failure, ctx: _Context) -> str:
    """Error 1236: a gap when the position is gone, otherwise a read error that a new
    snapshot would not cure (the offset is no event start, the binlog is damaged, ...)."""
    position = ctx.position
    start = f" from {position.file}:{position.pos}" if position is not None else ""
    if failure is Failure.BINLOG_GAP:
        return f"{ctx.where} no longer has the binlog to read{start}: {ctx.detail}; {GAP_ADVICE}"
    return (
        f"{ctx.where} refused to send its binlog{start}: {ctx.detail}. The binlog is not "
        "purged: the position is not the start of an event in this server's binlog (a "
        "checkpoint made on another server, or a damaged binlog), or an event is larger than "
        "max_allowed_packet. Check the server's error log; the change log is intact and "
        "resumes from the same position once the cause is fixed"
    )
