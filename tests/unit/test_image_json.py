"""Row images written through orjson are the standard library's text, byte for byte."""

from __future__ import annotations

import math
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_platform.source.values import ColumnSpec, FieldType, RowDecoder, dumps, make_reader
from cdc_platform.source.values.image_json import FAST_JSON, image_encoder, native_reader

pytestmark = [
    pytest.mark.unit,
    pytest.mark.skipif(not FAST_JSON, reason="orjson is not installed"),
]

FAST = image_encoder(True)

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()  # beyond 64 bits too: orjson refuses them, the fallback writes them
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_documents = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


def fragment_of(column: ColumnSpec, value: Any) -> Any:
    """``value`` as the reader of ``column`` hands it to the image (wrapped if need be)."""
    if column.type == FieldType.DOUBLE:  # read from its binlog bytes
        return native_reader(column, make_reader(column))(struct.pack("<d", value), 0)[0]
    read = native_reader(column, lambda data, pos: (value, pos))
    return read(b"", 0)[0]


DOUBLE = ColumnSpec("d", FieldType.DOUBLE)
FLOAT = ColumnSpec("f", FieldType.FLOAT)
JSON = ColumnSpec("j", FieldType.JSON, length_size=4)
MARIADB_JSON = ColumnSpec("m", FieldType.BLOB, encoding="utf8mb4", length_size=4, logical="json")


@settings(max_examples=400, deadline=None)
@given(st.floats(allow_nan=True, allow_infinity=True))
def test_floats_are_written_as_the_standard_library_writes_them(value: float) -> None:
    for column in (DOUBLE, FLOAT):
        assert FAST({"d": fragment_of(column, value)}) == dumps({"d": value})


@pytest.mark.parametrize(
    "value", [1e-05, 1.5212603486793025e-05, 1e16, 1e-7, -0.0, 5e-324, 1.7976931348623157e308]
)
def test_floats_orjson_writes_differently_are_written_as_the_standard_library_does(
    value: float,
) -> None:
    for column in (DOUBLE, FLOAT):
        assert FAST({"d": fragment_of(column, value)}) == dumps({"d": value})
        assert FAST(fragment_of(column, value)) == dumps(value)  # a one-column key's value


@settings(max_examples=300, deadline=None)
@given(json_documents)
def test_json_column_values_are_the_documents_text(doc: Any) -> None:
    """A JSON column's value is a JSON string holding the document's text: the literal null
    stays apart from SQL NULL, a top-level string keeps its quotes, big integers their digits."""
    text = dumps(doc)
    encoded = text.encode()
    # MySQL: the document's text held as a binary JSON string (type 12, a one-to-five byte
    # size), printed as MySQL prints a string: the text in quotes, escaped.
    size = bytearray()
    n = len(encoded)
    while True:
        size.append((n & 0x7F) | (0x80 if n >> 7 else 0))
        n >>= 7
        if not n:
            break
    binary = b"\x0c" + bytes(size) + encoded
    for column, expected, data in (
        (JSON, dumps(text), len(binary).to_bytes(4, "little") + binary),
        (MARIADB_JSON, text, len(encoded).to_bytes(4, "little") + encoded),
    ):
        value = native_reader(column, make_reader(column))(data, 0)[0]
        assert value == expected
        assert FAST({"j": value, "n": None}) == dumps({"j": expected, "n": None})


@settings(max_examples=300, deadline=None)
@given(
    st.text(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.lists(st.text(max_size=5), max_size=4),
)
def test_native_values_go_to_orjson_as_they_are(text: str, number: int, members: list[str]) -> None:
    for column in (
        ColumnSpec("s", FieldType.VARCHAR, encoding="utf8mb4"),
        ColumnSpec("i", FieldType.LONGLONG, unsigned=True),
        ColumnSpec("e", FieldType.SET),
    ):
        assert native_reader(column, _identity) is _identity
    image = {"s": text, "i": number, "e": members, "g": {"srid": 4326, "wkb": "AQ=="}}
    assert FAST(image) == dumps(image)


def test_every_code_point_is_escaped_as_the_standard_library_escapes_it() -> None:
    text = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000)
    assert FAST({"s": text}) == dumps({"s": text})


def test_what_orjson_refuses_is_written_by_the_standard_library() -> None:
    image = {"big": 2**70, "d": fragment_of(DOUBLE, 1e-05), "s": "x"}
    assert FAST(image) == dumps({"big": 2**70, "d": 1e-05, "s": "x"})


def test_a_decoder_writes_the_same_images_with_and_without_orjson() -> None:
    columns = [
        ColumnSpec("id", FieldType.LONGLONG),
        ColumnSpec("f", FieldType.FLOAT),
        ColumnSpec("d", FieldType.DOUBLE),
        ColumnSpec("s", FieldType.VARCHAR, encoding="utf8mb4", max_length=40),
    ]
    rows = b""
    for i, value in enumerate([1.5e-05, -0.0, 123456.789, 1e300, math.pi]):
        text = f"é{i}\n".encode()
        rows += b"\x00" + struct.pack("<q", i) + struct.pack("<f", min(value, 3e38))
        rows += struct.pack("<d", value) + bytes([len(text)]) + text
    rows += b"\x0e" + struct.pack("<q", 9)  # NULLs: f, d and s
    fast = RowDecoder("db", "t", columns, [1], fast_json=True)
    slow = RowDecoder("db", "t", columns, [1], fast_json=False)
    assert fast.images(rows, b"\x0f") == slow.images(rows, b"\x0f")
    assert len(fast.images(rows, b"\x0f")) == 6


def _identity(data: bytes, pos: int) -> tuple[Any, int]:
    return data, pos
