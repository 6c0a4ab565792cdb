"""Rows-event framing from raw packets: v1 and v2 layouts, checksums, declared post-header
lengths, extra data, and refusal of events whose sizes do not fit.

The packets are built here from the documented layout (OK byte, 19-byte common header,
post-header, column count, bitmaps, rows, optional CRC32), independently of the framer.
"""

from __future__ import annotations

import pickle
import struct

import pytest

from cdc_platform.errors import SourceError
from cdc_platform.source.stream.rows_framing import (
    DELETE,
    UPDATE,
    WRITE,
    frame_rows,
    rows_table_id,
)
from cdc_platform.source.values import ColumnSpec, FieldType, RowDecoder

pytestmark = pytest.mark.unit


def _lenenc(n: int) -> bytes:
    if n < 251:
        return bytes([n])
    if n < 1 << 16:
        return b"\xfc" + n.to_bytes(2, "little")
    return b"\xfd" + n.to_bytes(3, "little")


def _packet(
    event_type: int,
    table_id: int,
    columns: int,
    rows: bytes,
    *,
    bitmaps: int = 1,
    extra: bytes = b"",
    post_header_pad: bytes = b"",
    checksum: bool = True,
) -> bytes:
    body = table_id.to_bytes(6, "little") + struct.pack("<H", 1)
    if event_type in (0x1E, 0x1F, 0x20):
        body += struct.pack("<H", 2 + len(extra))
    body += post_header_pad
    if event_type in (0x1E, 0x1F, 0x20):
        body += extra
    width = (columns + 7) // 8
    body += _lenenc(columns) + (b"\xff" * width) * bitmaps + rows
    size = 19 + len(body) + (4 if checksum else 0)
    header = struct.pack("<IBIIIH", 1_700_000_000, event_type, 7, size, 4000, 0)
    return b"\x00" + header + body + (b"CRC!" if checksum else b"")


@pytest.mark.parametrize(
    ("event_type", "kind"),
    [(0x17, WRITE), (0x19, DELETE), (0x1E, WRITE), (0x20, DELETE)],
)
def test_frames_write_and_delete_events_v1_and_v2(event_type: int, kind: int) -> None:
    data = _packet(event_type, 0x0102030405, 3, b"ROWBYTES")
    assert rows_table_id(data) == 0x0102030405
    frame = frame_rows(data, checksum=True)
    assert (frame.kind, frame.table_id, frame.present, frame.present_after) == (
        kind,
        0x0102030405,
        b"\xff",
        b"",
    )
    assert frame.rows == b"ROWBYTES"  # the checksum is not row data
    assert (frame.timestamp, frame.server_id, frame.log_pos) == (1_700_000_000, 7, 4000)
    assert frame.event_size == len(data) - 1


@pytest.mark.parametrize("event_type", [0x18, 0x1F])
def test_update_events_carry_both_bitmaps(event_type: int) -> None:
    data = _packet(event_type, 9, 300, b"BEFORE+AFTER", bitmaps=2, checksum=False)
    frame = frame_rows(data, checksum=False)
    assert frame.kind == UPDATE
    assert len(frame.present) == len(frame.present_after) == 38  # 300 columns
    assert frame.rows == b"BEFORE+AFTER"


def test_v2_extra_data_and_a_longer_declared_post_header_are_skipped() -> None:
    lengths = [0] * 40
    lengths[0x1E - 1] = 12  # two bytes more than the 10 read
    data = _packet(0x1E, 5, 2, b"R", extra=b"\x01\x07\x00", post_header_pad=b"PP")
    frame = frame_rows(data, checksum=True, post_header_lengths=tuple(lengths))
    assert frame.rows == b"R"


def test_other_packets_are_not_framed() -> None:
    assert rows_table_id(_packet(0x1E, 5, 2, b"R")[:10]) is None
    partial_json = bytearray(_packet(0x1F, 5, 2, b"R", bitmaps=2))
    partial_json[5] = 0x27  # PARTIAL_UPDATE_ROWS: left to the library, which refuses it
    assert rows_table_id(bytes(partial_json)) is None
    error = b"\xff" + _packet(0x1E, 5, 2, b"R")[1:]
    assert rows_table_id(error) is None


def test_sizes_that_do_not_fit_are_refused() -> None:
    data = bytearray(_packet(0x17, 5, 2, b"R"))
    struct.pack_into("<I", data, 1 + 9, 10_000)  # event size beyond the packet
    with pytest.raises(SourceError, match="malformed rows event"):
        frame_rows(bytes(data), checksum=True)
    lengths = [0] * 40
    lengths[0x17 - 1] = 6  # shorter than the 8 bytes of a v1 post-header
    with pytest.raises(SourceError, match="post-header"):
        frame_rows(_packet(0x17, 5, 2, b"R"), checksum=True, post_header_lengths=lengths)


def test_a_row_decoder_pickles_as_its_definition() -> None:
    columns = [
        ColumnSpec("a", FieldType.LONG),
        ColumnSpec("b", FieldType.VARCHAR, encoding="utf8mb4", max_length=40),
    ]
    decoder = RowDecoder("db", "t", columns, primary_key=[1, 0])
    copy = pickle.loads(pickle.dumps(decoder))
    row = b"\x00" + struct.pack("<i", 7) + b"\x02hi"
    assert copy.images(row, b"\x03") == decoder.images(row, b"\x03")
    assert copy.primary_key == ("b", "a")
    assert copy.columns_json == decoder.columns_json
