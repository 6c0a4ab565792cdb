"""Every use of mysql-replication's and pymysql's private internals, in one place.

Two speed-ups and one stop need what the libraries do not offer publicly:

* the lean rows framing (:mod:`.rows_framing`) reads the binlog reader's stream connection,
  whether it is connected, the checksum and post-header settings it learned at connect
  (name-mangled attributes of ``BinLogStreamReader``), and wraps the connection's packet
  reads (``_read_packet``);
* the shared default TLS context (:mod:`.mysql`) overrides pymysql's ``_create_ssl_ctx``;
* a side read's stop (:mod:`cdc_platform.backfill.stop`) shuts the connection's socket
  (``_sock``) to end a blocked read at once.

Supported: mysql-replication 1.0.17 (pinned exactly) and PyMySQL 1.1 to 1.x. An upgrade that
moves any of these is caught by :func:`missing_internals` (run by the unit tests), which names
what moved, instead of a silent slowdown or an AttributeError deep in the stream.
"""

from __future__ import annotations

import inspect
import socket
import ssl
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pymysql
from pymysqlreplication import BinLogStreamReader

__all__ = [
    "LibraryTlsConnection",
    "PacketRead",
    "missing_internals",
    "reader_checksum",
    "reader_connection",
    "reader_post_header_lengths",
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
        created: ssl.SSLContext = super()._create_ssl_ctx(sslp)  # type: ignore[misc]
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
    if not hasattr(connection(defer_connect=True), _SOCKET):
        missing.append(f"pymysql: Connection.{_SOCKET}")
    return missing
