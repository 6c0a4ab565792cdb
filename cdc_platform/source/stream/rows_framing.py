"""Lean framing of ROWS events: their header and row bytes read straight from the raw packet.

For a rows event, pymysqlreplication builds a packet wrapper, an event object, a table
object per event and reads the header through several layers of buffered reads: about a
third of the reader thread's time while catching up single-row transactions. The row values
were already decoded here from the event's bytes (:mod:`cdc_platform.source.values`), so for
the rows events of tables whose table map the source knows, :class:`FramingReader` takes the
packet as it is read, before the library parses it, and frames it with :func:`frame_rows`:
table id, flags, column bitmaps and the row bytes, nothing more. Every other packet
(connection, auth, the dump request, table maps, transaction events, unknown and
partial-JSON events) goes to the library unchanged, so it behaves exactly as it did.

Formats (MySQL and MariaDB alike): WRITE/UPDATE/DELETE_ROWS v1 (types 23-25, MariaDB's and
MySQL 5.5's) and v2 (types 30-32, MySQL 5.6+, with the extra-data block after the flags).
MySQL's PARTIAL_UPDATE_ROWS (39) and MariaDB's compressed rows events are left to the library,
where the source refuses them as before.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from pymysql.protocol import MysqlPacket
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from cdc_platform.errors import SourceError
from cdc_platform.source.library_internals import (
    PacketRead,
    reader_checksum,
    reader_connection,
    reader_post_header_lengths,
    wrap_packet_reads,
)

__all__ = [
    "DELETE",
    "UPDATE",
    "WRITE",
    "EventHeader",
    "FramingReader",
    "RowsFrame",
    "frame_library_event",
    "frame_rows",
    "header_of",
    "rows_table_id",
]

WRITE: Final = 0
UPDATE: Final = 1
DELETE: Final = 2

_V1: Final = {0x17: WRITE, 0x18: UPDATE, 0x19: DELETE}
_V2: Final = {0x1E: WRITE, 0x1F: UPDATE, 0x20: DELETE}
_KINDS: Final = {**_V1, **_V2}

_HEADER = struct.Struct("<xIBIIIH")
"""The OK byte, then the common event header: timestamp, type, server id, event size (header
and checksum included), end position, flags."""
_HEADER_END: Final = 1 + 19
_TYPE_AT: Final = 1 + 4


@dataclass(slots=True)
class RowsFrame:
    """One rows event as the assembler needs it: where it is, which table, the row bytes.

    ``kind`` is :data:`WRITE`, :data:`UPDATE` or :data:`DELETE`; ``present`` (and for updates
    ``present_after``) the columns-present bitmaps; ``rows`` the row images' bytes (checksum
    excluded); ``log_pos`` the end of the event and ``event_size`` its full size, as in the
    library's packet.
    """

    kind: int
    table_id: int
    present: bytes
    present_after: bytes
    rows: bytes = field(repr=False)
    timestamp: int
    server_id: int
    event_size: int
    log_pos: int


def rows_table_id(data: bytes) -> int | None:
    """The table id of a rows-event packet this module frames, None for any other packet."""
    if len(data) < _HEADER_END + 6 or data[0] != 0 or data[_TYPE_AT] not in _KINDS:
        return None
    return int.from_bytes(data[_HEADER_END : _HEADER_END + 6], "little")


def frame_rows(
    data: bytes, *, checksum: bool, post_header_lengths: bytes | tuple[int, ...] | None = None
) -> RowsFrame:
    """Frame the rows-event packet ``data`` (as :func:`rows_table_id` accepted it).

    ``post_header_lengths`` are the format description event's (a server may declare a
    longer post-header than the 8/10 bytes read here: the rest is skipped, as the library
    does). Raises SourceError when the declared sizes do not fit the packet.
    """
    try:
        timestamp, event_type, server_id, event_size, log_pos, _flags = _HEADER.unpack_from(data)
        kind = _KINDS[event_type]
        end = 1 + event_size - (4 if checksum else 0)
        if end > len(data):
            raise ValueError(f"event size {event_size} beyond the packet's {len(data) - 1} bytes")
        pos = _HEADER_END
        table_id = int.from_bytes(data[pos : pos + 6], "little")
        known = 8 if event_type in _V1 else 10
        declared = known
        index = event_type - 1
        if post_header_lengths and 0 <= index < len(post_header_lengths):
            declared = post_header_lengths[index]
        if declared < known:
            raise ValueError(f"post-header of {declared} bytes, shorter than {known}")
        pos += 8
        if event_type in _V2:
            extra = data[pos] | data[pos + 1] << 8  # includes its own two bytes
            pos += 2 + (declared - known) + extra - 2
        else:
            pos += declared - known
        columns, pos = _length_encoded(data, pos)
        width = (columns + 7) // 8
        present = data[pos : pos + width]
        pos += width
        present_after = b""
        if kind == UPDATE:
            present_after = data[pos : pos + width]
            pos += width
        if pos > end:
            raise ValueError(f"the header runs to byte {pos} of an event ending at {end}")
    except (ValueError, IndexError, KeyError, struct.error) as exc:
        raise SourceError(f"malformed rows event in the binlog stream: {exc}") from None
    return RowsFrame(
        kind,
        table_id,
        present,
        present_after,
        data[pos:end],
        timestamp,
        server_id,
        event_size,
        log_pos,
    )


def frame_library_event(event: Any) -> RowsFrame:
    """The frame of a rows event the library parsed: its row bytes are the packet's rest."""
    kind = _LIBRARY_KINDS[type(event)]
    packet = event.packet
    return RowsFrame(
        kind, event.table_id, event.columns_present_bitmap,
        event.columns_present_bitmap2 if kind == UPDATE else b"",
        packet.read(event.event_size - packet.read_bytes), event.timestamp,
        packet.server_id, packet.event_size, packet.log_pos,
    )  # fmt: skip


_LIBRARY_KINDS: Final = {WriteRowsEvent: WRITE, UpdateRowsEvent: UPDATE, DeleteRowsEvent: DELETE}


class EventHeader(Protocol):
    """Where an event ends, its size and the server that wrote it."""

    log_pos: int
    event_size: int
    server_id: int


def header_of(event: Any) -> EventHeader:
    """An event's header fields: the library keeps them on its packet wrapper, a framed rows
    event on itself."""
    return event if type(event) is RowsFrame else event.packet


def _length_encoded(data: bytes, pos: int) -> tuple[int, int]:
    first = data[pos]
    if first < 251:
        return first, pos + 1
    width = {252: 2, 253: 3, 254: 8}.get(first)
    if width is None:
        raise ValueError(f"bad length-encoded integer prefix {first}")
    return int.from_bytes(data[pos + 1 : pos + 1 + width], "little"), pos + 1 + width


class _Framed(Exception):  # noqa: N818 -- not an error: carries a frame out of the library
    """Raised from inside the library's read loop with a framed rows event, so the library
    neither builds its objects for it nor loops past it."""

    def __init__(self, frame: RowsFrame) -> None:
        super().__init__()
        self.frame = frame


class FramingReader(BinLogStreamReader):  # type: ignore[misc]  # mysql-replication ships no types: its reader is Any
    """The library's stream reader, except that the rows events of tables ``known(table_id)``
    accepts come out of :meth:`fetchone` as :class:`RowsFrame`.

    The library still connects, authenticates, sends the dump request, reads the format
    description, rotations and table maps (and keeps its table map for them); it reads every
    packet too, through the stream connection's ``_read_packet``, which this reader wraps:
    a rows packet of a known table is framed there and carried out of the library's loop by
    an exception, before the library parses it. The reader internals this needs (the stream
    connection, the checksum and post-header settings it learned at connect) are reached
    through :mod:`.library_internals`.
    """

    def __init__(self, *args: Any, known: Callable[[int], bool], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._known = known
        self._framed_connection: Any = None

    def fetchone(self) -> Any:
        conn = reader_connection(self)
        if conn is not None and conn is not self._framed_connection:
            self._frame_through(conn)
        try:
            return super().fetchone()
        except _Framed as framed:
            self.log_pos = framed.frame.log_pos
            return framed.frame

    def _frame_through(self, conn: Any) -> None:
        """Wrap ``conn``'s packet reads: known rows events leave the library framed."""
        known = self._known

        def framing(read: PacketRead) -> PacketRead:
            def read_packet(packet_type: type = MysqlPacket) -> Any:
                packet = read(packet_type)
                data: bytes = packet.get_all_data()
                table_id = rows_table_id(data)
                if table_id is not None and known(table_id):
                    raise _Framed(
                        frame_rows(
                            data,
                            checksum=reader_checksum(self),
                            post_header_lengths=reader_post_header_lengths(self),
                        )
                    )
                return packet

            return read_packet

        wrap_packet_reads(conn, framing)
        self._framed_connection = conn
