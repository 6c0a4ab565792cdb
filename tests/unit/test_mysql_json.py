"""MySQL's binary JSON, decoded from the binlog, is the text the server prints for it.

No MySQL server runs here (MariaDB stores JSON as LONGTEXT), so the documents are built byte
for byte per MySQL's binary JSON format (sql-common/json_binary.h): a type byte, objects and
arrays in a small (2-byte offsets) or large (4-byte) form, scalars inline in their entry when
they fit, strings and opaque values behind a variable-length size. Each expected text is
what ``CAST(doc AS CHAR)`` prints for the document by MySQL's rules (json_dom.cc
``wrapper_to_string``): ", " and ": " separators, keys in stored order, doubles as
``my_gcvt`` writes them, DECIMAL with its scale's digits, times with six fraction digits,
other opaque values as "base64:typeN:...". The stream (a rows event through
:class:`RowDecoder`) and the snapshot (the server's text through the snapshot's conversion)
must both give that text. What this does not show: a real MySQL server printing them.
"""

from __future__ import annotations

import base64
import json
import re
import struct
from typing import Any

import pytest

from cdc_platform.errors import SourceError
from cdc_platform.source.reading.column_reads import column_read as _column
from cdc_platform.source.values import ColumnSpec, FieldType, RowDecoder

pytestmark = pytest.mark.unit

Value = tuple[int, bytes]
"""A binary JSON value: its type byte and its bytes (without the type byte)."""

_INLINE_SMALL = {0x04, 0x05, 0x06}
_INLINE_LARGE = _INLINE_SMALL | {0x07, 0x08}

DECIMAL, DATE, TIME, DATETIME, TIMESTAMP = 246, 10, 11, 12, 7
VARCHAR, BLOB, VAR_STRING = 15, 252, 253


def _size(n: int) -> bytes:
    """The variable-length size of strings and opaque values: 7 bits a byte, low first."""
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def literal(value: bool | None) -> Value:
    return 0x04, bytes([{None: 0, True: 1, False: 2}[value]])


def number(kind: int, fmt: str, value: float) -> Value:
    return kind, struct.pack(fmt, value)


def string(text: str) -> Value:
    raw = text.encode()
    return 0x0C, _size(len(raw)) + raw


def opaque(field_type: int, data: bytes) -> Value:
    return 0x0F, bytes([field_type]) + _size(len(data)) + data


def _container(values: list[Value], keys: list[str] | None, large: bool) -> bytes:
    """An object's or array's bytes as MySQL's serializer lays them out: count, size, key
    entries (offset, 2-byte length), value entries (type, offset or the inlined value),
    the keys, then the values that are not inlined, offsets from the container's start."""
    width = 4 if large else 2
    fmt = "<I" if large else "<H"
    inline = _INLINE_LARGE if large else _INLINE_SMALL
    encoded_keys = [k.encode() for k in keys or []]
    header = 2 * width + len(values) * (1 + width) + len(encoded_keys) * (width + 2)
    key_entries, key_bytes = b"", b""
    for key in encoded_keys:
        key_entries += struct.pack(fmt, header + len(key_bytes)) + struct.pack("<H", len(key))
        key_bytes += key
    value_entries, value_bytes = b"", b""
    at = header + len(key_bytes)
    for kind, data in values:
        if kind in inline:
            value_entries += bytes([kind]) + data.ljust(width, b"\x00")
        else:
            value_entries += bytes([kind]) + struct.pack(fmt, at + len(value_bytes))
            value_bytes += data
    body = key_entries + value_entries + key_bytes + value_bytes
    return struct.pack(fmt, len(values)) + struct.pack(fmt, 2 * width + len(body)) + body


def obj(members: list[tuple[str, Value]], *, large: bool = False) -> Value:
    """An object, members in the order given (MySQL stores keys by length, then bytes)."""
    body = _container([v for _, v in members], [k for k, _ in members], large)
    return (0x01 if large else 0x00), body


def arr(values: list[Value], *, large: bool = False) -> Value:
    return (0x03 if large else 0x02), _container(values, None, large)


def document(value: Value) -> bytes:
    kind, data = value
    return bytes([kind]) + data


def packed_time(
    hours: int, minutes: int, seconds: int, micros: int = 0, *, neg: bool = False
) -> bytes:
    """TIME_to_longlong_time_packed: hours (days folded in) << 12 | minutes << 6 | seconds,
    shifted 24 bits, plus the microseconds; negated for a negative time; 8 bytes LE."""
    packed = ((hours << 12 | minutes << 6 | seconds) << 24) + micros
    return struct.pack("<q", -packed if neg else packed)


def packed_datetime(
    day: tuple[int, int, int], hms: tuple[int, int, int] = (0, 0, 0), us: int = 0
) -> bytes:
    """TIME_to_longlong_datetime_packed: ((year * 13 + month) << 5 | day) << 17 | h << 12 |
    m << 6 | s, shifted 24 bits, plus the microseconds."""
    (y, mo, d), (h, mi, s) = day, hms
    ymdhms = (((y * 13 + mo) << 5 | d) << 17) | h << 12 | mi << 6 | s
    return struct.pack("<q", (ymdhms << 24) + us)


# DECIMAL in JSON: precision and scale bytes, then decimal2bin (big-endian digit groups, the
# sign bit flipped, every bit inverted when negative). DECIMAL(5,2): 2 bytes for the 3
# integer digits, 1 for the 2 fraction digits.
DECIMAL_1_50 = bytes([5, 2]) + bytes.fromhex("800132")
DECIMAL_MINUS_12_50 = bytes([5, 2]) + bytes.fromhex("7ff3cd")
# DECIMAL(21,10) 12345678901.0000000001: 11 integer digits (1 byte for the leading 2, then a
# 4-byte group of 9), 10 fraction digits (a group of 9, then 1 byte for the last digit).
DECIMAL_WIDE = bytes([21, 10, 0x80 | 12]) + struct.pack(">II", 345678901, 0) + bytes([1])

BINARY = bytes(range(256))[::5]  # 52 bytes, base64 of 72 characters: no line break
LONG_BINARY = bytes(range(200))  # base64 of 268 characters: breaks after 76, 152, 228
_LINES = re.compile(".{1,76}")

CASES: list[tuple[str, bytes, str]] = [
    (
        "object and array",
        document(obj([("a", number(0x05, "<h", 1)), ("b", arr([literal(True), literal(None)]))])),
        '{"a": 1, "b": [true, null]}',
    ),
    ("empty containers", document(arr([obj([]), arr([])])), "[{}, []]"),
    (
        "decimal keeps its scale",
        document(
            obj([("p", opaque(DECIMAL, DECIMAL_1_50)), ("n", opaque(DECIMAL, DECIMAL_MINUS_12_50))])
        ),
        '{"p": 1.50, "n": -12.50}',
    ),
    ("wide decimal", document(opaque(DECIMAL, DECIMAL_WIDE)), "12345678901.0000000001"),
    (
        "negative time",
        document(opaque(TIME, packed_time(1, 2, 3, 500000, neg=True))),
        '"-01:02:03.500000"',
    ),
    (
        "times of 24 hours and more",
        document(
            arr(
                [
                    opaque(TIME, packed_time(838, 59, 59)),
                    opaque(TIME, packed_time(838, 59, 59, neg=True)),
                    opaque(TIME, packed_time(24, 0, 0)),
                ]
            )
        ),
        '["838:59:59.000000", "-838:59:59.000000", "24:00:00.000000"]',
    ),
    ("date", document(opaque(DATE, packed_datetime((2024, 1, 2)))), '"2024-01-02"'),
    (
        "datetime and timestamp",
        document(
            arr(
                [
                    opaque(DATETIME, packed_datetime((2024, 1, 2), (3, 4, 5))),
                    opaque(TIMESTAMP, packed_datetime((2024, 12, 31), (23, 59, 59), 250000)),
                ]
            )
        ),
        '["2024-01-02 03:04:05.000000", "2024-12-31 23:59:59.250000"]',
    ),
    (
        "opaque binary as base64 with its type",
        document(opaque(VARCHAR, BINARY)),
        json.dumps("base64:type15:" + base64.b64encode(BINARY).decode()),
    ),
    (
        "long opaque value: base64 broken into lines of 76 (the newline escaped)",
        document(opaque(BLOB, LONG_BINARY)),
        json.dumps(
            "base64:type252:" + "\n".join(_LINES.findall(base64.b64encode(LONG_BINARY).decode()))
        ),
    ),
    ("opaque string", document(opaque(VAR_STRING, "hé".encode())), '"hé"'),
    (
        "doubles as my_gcvt writes them",
        document(
            arr(
                [
                    number(0x0B, "<d", v)
                    for v in (
                        1.5,
                        100.0,
                        0.1,
                        -0.0,
                        1e15,
                        1e14,
                        1e-7,
                        1e-15,
                        1e-16,
                        1e300,
                        5e-324,
                        1.2345678901234568e17,
                        1234567890123456.8,
                        -2.5e-5,
                    )
                ]
            )
        ),
        "[1.5, 100.0, 0.1, -0.0, 1e15, 100000000000000.0, 0.0000001, 0.000000000000001, "
        "1e-16, 1e300, 5e-324, 1.2345678901234568e17, 1234567890123456.8, -0.000025]",
    ),
    (
        "integers of every width",
        document(
            arr(
                [
                    number(0x05, "<h", -32768),
                    number(0x06, "<H", 65535),
                    number(0x07, "<i", -(2**31)),
                    number(0x08, "<I", 2**32 - 1),
                    number(0x09, "<q", -(2**63)),
                    number(0x0A, "<Q", 2**64 - 1),
                ]
            )
        ),
        "[-32768, 65535, -2147483648, 4294967295, -9223372036854775808, 18446744073709551615]",
    ),
    (
        "large object and array (int32 inlined)",
        document(
            obj(
                [
                    (
                        "k",
                        arr(
                            [number(0x07, "<i", -7), number(0x08, "<I", 7), string("x")], large=True
                        ),
                    ),
                    ("é", literal(False)),
                ],
                large=True,
            )
        ),
        '{"k": [-7, 7, "x"], "é": false}',
    ),
    (
        "strings escaped as MySQL escapes them",
        document(obj([('q"k', string('a"b\\c\n\t\x01\x1f/\x7fé€😀'))])),
        '{"q\\"k": "a\\"b\\\\c\\n\\t\\u0001\\u001f/\x7fé€😀"}',
    ),
    ("long string (two-byte size)", document(string("x" * 300)), '"' + "x" * 300 + '"'),
    ("top-level scalars", document(literal(None)), "null"),
    ("top-level string keeps its quotes", document(string("s")), '"s"'),
]

DOC = ColumnSpec("doc", FieldType.JSON, length_size=4)
COLUMNS = [ColumnSpec("id", FieldType.LONG), DOC]


def _decoder() -> RowDecoder:
    """The stream's decoder of a table with a JSON column, as the table maps build it."""
    return RowDecoder("shop", "docs", COLUMNS, [0])


def _stream(payload: bytes) -> Any:
    """The JSON column's value in the image of a write-rows row holding ``payload``."""
    row = b"\x00" + struct.pack("<i", 1) + struct.pack("<I", len(payload)) + payload
    ((image, _pk),) = _decoder().images(row, b"\x03")
    return json.loads(image)["doc"]


_SNAPSHOT = _column(
    {"COLUMN_NAME": "doc", "DATA_TYPE": "json", "COLUMN_TYPE": "json"}, False, False
)


@pytest.mark.parametrize(("payload", "text"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_stream_gives_the_text_mysql_prints(payload: bytes, text: str) -> None:
    assert _stream(payload) == text


@pytest.mark.parametrize("text", [c[2] for c in CASES], ids=[c[0] for c in CASES])
def test_the_snapshot_keeps_the_text_mysql_prints(text: str) -> None:
    """The snapshot selects ``CAST(doc AS CHAR)``: the server's text, kept as it is."""
    assert _SNAPSHOT.select == "CAST(`doc` AS CHAR)"
    assert _SNAPSHOT.convert(text) == text


def test_an_empty_value_is_the_json_null_mysql_reads_it_as() -> None:
    """A NOT NULL JSON column given NULL in non-strict mode stores nothing; the server reads
    (and a snapshot prints) the JSON literal null. SQL NULL stays null."""
    assert _stream(b"") == "null"
    row = b"\x02" + struct.pack("<i", 1)  # doc is SQL NULL
    ((image, _pk),) = _decoder().images(row, b"\x03")
    assert json.loads(image)["doc"] is None


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        (b"\x0d\x00", "type 13"),
        (document(obj([("a", string("abc"))]))[:-2], "end"),
        (b"\x00" + struct.pack("<HH", 5, 200), "end"),
        (document(opaque(TIME, b"\x01\x02")), "8 bytes"),
        (document(string("x"))[:-1] + b"\xff", "UTF-8"),
        (b"\x04\x07", "literal"),
    ],
    ids=[
        "unknown type",
        "truncated",
        "size past the end",
        "short time",
        "bad utf-8",
        "bad literal",
    ],
)
def test_a_corrupt_document_is_a_source_error_naming_the_table_and_column(
    payload: bytes, why: str
) -> None:
    with pytest.raises(SourceError, match=rf"shop\.docs.*'doc'.*{why}") as caught:
        _stream(payload)
    assert "MySQL binary JSON" in str(caught.value)


def test_a_corrupt_document_whose_entries_share_values_is_refused_early() -> None:
    """Each level's two entries point at the same nested array: 2**40 values to print if
    followed; a real document gives every value an entry of its own, so it is refused."""
    level = b"\x00\x00\x04\x00"  # an empty small array: count 0, size 4
    for _ in range(40):
        entries = b"\x02\x0a\x00" * 2  # two arrays, both at offset 10 (right after the header)
        level = struct.pack("<HH", 2, 10 + len(level)) + entries + level
    with pytest.raises(SourceError, match=r"shop\.docs.*'doc'.*same values"):
        _stream(b"\x02" + level)
