"""Every use of mysql-replication's and pymysql's private internals, in one place.

Two speed-ups and one stop need what the libraries do not offer publicly:

* the lean rows framing (:mod:`.rows_framing`) reads the binlog reader's stream connection,
  whether it is connected, the checksum and post-header settings it learned at connect
  (name-mangled attributes of ``BinLogStreamReader``), and wraps the connection's packet
  reads (``_read_packet``);
* the shared default TLS context (:mod:`.mysql`) overrides pymysql's ``_create_ssl_ctx``;
* a side read's stop (:mod:`cdc_platform.backfill.stop`) shuts the connection's socket
  (``_sock``) to end a blocked read at once;
* the fast row reader (:mod:`.result_rows`) reads a result's row packets itself
  (:class:`RowReading`: the connection's buffered socket file ``_rfile``, its packet
  sequence ``_next_seq_id``, the unbuffered result ``_result`` with its ``converters``,
  ``_check_packet_is_eof``, ``unbuffered_active``, and ``_force_close``).

Supported: mysql-replication 1.0.17 (pinned exactly) and PyMySQL 1.1 to 1.x. An upgrade that
moves any of these is caught by :func:`missing_internals` (run by the unit tests), which names
what moved, instead of a silent slowdown or an AttributeError deep in the stream.
"""

from __future__ import annotations

import inspect
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

import pymysql
from pymysql.constants import CR
from pymysql.protocol import MysqlPacket
from pymysqlreplication import BinLogStreamReader

__all__ = [
    "LibraryTlsConnection",
    "PacketRead",
    "RowReading",
    "missing_internals",
    "reader_checksum",
    "reader_connection",
    "reader_post_header_lengths",
    "row_reading",
    "socket_of",
    "wrap_packet_reads",
]

_MANGLED = "_BinLogStreamReader__"
_READER_CONNECTED = _MANGLED + "connected_stream"
_READER_CHECKSUM = _MANGLED + "use_checksum"
_READER_POST_HEADERS = _MANGLED + "post_header_lengths"
_READER_CONNECTION = "_stream_connection"
_READ_PACKET = "_read_packet"
_SSL_CONTEXT = "_create_ssl_ctx"
_SOCKET = "_sock"
_READ_FILE = "_rfile"
_NEXT_SEQ = "_next_seq_id"
_RESULT = "_result"
_FORCE_CLOSE = "_force_close"
_RESULT_INTERNALS = ("converters", "unbuffered_active", "_check_packet_is_eof")

PacketRead = Callable[..., Any]
"""``Connection._read_packet(packet_type=MysqlPacket)``: the next packet of a connection."""


def reader_connection(reader: BinLogStreamReader) -> Any | None:
    """The reader's connected stream connection (None before it connected)."""
    conn = getattr(reader, _READER_CONNECTION, None)
    return conn if conn is not None and getattr(reader, _READER_CONNECTED) else None


def reader_checksum(reader: BinLogStreamReader) -> bool:
    """Whether the stream's events end in a checksum (learned at connect)."""
    return bool(getattr(reader, _READER_CHECKSUM))


def reader_post_header_lengths(reader: BinLogStreamReader) -> bytes | tuple[int, ...] | None:
    """The format description event's post-header lengths (None before it was read)."""
    lengths: bytes | tuple[int, ...] | None = getattr(reader, _READER_POST_HEADERS)
    return lengths


def wrap_packet_reads(conn: Any, wrap: Callable[[PacketRead], PacketRead]) -> None:
    """Route ``conn``'s packet reads through ``wrap(its own read)``."""
    setattr(conn, _READ_PACKET, wrap(getattr(conn, _READ_PACKET)))


def socket_of(conn: pymysql.connections.Connection[Any]) -> socket.socket | None:
    """The connection's socket (None when closed)."""
    sock: socket.socket | None = getattr(conn, _SOCKET, None)
    return sock


@dataclass(slots=True)
class RowReading:
    """The rows of an unbuffered query, read by the caller (:mod:`.result_rows`), and how
    to leave the connection as pymysql would after the last row, an error or a loss."""

    conn: Any
    result: Any
    read: Callable[[int], bytes]
    """The connection's buffered socket reads: exactly ``n`` bytes, fewer at a loss."""
    next_seq: int
    """The sequence number the next packet must carry."""
    converters: list[tuple[str | None, Callable[[Any], Any] | None]]
    """pymysql's (encoding, converter) of each column."""
    encoding: str

    def finish(self, eof: MysqlPacket, next_seq: int) -> None:
        """The EOF packet ended the rows: the connection is ready for the next command."""
        setattr(self.conn, _NEXT_SEQ, next_seq)
        self.result._check_packet_is_eof(eof)
        self._end()

    def fail(self, error: MysqlPacket, next_seq: int) -> NoReturn:
        """The server sent an error instead of a row (the connection stays usable)."""
        setattr(self.conn, _NEXT_SEQ, next_seq)
        self._end()
        error.raise_for_error()
        raise AssertionError("an error packet raises")  # pragma: no cover

    def lost(self, cause: BaseException | None) -> NoReturn:
        """The connection broke mid-result: closed, pymysql's error 2013."""
        self.close()
        suffix = f" ({cause})" if cause is not None else ""
        raise pymysql.err.OperationalError(
            CR.CR_SERVER_LOST, f"Lost connection to MySQL server during query{suffix}"
        )

    def out_of_step(self, got: int, expected: int) -> NoReturn:
        """A packet with the wrong sequence number: closed, as pymysql does."""
        self.close()
        if got == 0:  # MariaDB sends its shutdown error with sequence number 0
            raise pymysql.err.OperationalError(
                CR.CR_SERVER_LOST, "Lost connection to MySQL server during query"
            )
        raise pymysql.err.InternalError(
            f"Packet sequence number wrong - got {got} expected {expected}"
        )

    def close(self) -> None:
        """Close the connection (the rest of the result cannot be read any more)."""
        self._end()
        getattr(self.conn, _FORCE_CLOSE)()

    def _end(self) -> None:
        self.result.unbuffered_active = False
        self.result.connection = None


def row_reading(conn: pymysql.connections.Connection[Any]) -> RowReading | None:
    """The rows of the unbuffered query ``conn`` just started, to be read by the caller
    (None: the statement returned no result set)."""
    result = getattr(conn, _RESULT, None)
    if result is None or not result.unbuffered_active:
        return None
    return RowReading(
        conn,
        result,
        getattr(conn, _READ_FILE).read,
        int(getattr(conn, _NEXT_SEQ)),
        list(result.converters),
        str(conn.encoding),
    )


if TYPE_CHECKING:
    _PymysqlConnection = pymysql.connections.Connection[Any]
else:
    _PymysqlConnection = pymysql.connections.Connection


class LibraryTlsConnection(_PymysqlConnection):
    """pymysql's connection with a hook on how it builds a TLS context: :meth:`tls_context`
    (by default pymysql's own, :meth:`library_tls_context`)."""

    def _create_ssl_ctx(self, sslp: Any) -> ssl.SSLContext:
        return self.tls_context(sslp)

    def tls_context(self, sslp: Any) -> ssl.SSLContext:
        """The TLS context for the ``ssl`` settings ``sslp``."""
        return self.library_tls_context(sslp)

    def library_tls_context(self, sslp: Any) -> ssl.SSLContext:
        """The context pymysql itself builds for ``sslp``."""
        created: ssl.SSLContext = super()._create_ssl_ctx(sslp)  # type: ignore[misc]  # pymysql's private method is untyped
        return created


def missing_internals() -> list[str]:
    """What of the above the installed libraries no longer have, each named with its owner
    (empty: the supported versions' internals are all there)."""
    missing: list[str] = []
    reader = BinLogStreamReader(connection_settings={}, server_id=1)  # connects lazily
    for name in (_READER_CONNECTED, _READER_CHECKSUM, _READER_POST_HEADERS):
        if not hasattr(reader, name):
            missing.append(f"mysql-replication: BinLogStreamReader.{name}")
    if f"self.{_READER_CONNECTION} =" not in inspect.getsource(BinLogStreamReader):
        missing.append(f"mysql-replication: BinLogStreamReader.{_READER_CONNECTION}")
    connection = pymysql.connections.Connection
    for name in (_READ_PACKET, _SSL_CONTEXT):
        if not callable(getattr(connection, name, None)):
            missing.append(f"pymysql: Connection.{name}")
    unconnected = connection(defer_connect=True)
    for name in (_SOCKET, _RESULT):
        if not hasattr(unconnected, name):
            missing.append(f"pymysql: Connection.{name}")
    if not callable(getattr(connection, _FORCE_CLOSE, None)):
        missing.append(f"pymysql: Connection.{_FORCE_CLOSE}")
    source = inspect.getsource(connection)
    for name in (_READ_FILE, _NEXT_SEQ):
        if f"self.{name} =" not in source:
            missing.append(f"pymysql: Connection.{name}")
    result = pymysql.connections.MySQLResult(unconnected)
    for name in _RESULT_INTERNALS:
        if not hasattr(result, name) and f"self.{name} =" not in inspect.getsource(
            pymysql.connections.MySQLResult
        ):
            missing.append(f"pymysql: MySQLResult.{name}")
    return missing
