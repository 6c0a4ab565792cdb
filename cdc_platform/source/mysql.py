"""The one boundary between the engine and a MySQL/MariaDB source server: its connections.

Every reader of the source (the binlog stream, the id watch, the row reader behind snapshots,
reconciliation and repairs) opens its connections through :class:`SourceServer`: address,
login, TLS (one shared context for the default mode, a warning when a remote server's
certificate is not checked) and the reader's advice. What a connection raises becomes the
engine's error through the one table of :mod:`.mysql_errors`, worded by the server that
opened it (:func:`source_errors`).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import ssl
from collections.abc import Iterator
from typing import Any, TypeAlias

import pymysql
from pydantic import SecretStr

from cdc_platform.config.source import SourceConfig
from cdc_platform.config.tls import is_loopback
from cdc_platform.errors import SourceError
from cdc_platform.events import ResumePosition
from cdc_platform.infra.mysql_tls import named_refusal
from cdc_platform.source.library_internals import LibraryTlsConnection
from cdc_platform.source.mysql_errors import MYSQL_ERRORS, SELECT_GRANTS, translate

__all__ = [
    "SIDE_READ_TIMEOUT_SECONDS",
    "Connection",
    "SourceServer",
    "connect_source",
    "connection_over",
    "library_connection",
    "mysql_connection",
    "source_errors",
    "warn_unverified",
]

log = logging.getLogger(__name__)

Connection: TypeAlias = "pymysql.connections.Connection[Any]"
"""A connection to the source server (pymysql's); for annotations only."""

_preferred_tls: ssl.SSLContext | None = None


class _SourceConnection(LibraryTlsConnection):
    """pymysql's connection, knowing the :class:`SourceServer` that opened it, with one TLS
    context per process for its default mode.

    ``source_server`` (None for the library's own connections) lets a reader handed only
    the connection translate its errors with that server's purpose, advice and password
    masking (:func:`source_errors`). The default TLS mode (TLS when the server offers it,
    nothing verified): pymysql builds that context anew for every connection, loading the
    system's CA certificates (tens of ms each, a sixth of a short run's start-up); the
    shared one is the context pymysql builds, built once."""

    source_server: SourceServer | None = None

    def tls_context(self, sslp: Any) -> ssl.SSLContext:
        """The shared context for the default mode, pymysql's own for any other."""
        global _preferred_tls  # noqa: PLW0603 (built once, on the first connection)
        if isinstance(sslp, dict) and not sslp:
            if _preferred_tls is None:
                _preferred_tls = self.library_tls_context(sslp)
            return _preferred_tls
        return self.library_tls_context(sslp)

    def connect(self, sock: socket.socket | None = None) -> None:
        """pymysql's connect; a refused server certificate comes out with its cause named."""
        try:
            super().connect(sock)
        except pymysql.err.OperationalError as exc:
            refusal = named_refusal(exc, self)
            if refusal is None:
                raise
            raise refusal from None


def mysql_connection(**settings: Any) -> Connection:
    """``pymysql.connect(**settings)``, sharing the default TLS context (see above)."""
    return _SourceConnection(**settings)


SIDE_READ_TIMEOUT_SECONDS = 120.0
"""Longest wait for the server's answer on a side connection (snapshot, reconciliation,
repair): a partitioned server fails the read instead of blocking it forever."""

_PINNED_ISOLATION = "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ"
"""Every side connection's isolation (MySQL and MariaDB alike; see SourceServer.connect)."""


class SourceServer:
    """One source server as a reader reaches it: address, login, and the reader's advice.

    ``purpose`` (e.g. "snapshot") starts every message of a side reader; ``grants`` is what
    the reader tells a user who lacks a privilege; ``unknown_is_lost`` makes a server error
    the table does not know a lost connection (the binlog stream) instead of a refusal.
    """

    def __init__(
        self,
        config: SourceConfig,
        password: SecretStr | str | None = None,
        *,
        purpose: str = "",
        grants: str = SELECT_GRANTS,
        unknown_is_lost: bool = False,
    ) -> None:
        self.config = config
        self.purpose = purpose
        self.grants = grants
        self.unknown_is_lost = unknown_is_lost
        self._password = password

    def secret(self) -> str:
        """The password (from the environment unless given); never put it in a message."""
        if self._password is None:
            self._password = self.config.password()
        if isinstance(self._password, SecretStr):
            return self._password.get_secret_value()
        return self._password

    def where(self) -> str:
        """``host:port as 'user'``, as messages name the server."""
        return f"{self.config.host}:{self.config.port} as {self.config.user!r}"

    def error(
        self, exc: BaseException, doing: str, position: ResumePosition | None = None
    ) -> SourceError:
        """The engine's error for ``exc`` while ``doing`` (:func:`~.mysql_errors.translate`)."""
        return translate(exc, doing, self, position)

    def connect(
        self,
        read_timeout: float | None,
        *,
        connect_timeout: float | None = None,
        utc_session: bool = True,
        reads_rows: bool = True,
    ) -> Connection:
        """An autocommit utf8mb4 connection; reads and writes wait at most ``read_timeout``
        seconds (None: forever). ``utc_session`` sets the session time zone to UTC, so
        TIMESTAMP text is the instant in UTC as the binlog source writes it.

        A connection that ``reads_rows`` (every side reader: snapshot, repair,
        reconciliation, id watch) has its isolation pinned to REPEATABLE READ whatever the
        server's global default: under READ UNCOMMITTED its SELECT would copy rows of
        transactions that later roll back, and no binlog event ever corrects them (each
        autocommit SELECT reads one consistent view under REPEATABLE READ). The binlog
        source's control connections (positions, settings, information_schema) read no rows
        and are left as the server sets them.

        Raises:
            SourceError: the server cannot be reached or refused the login (see translate).
        """
        warn_unverified(self.config)
        try:
            conn = mysql_connection(
                host=self.config.host,
                port=self.config.port,
                user=self.config.user,
                password=self.secret(),
                connect_timeout=connect_timeout or self.config.connect_timeout_seconds,
                read_timeout=read_timeout,
                write_timeout=read_timeout,
                autocommit=True,
                charset="utf8mb4",
                init_command="SET time_zone = '+00:00'" if utc_session else None,
                **self.config.tls.pymysql_args(),
            )
        except MYSQL_ERRORS as exc:
            raise self.error(exc, "connecting to") from None
        if isinstance(conn, _SourceConnection):
            conn.source_server = self
        if not reads_rows:
            return conn
        try:
            with conn.cursor() as cur:
                cur.execute(_PINNED_ISOLATION)
        except MYSQL_ERRORS as exc:
            with contextlib.suppress(*MYSQL_ERRORS):
                conn.close()
            raise self.error(exc, "connecting to") from None
        return conn

    def stream_settings(self, read_timeout: float) -> dict[str, Any]:
        """``connection_settings`` of a pymysqlreplication reader for this server."""
        return {
            "host": self.config.host,
            "port": self.config.port,
            "user": self.config.user,
            "password": self.secret(),
            "connect_timeout": self.config.connect_timeout_seconds,
            "read_timeout": read_timeout,
            "charset": "utf8mb4",
            **self.config.tls.pymysql_args(),
        }

    def open_socket(self) -> socket.socket:
        """A TCP socket to the server for a binlog stream (no delay, keep-alive), so its
        owner can shut it down from another thread."""
        sock = socket.create_connection(
            (self.config.host, self.config.port), timeout=self.config.connect_timeout_seconds
        )
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        return sock


_warned: set[tuple[str, int, str]] = set()


def warn_unverified(config: SourceConfig) -> None:
    """Warn (once per process and server) when a source on another machine is reached
    without checking its certificate: the password and every row cross the network to
    whoever answers on that address."""
    key = (config.host, config.port, config.tls.mode)
    if config.tls.verifies or is_loopback(config.host) or key in _warned:
        return
    _warned.add(key)
    log.warning(
        "SECURITY: the source %s:%d is not on this machine and source.tls.mode is %s: the "
        "server's certificate is not checked, so a man in the middle can read the password "
        "and every row%s. Set source.tls.mode to verify_identity (or verify_ca) with ca_file",
        config.host,
        config.port,
        config.tls.mode,
        "" if config.tls.mode != "disabled" else " (disabled: nothing is even encrypted)",
    )


def connection_over(sock: socket.socket, settings: dict[str, Any]) -> Connection:
    """A pymysql connection with ``settings`` (as pymysqlreplication passes them) on ``sock``."""
    conn = mysql_connection(**settings, defer_connect=True)
    conn.connect(sock)
    return conn


def library_connection(settings: dict[str, Any]) -> Connection:
    """A pymysql connection opened as pymysqlreplication asks (its control connection, on
    ``information_schema``: the library names it with pymysql's deprecated ``db``)."""
    settings = dict(settings)
    if "db" in settings:
        settings["database"] = settings.pop("db")
    return mysql_connection(**settings)


def connect_source(
    source: SourceConfig,
    password: SecretStr | str | None = None,
    *,
    purpose: str,
    read_timeout: float | None = SIDE_READ_TIMEOUT_SECONDS,
) -> Connection:
    """A side connection for ``purpose`` (named in errors): snapshot, reconciliation, repair.

    Raises:
        SourceError: the server cannot be reached or refused the login (no password shown).
    """
    return SourceServer(source, password, purpose=purpose).connect(read_timeout)


@contextlib.contextmanager
def source_errors(conn: Connection, doing: str) -> Iterator[None]:
    """Run a read on ``conn``; what the driver raises comes out as the engine's error (see
    :func:`.mysql_errors.translate`), worded by the server that opened ``conn`` (its purpose
    and grants)."""
    try:
        yield
    except MYSQL_ERRORS as exc:
        server = conn.source_server if isinstance(conn, _SourceConnection) else None
        raise translate(exc, doing, server) from None
