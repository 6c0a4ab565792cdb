"""The binlog dump connection of one source: the library's reader on a socket the source owns.

pymysqlreplication opens its own connections; the source hands it a connection factory
instead, so that:

- the reader's socket is known, and :meth:`DumpConnection.shutdown` can wake a ``recv()``
  blocked in the reader thread from any other thread;
- the library's silent reconnect (from the end of the last event read, possibly in the
  middle of a transaction) is refused: the source restarts the reader itself from the last
  transaction boundary it fully emitted;
- when reading ends, the server's dump thread is ended at once rather than at its next
  heartbeat (until then it pins its binlog file against ``PURGE BINARY LOGS``).
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import threading
from collections.abc import Callable
from typing import Any

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
from cdc_platform.events import ResumePosition
from cdc_platform.source.binlog_server import BinlogServer
from cdc_platform.source.mysql import Connection, connection_over, library_connection
from cdc_platform.source.mysql_errors import StreamLostError
from cdc_platform.source.stream.ddl_index import DUMP_WRITE_TIMEOUT
from cdc_platform.source.stream.rows_framing import FramingReader
from cdc_platform.source.stream.table_maps import TablePlans

__all__ = ["DumpConnection"]

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


class DumpConnection:
    """Opens one source's binlog readers, one at a time, and closes them.

    ``stop`` is the source's stop event: a reader opened after it is set is refused, and
    :meth:`shutdown` (called once it is set) shuts the open reader's socket down.
    ``lean_framing`` frames the rows events of known tables from the raw packets
    (:mod:`.rows_framing`); False leaves every event to the library.
    """

    def __init__(
        self,
        config: SourceConfig,
        binlog_server: BinlogServer,
        stop: threading.Event,
        *,
        lean_framing: bool,
    ) -> None:
        self._config = config
        self._server = binlog_server
        self._stop = stop
        self._lean_framing = lean_framing
        self._sock_lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._stream_thread: int | None = None

    def reader(
        self, start: ResumePosition, plans: TablePlans, *, by_gtid: bool
    ) -> BinLogStreamReader:
        """A reader of the binlog from ``start`` (by its GTID state when ``by_gtid``)."""
        # Heartbeats arrive every heartbeat_seconds when idle: silence for several periods
        # means the server or the network is gone. The server waits DUMP_WRITE_TIMEOUT for a
        # reader that is busy (a DDL history scan, :mod:`.ddl_index`) before dropping it.
        settings = self._server.mysql.stream_settings(
            read_timeout=max(4 * self._config.heartbeat_seconds, 10.0)
        ) | {"init_command": f"SET SESSION net_write_timeout = {DUMP_WRITE_TIMEOUT}"}
        mode: dict[str, Any]
        if by_gtid:
            # The library ignores log_file/log_pos when is_mariadb=True; GTID needs auto_position.
            mode = {"is_mariadb": True, "auto_position": start.gtid_set}
        else:
            mode = {"is_mariadb": False, "log_file": start.file, "log_pos": start.pos}
        if self._lean_framing:
            mode["known"] = plans.knows
        log.info("reading the binlog of %s from %s", self._server.where(), start)
        return (FramingReader if self._lean_framing else BinLogStreamReader)(
            connection_settings=settings,
            server_id=self._config.server_id,
            resume_stream=True,
            blocking=True,
            only_events=_READER_EVENTS,
            filter_non_implemented_events=False,
            # See TablePlans: table maps are parsed once per table id, and re-parsed after
            # every rotation and DDL.
            freeze_schema=True,
            slave_heartbeat=self._config.heartbeat_seconds,
            pymysql_wrapper=self._connector(),
            enable_logging=False,
            **mode,
        )

    def _connector(self) -> Callable[..., Connection]:
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
            sock = self._server.mysql.open_socket()
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

    def more_waiting(self) -> bool:
        """Whether more of the binlog stream has arrived than was read (the socket has data)."""
        sock = self._sock
        if sock is None:
            return False
        try:
            readable, _, _ = select.select([sock], [], [], 0)
        except (OSError, ValueError):
            return False
        return bool(readable)

    def shutdown(self) -> None:
        """Wake the open reader, from any thread: its blocked ``recv()`` returns."""
        with self._sock_lock:
            sock = self._sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # wakes a recv() blocked in the reader thread

    def close(self, reader: BinLogStreamReader, *, end_dump_thread: bool) -> None:
        """Close ``reader``; ``end_dump_thread`` also ends the server's dump thread now."""
        with self._sock_lock:
            self._sock = None
            thread_id, self._stream_thread = self._stream_thread, None
        try:
            reader.close()
        except Exception:  # closing a dead connection may fail in many ways
            log.debug("closing the binlog reader failed", exc_info=True)
        if thread_id is not None and end_dump_thread:
            self._end_dump_thread(thread_id)

    def _end_dump_thread(self, thread_id: int) -> None:
        """When reading ends, end the server's binlog dump thread now rather than at its next
        heartbeat: until then it pins its binlog file against PURGE BINARY LOGS. A user may
        always kill its own connections; failures only mean the thread is gone already."""
        self._server.end_connection(thread_id)
