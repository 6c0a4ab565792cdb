"""The start-by-timestamp search over MySQL binlog events given as bytes.

No MySQL server runs here (MariaDB always writes GTID events), so the events MySQL 8 writes
with GTIDs off (its default) are built byte for byte per the MySQL binlog format: a 19-byte
header, the body, a CRC32 checksum. They go through the library's own packet parser, with
the event set the header scan asks for, into the same function the scan of a server's binlog
uses (:func:`transaction_heads`). What this does not show: a real MySQL server sending them.
"""

from __future__ import annotations

import struct
import time
import zlib
from types import SimpleNamespace
from typing import Any

import pytest
from pymysql.protocol import MysqlPacket
from pymysqlreplication.packet import BinLogPacketWrapper

from cdc_platform.events import ResumePosition
from cdc_platform.source.stream.start_position import (
    HEAD_EVENTS,
    BinlogFiles,
    TransactionHead,
    find_time,
    transaction_heads,
)
from cdc_platform.testing.library_internals import library_event_filter

pytestmark = pytest.mark.unit

T = 1_800_000_000
FILE = "binlog.000001"
SERVER = 1
SID = bytes.fromhex("3e11fa4771ca11e19e33c80aa9429562")

QUERY, ROTATE, FORMAT_DESCRIPTION, XID, TABLE_MAP, WRITE_ROWS_V2 = 2, 4, 15, 16, 19, 30
GTID, ANONYMOUS_GTID, PREVIOUS_GTIDS = 33, 34, 35


def _gtid_body(sid: bytes, gno: int, sequence: int, at: int) -> bytes:
    """Gtid_log_event as MySQL 8.0 writes it (an anonymous one has a zero SID and GNO):
    flags, SID, GNO, logical-clock type code 2, last_committed, sequence_number, the 7-byte
    immediate commit time (top bit clear: no original time follows), the transaction length
    (a packed integer) and the 4-byte immediate server version (top bit clear)."""
    return (
        b"\x00"
        + sid
        + struct.pack("<Q", gno)
        + b"\x02"
        + struct.pack("<QQ", sequence - 1, sequence)
        + (at * 1_000_000).to_bytes(7, "little")
        + bytes([200])
        + struct.pack("<I", 80036)
    )


class _Binlog:
    """Events of one file from offset 4, each as the dump protocol sends it: the OK byte,
    the header (time, type, server id, size, end position, flags), body, CRC32."""

    def __init__(self) -> None:
        self.pos = 4
        self.packets: list[bytes] = []
        self.starts: list[int] = []

    def add(self, kind: int, at: int, body: bytes) -> int:
        size = 19 + len(body) + 4
        start, self.pos = self.pos, self.pos + size
        header = struct.pack("<IBIIIH", at, kind, SERVER, size, self.pos, 0)
        crc = struct.pack("<I", zlib.crc32(header + body) & 0xFFFFFFFF)
        self.packets.append(b"\x00" + header + body + crc)
        self.starts.append(start)
        return start

    def transaction(self, at: int, head: bytes, kind: int = ANONYMOUS_GTID) -> int:
        """A row-based transaction: its head, BEGIN, a table map, a rows event, Xid."""
        start = self.add(kind, at, head)
        self.add(QUERY, at, struct.pack("<IIBHH", 7, 0, 2, 0, 0) + b"db\x00BEGIN")
        self.add(TABLE_MAP, at, b"\x01" * 30)
        self.add(WRITE_ROWS_V2, at, b"\x02" * 40)
        self.add(XID, at, struct.pack("<Q", 99))
        return start


def _library_events(packets: list[bytes]) -> list[Any]:
    """The packets through the library's parser, with the events the header scan allows."""
    allowed = library_event_filter(HEAD_EVENTS)  # the reader's own filter
    out = []
    for packet in packets:
        wrapped = BinLogPacketWrapper(
            MysqlPacket(packet, "utf8"),
            {},
            # The reader's control connection, as the reader equips it for a MySQL server.
            SimpleNamespace(charset="utf8mb4", _get_dbms=lambda: "mysql"),
            (8, 0, 36),
            True,  # binlog_checksum=CRC32, MySQL's default
            allowed,
            None, None, None, None,
            True,  # freeze_schema
            False,  # ignore_decode_errors
            True,  # verify_checksum: the bytes are well formed
            False,  # optional_meta_data
            False,  # enable_logging
        )  # fmt: skip
        if wrapped.event is not None:
            out.append(wrapped.event)
    return out


def test_anonymous_gtid_events_in_mysql_bytes_are_transaction_heads() -> None:
    binlog = _Binlog()
    binlog.add(FORMAT_DESCRIPTION, T, b"\x04\x00" + b"8.0.36".ljust(50, b"\x00") + b"\x00" * 40)
    binlog.add(PREVIOUS_GTIDS, T, struct.pack("<Q", 0))
    first = binlog.transaction(T + 10, _gtid_body(b"\x00" * 16, 0, 1, T + 10))
    second = binlog.transaction(T + 20, _gtid_body(b"\x00" * 16, 0, 2, T + 20))
    third = binlog.transaction(T + 30, _gtid_body(SID, 7, 3, T + 30), kind=GTID)
    binlog.add(ROTATE, T + 31, struct.pack("<Q", 4) + b"binlog.000002")
    events = _library_events(binlog.packets)
    heads = list(transaction_heads(events, FILE))
    assert heads == [
        TransactionHead(FILE, first, T + 10, None),
        TransactionHead(FILE, second, T + 20, None),
        TransactionHead(FILE, third, T + 30, "3e11fa47-71ca-11e1-9e33-c80aa9429562:7"),
    ]
    # The search over them starts at the first transaction of the target second or later.
    files = BinlogFiles(
        created=lambda file: T,
        heads=lambda file: iter(heads),
        holds_events=lambda file: True,
        end=lambda: ResumePosition("binlog.000002", 4),
    )
    target = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(T + 15))
    assert find_time([FILE], target, f"{FILE}:4", files) == ResumePosition(FILE, second)


def test_the_same_bytes_without_the_anonymous_events_yield_no_head() -> None:
    """What the search saw before anonymous GTIDs were recognised: rows, no head; find_time
    then refuses (tests/unit/test_start_search.py) instead of starting at the end."""
    binlog = _Binlog()
    binlog.transaction(T + 10, struct.pack("<IIBHH", 7, 0, 2, 0, 0) + b"db\x00BEGIN", kind=QUERY)
    assert list(transaction_heads(_library_events(binlog.packets), FILE)) == []
