"""Column decoding from binlog bytes: every type, the library's defects, row framing.

The byte encoders here follow MySQL's storage formats (decimal2bin, my_time_packed_to_binary,
TIME_to_longlong_datetime_packed) independently of the decoder, so round-trip properties
check the decoder against the format, not against itself.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import struct
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cdc_platform.errors import SourceError, SourceSettingsError
from cdc_platform.source.values import (
    ColumnSpec,
    FieldType,
    RowDecoder,
    dumps,
    format_inet6,
    make_reader,
)
from cdc_platform.testing.binlog_values import encode_datetime2, encode_decimal, encode_time2

pytestmark = pytest.mark.unit


def decode(column: ColumnSpec, data: bytes) -> object:
    """Decode one value and check the reader consumed exactly its bytes."""
    value, end = make_reader(column)(data, 0)
    assert end == len(data)
    return value


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _truncate(micros: int, fsp: int) -> int:
    step = 10 ** (6 - fsp)
    return micros // step * step


# -- numbers ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("type_", "unsigned", "raw", "expected"),
    [
        (FieldType.TINY, False, b"\x80", -128),
        (FieldType.TINY, True, b"\xff", 255),
        (FieldType.SHORT, False, b"\x00\x80", -32768),
        (FieldType.SHORT, True, b"\xff\xff", 65535),
        (FieldType.INT24, False, b"\x00\x00\x80", -8388608),
        (FieldType.INT24, True, b"\xff\xff\xff", 16777215),
        (FieldType.LONG, False, b"\x00\x00\x00\x80", -(2**31)),
        (FieldType.LONG, True, b"\xff\xff\xff\xff", 2**32 - 1),
        (FieldType.LONGLONG, False, b"\x00" * 7 + b"\x80", -(2**63)),
        (FieldType.LONGLONG, True, b"\xff" * 8, 2**64 - 1),
    ],
)
def test_integers_are_exact(type_: int, unsigned: bool, raw: bytes, expected: int) -> None:
    value = decode(ColumnSpec("c", type_, unsigned=unsigned), raw)
    assert value == expected
    assert dumps(value) == str(expected)  # JSON numbers, no precision loss


@pytest.mark.parametrize(
    ("text", "precision", "scale", "expected"),
    [
        ("-0.50", 10, 2, "-0.50"),
        ("0", 10, 2, "0.00"),
        ("1234567890.123456789", 19, 9, "1234567890.123456789"),
        ("-123456789.000000001", 18, 9, "-123456789.000000001"),
        ("0.1234567890", 10, 10, "0.1234567890"),
        ("-0.9999999999", 10, 10, "-0.9999999999"),
        ("-12345", 5, 0, "-12345"),
        ("0", 5, 0, "0"),
        (
            "-99999999999999999999999999999999999.999999999999999999999999999999",
            65,
            30,
            "-99999999999999999999999999999999999.999999999999999999999999999999",
        ),
    ],
)
def test_decimal_is_exact_text(text: str, precision: int, scale: int, expected: str) -> None:
    column = ColumnSpec("c", FieldType.NEWDECIMAL, precision=precision, scale=scale)
    assert decode(column, encode_decimal(text, precision, scale)) == expected


@given(st.data())
def test_decimal_round_trips_any_value(data: st.DataObject) -> None:
    precision = data.draw(st.integers(1, 65))
    scale = data.draw(st.integers(0, min(30, precision)))
    bound = 10**precision - 1
    unscaled = data.draw(st.integers(-bound, bound))
    digits = str(abs(unscaled)).rjust(scale + 1, "0")
    text = ("-" if unscaled < 0 else "") + (
        f"{digits[:-scale]}.{digits[-scale:]}" if scale else digits
    )
    value = Decimal(text)
    column = ColumnSpec("c", FieldType.NEWDECIMAL, precision=precision, scale=scale)
    decoded = decode(column, encode_decimal(text, precision, scale))
    assert isinstance(decoded, str)
    assert Decimal(decoded) == value
    assert decoded == (text if unscaled else text.lstrip("-"))  # no "-0.00"


def test_float_is_the_shortest_exact_decimal() -> None:
    column = ColumnSpec("f", FieldType.FLOAT)
    assert decode(column, struct.pack("<f", 1.1)) == 1.1
    assert dumps(decode(column, struct.pack("<f", 1.1))) == "1.1"
    for value in (3.4028234663852886e38, 1.401298464324817e-45, -0.0, 16777216.0, 0.1):
        raw = struct.pack("<f", value)
        decoded = decode(column, raw)
        assert isinstance(decoded, float)
        assert struct.pack("<f", decoded) == raw  # lossless


@given(st.floats(width=32, allow_nan=False, allow_infinity=False))
def test_float_round_trips_every_float32(value: float) -> None:
    raw = struct.pack("<f", value)
    decoded = decode(ColumnSpec("f", FieldType.FLOAT), raw)
    assert struct.pack("<f", json.loads(dumps(decoded))) == raw


def test_double_round_trips() -> None:
    column = ColumnSpec("d", FieldType.DOUBLE)
    for value in (3.141592653589793, -1.7976931348623157e308, 5e-324):
        assert json.loads(dumps(decode(column, struct.pack("<d", value)))) == value


# -- dates and times ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("y", "m", "d", "expected"),
    [(2024, 2, 29, "2024-02-29"), (0, 0, 0, "0000-00-00"), (2026, 0, 15, "2026-00-15"),
     (2026, 3, 0, "2026-03-00"), (9999, 12, 31, "9999-12-31")],
)  # fmt: skip
def test_date_keeps_zero_and_partial_dates(y: int, m: int, d: int, expected: str) -> None:
    raw = ((y << 9) | (m << 5) | d).to_bytes(3, "little")
    assert decode(ColumnSpec("d", FieldType.DATE), raw) == expected


@pytest.mark.parametrize("fsp", range(7))
def test_datetime2_prints_the_column_precision(fsp: int) -> None:
    column = ColumnSpec("dt", FieldType.DATETIME2, fsp=fsp)
    raw = encode_datetime2((9999, 12, 31), (23, 59, 59), _truncate(999999, fsp), fsp)
    frac = "." + "9" * fsp if fsp else ""
    assert decode(column, raw) == f"9999-12-31 23:59:59{frac}"
    zero = encode_datetime2((0, 0, 0), (0, 0, 0), 0, fsp)
    assert decode(column, zero) == "0000-00-00 00:00:00" + ("." + "0" * fsp if fsp else "")
    partial = encode_datetime2((2026, 0, 15), (10, 0, 0), 0, fsp)
    assert str(decode(column, partial)).startswith("2026-00-15 10:00:00")


def test_datetime2_repeated_and_alternating_values_are_each_read_right() -> None:
    read = make_reader(ColumnSpec("dt", FieldType.DATETIME2, fsp=6))
    a = encode_datetime2((2026, 11, 25), (15, 0, 1), 123456, 6)
    b = encode_datetime2((2026, 11, 25), (15, 0, 1), 123457, 6)
    data = a + a + b + a + b + b
    texts, pos = [], 0
    while pos < len(data):
        text, pos = read(data, pos)
        texts.append(text[-6:])
    assert texts == ["123456", "123456", "123457", "123456", "123457", "123457"]


def test_old_datetime_and_time_formats() -> None:
    raw = (20240229131415).to_bytes(8, "little")
    assert decode(ColumnSpec("dt", FieldType.DATETIME), raw) == "2024-02-29 13:14:15"
    assert decode(ColumnSpec("dt", FieldType.DATETIME), bytes(8)) == "0000-00-00 00:00:00"
    neg = (-8385959).to_bytes(3, "little", signed=True)
    assert decode(ColumnSpec("t", FieldType.TIME), neg) == "-838:59:59"


@pytest.mark.parametrize(
    ("negative", "hms", "micros", "fsp", "expected"),
    [
        (True, (1, 0, 0), 250000, 3, "-01:00:00.250"),  # the library says -3600.75 s
        (True, (12, 34, 56), 1, 6, "-12:34:56.000001"),  # the library says -45296.999999 s
        (True, (0, 0, 1), 500000, 6, "-00:00:01.500000"),
        (True, (0, 0, 0), 100000, 1, "-00:00:00.1"),
        (True, (838, 59, 59), 999000, 3, "-838:59:59.999"),
        (False, (838, 59, 59), 0, 0, "838:59:59"),
        (True, (838, 59, 59), 0, 0, "-838:59:59"),
        (False, (0, 0, 0), 0, 2, "00:00:00.00"),
        (True, (1, 2, 3), 450000, 2, "-01:02:03.45"),
        (True, (1, 2, 3), 456700, 4, "-01:02:03.4567"),
    ],
)
def test_time2_including_negative_fractions(
    negative: bool, hms: tuple[int, int, int], micros: int, fsp: int, expected: str
) -> None:
    column = ColumnSpec("t", FieldType.TIME2, fsp=fsp)
    assert decode(column, encode_time2(negative, hms, micros, fsp)) == expected


@given(
    st.booleans(),
    st.tuples(st.integers(0, 838), st.integers(0, 59), st.integers(0, 59)),
    st.integers(0, 999999),
    st.integers(0, 6),
)
def test_time2_round_trips(
    negative: bool, hms: tuple[int, int, int], micros: int, fsp: int
) -> None:
    h, m, s = hms
    micros = _truncate(micros, fsp)
    if not (h or m or s or micros):
        negative = False
    column = ColumnSpec("t", FieldType.TIME2, fsp=fsp)
    frac = f".{micros:06d}"[: fsp + 1] if fsp else ""
    expected = f"{'-' if negative else ''}{h:02d}:{m:02d}:{s:02d}{frac}"
    assert decode(column, encode_time2(negative, hms, micros, fsp)) == expected


def test_timestamp_is_utc_with_z_and_zero_stays_zero() -> None:
    column = ColumnSpec("ts", FieldType.TIMESTAMP2, fsp=3)
    raw = (1717243200).to_bytes(4, "big") + (2500).to_bytes(2, "big")
    assert decode(column, raw) == "2024-06-01T12:00:00.250Z"
    assert decode(column, bytes(6)) == "0000-00-00 00:00:00.000"
    plain = ColumnSpec("ts", FieldType.TIMESTAMP2)
    assert decode(plain, (2147483647).to_bytes(4, "big")) == "2038-01-19T03:14:07Z"
    old = ColumnSpec("ts", FieldType.TIMESTAMP)
    assert decode(old, (1).to_bytes(4, "little")) == "1970-01-01T00:00:01Z"


def test_year_zero_stays_zero() -> None:
    column = ColumnSpec("y", FieldType.YEAR)
    assert decode(column, b"\x00") == 0  # the library says 1900
    assert decode(column, b"\x01") == 1901
    assert decode(column, bytes([255])) == 2155


# -- bits, enums, sets --------------------------------------------------------------------------


def test_bit_keeps_its_width() -> None:
    assert decode(ColumnSpec("b", FieldType.BIT, bits=1), b"\x01") == "1"
    assert decode(ColumnSpec("b", FieldType.BIT, bits=10), b"\x01\x05") == "0100000101"
    assert decode(ColumnSpec("b", FieldType.BIT, bits=64), b"\x80" + bytes(7)) == "1" + "0" * 63


def test_enum_and_set() -> None:
    enum = ColumnSpec("e", FieldType.ENUM, size=1, enum_values=("a", "b", "c"))
    assert decode(enum, b"\x03") == "c"
    assert decode(enum, b"\x00") == ""  # the invalid-value index of a lax sql_mode
    members = tuple(f"v{i}" for i in range(300))
    big_enum = ColumnSpec("e", FieldType.ENUM, size=2, enum_values=members)
    assert decode(big_enum, (300).to_bytes(2, "little")) == "v299"
    set_ = ColumnSpec("s", FieldType.SET, size=1, set_values=("x", "y", "z"))
    assert decode(set_, b"\x05") == ["x", "z"]
    assert decode(set_, b"\x00") == []  # the library says None, the same as NULL


# -- strings ------------------------------------------------------------------------------------


def test_binary_n_is_padded_back_to_its_length() -> None:
    column = ColumnSpec("b", FieldType.STRING, max_length=4)
    assert decode(column, b"\x02\x00\xff") == b64(b"\x00\xff\x00\x00")
    assert decode(column, b"\x01\xab") == b64(b"\xab\x00\x00\x00")
    assert decode(column, b"\x00") == b64(bytes(4))  # the library says '' (a str)


def test_varbinary_and_blobs_are_base64_and_empty_is_empty() -> None:
    varbinary = ColumnSpec("v", FieldType.VARCHAR, max_length=10)
    assert decode(varbinary, b"\x02\x00\x00") == "AAA="
    assert decode(varbinary, b"\x00") == ""
    wide = ColumnSpec("v", FieldType.VARCHAR, max_length=300)
    assert decode(wide, b"\x01\x00\xff") == "/w=="
    blob = ColumnSpec("b", FieldType.BLOB, length_size=3)
    assert decode(blob, (70000).to_bytes(3, "little") + b"\xab" * 70000) == b64(b"\xab" * 70000)
    assert decode(ColumnSpec("b", FieldType.BLOB, length_size=1), b"\x00") == ""


def test_text_columns_use_their_charset() -> None:
    utf8 = ColumnSpec("s", FieldType.VARCHAR, encoding="utf8mb4", max_length=40)
    assert decode(utf8, b"\x04" + "😀".encode()) == "😀"
    latin1 = ColumnSpec("s", FieldType.STRING, encoding="latin1", max_length=10)
    assert decode(latin1, b"\x04caf\xe9") == "café"
    assert decode(latin1, b"\x02\x81\x80") == "\u0081€"  # MySQL latin1 is not cp1252
    utf16 = ColumnSpec("s", FieldType.VARCHAR, encoding="utf16", max_length=40)
    assert decode(utf16, b"\x04" + "hé".encode("utf-16-be")) == "hé"
    text = ColumnSpec("t", FieldType.BLOB, encoding="utf8mb4", length_size=2)
    assert decode(text, b"\x00\x00") == ""


def test_text_never_fails_on_a_byte_the_charset_does_not_define() -> None:
    cp1250 = ColumnSpec("s", FieldType.STRING, encoding="cp1250", max_length=10)
    assert decode(cp1250, b"\x03a\x81\x8a") == "a\uef81Š"  # Python's cp1250 rejects 0x81
    swe7 = ColumnSpec("s", FieldType.VARCHAR, encoding="swe7", max_length=10)
    assert decode(swe7, b"\x02[\x80") == "Ä\uef80"  # no Python codec at all


# -- MariaDB types, JSON, geometry ---------------------------------------------------------------


def test_uuid_inet4_inet6_text_including_all_zero_values() -> None:
    uuid_col = ColumnSpec("u", FieldType.STRING, max_length=16, logical="uuid")
    raw = bytes.fromhex("123e4567e89b12d3a4564266141740")  # trailing 00 stripped
    assert decode(uuid_col, bytes([len(raw)]) + raw) == "123e4567-e89b-12d3-a456-426614174000"
    assert decode(uuid_col, b"\x00") == "00000000-0000-0000-0000-000000000000"
    inet4 = ColumnSpec("i", FieldType.STRING, max_length=4, logical="inet4")
    assert decode(inet4, b"\x01\x0a") == "10.0.0.0"
    assert decode(inet4, b"\x00") == "0.0.0.0"
    inet6 = ColumnSpec("i", FieldType.STRING, max_length=16, logical="inet6")
    assert decode(inet6, b"\x00") == "::"
    # A type name that does not fit the storage (e.g. after an ALTER) stays binary:
    odd = ColumnSpec("i", FieldType.STRING, max_length=8, logical="uuid")
    assert decode(odd, b"\x01\x01") == b64(b"\x01" + bytes(7))


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("::", "::"),
        ("::1", "::1"),
        ("::ffff:1.2.3.4", "::ffff:1.2.3.4"),
        ("::1.2.3.4", "::1.2.3.4"),
        ("2001:db8::ff00:42:8329", "2001:db8::ff00:42:8329"),
        ("1:0:2:3:4:5:6:7", "1::2:3:4:5:6:7"),
        ("fe80::", "fe80::"),
        ("1::", "1::"),
        ("1:0:0:2::3", "1:0:0:2::3"),
        ("::ffff:0:1", "::ffff:0.0.0.1"),
        ("0:0:2::1", "0:0:2::1"),
        ("::0.1.0.0", "::0.1.0.0"),
    ],
)
def test_inet6_text_matches_mariadb(address: str, expected: str) -> None:
    """Expected texts measured on MariaDB 10.11 (CAST(inet6 AS CHAR))."""
    assert format_inet6(ipaddress.IPv6Address(address).packed) == expected


def test_mariadb_json_keeps_its_text() -> None:
    column = ColumnSpec("j", FieldType.BLOB, encoding="utf8mb4", length_size=4, logical="json")
    for document in ('{"a": [1, 2.5, null, true], "é": "x"}', "null", '"s"', "1" * 30, "{oops"):
        text = document.encode()
        assert decode(column, len(text).to_bytes(4, "little") + text) == document


def test_mysql_binary_json_is_the_servers_text() -> None:
    """The literal true (type 4, value 1) as MySQL prints it; more in test_mysql_json.py."""
    column = ColumnSpec("j", FieldType.JSON, length_size=4)
    assert make_reader(column)(b"\x02\x00\x00\x00\x04\x01", 0) == ("true", 6)


def test_geometry_keeps_srid_and_wkb() -> None:
    wkb = bytes.fromhex("0101000000000000000000f03f0000000000000040")
    raw = (4326).to_bytes(4, "little") + wkb
    column = ColumnSpec("g", FieldType.GEOMETRY, length_size=4)
    assert decode(column, len(raw).to_bytes(4, "little") + raw) == {"srid": 4326, "wkb": b64(wkb)}


# -- rows -----------------------------------------------------------------------------------------

COLUMNS = [
    ColumnSpec("id", FieldType.LONG),
    ColumnSpec("name", FieldType.VARCHAR, encoding="utf8mb4", max_length=20),
    ColumnSpec("n", FieldType.SHORT, unsigned=True),
]


def image(nulls: int, *values: bytes) -> bytes:
    return bytes([nulls]) + b"".join(values)


def test_row_images_with_nulls_and_pk() -> None:
    decoder = RowDecoder("db", "t", COLUMNS, primary_key=[0])
    data = image(0, b"\x01\0\0\0", b"\x03abc", b"\x05\0") + image(0b110, b"\x02\0\0\0")
    rows = decoder.images(data, b"\x07")
    assert rows == [
        ('{"id":1,"name":"abc","n":5}', '{"id":1}'),
        ('{"id":2,"name":null,"n":null}', '{"id":2}'),
    ]


def test_update_pairs_and_primary_key_from_the_after_image() -> None:
    decoder = RowDecoder("db", "t", COLUMNS, primary_key=[0])
    before = image(0, b"\x01\0\0\0", b"\x01a", b"\x01\0")
    data = before + image(0, b"\x09\0\0\0", b"\x01b", b"\x01\0")
    assert decoder.updates(data, b"\x07", b"\x07") == [
        ('{"id":1,"name":"a","n":1}', '{"id":9,"name":"b","n":1}', '{"id":9}')
    ]


@pytest.mark.parametrize("key", [0, 1])
@pytest.mark.parametrize("name", ["id", 'quo"te\\', "ключ", "line\nbreak"])
def test_a_one_column_key_is_encoded_like_a_one_entry_object(key: int, name: str) -> None:
    columns = [ColumnSpec(name if i == key else c.name, c.type, encoding=c.encoding,
                          max_length=c.max_length, unsigned=c.unsigned)
               for i, c in enumerate(COLUMNS)]  # fmt: skip
    decoder = RowDecoder("db", "t", columns, primary_key=[key])
    text = 'é"\\\t\x01'.encode()
    data = image(0, b"\x01\0\0\0", bytes([len(text)]) + text, b"\x05\0")
    data += image(0b010, b"\x02\0\0\0", b"\x05\0")
    rows = decoder.images(data, b"\x07")
    for image_json, pk in rows:
        value = json.loads(image_json)[columns[key].name]
        expected = {columns[key].name: value}
        assert pk == json.dumps(expected, ensure_ascii=False, separators=(",", ":"))
    assert json.loads(rows[1][1]) == {columns[key].name: None if key == 1 else 2}


def test_a_composite_key_keeps_key_order() -> None:
    decoder = RowDecoder("db", "t", COLUMNS, primary_key=[2, 0])
    [(_, pk)] = decoder.images(image(0, b"\x01\0\0\0", b"\x01a", b"\x05\0"), b"\x07")
    assert pk == '{"n":5,"id":1}'


def test_without_primary_key_the_pk_is_the_whole_image() -> None:
    decoder = RowDecoder("db", "t", COLUMNS)
    [(row, pk)] = decoder.images(image(0, b"\x01\0\0\0", b"\x00", b"\x00\0"), b"\x07")
    assert pk == row == '{"id":1,"name":"","n":0}'


def test_partial_row_images_are_refused() -> None:
    decoder = RowDecoder("db", "t", COLUMNS, primary_key=[0])
    with pytest.raises(SourceSettingsError, match=r"partial row image \(2 of 3 columns\)"):
        decoder.images(image(0, b"\x01\0\0\0", b"\x02\0"), b"\x05")
    # Bits past the last column do not matter.
    [(row, _)] = decoder.images(image(0, b"\x01\0\0\0", b"\x00", b"\x02\0"), b"\xff")
    assert row == '{"id":1,"name":"","n":2}'


def test_rows_that_do_not_fill_the_event_exactly_are_an_error() -> None:
    decoder = RowDecoder("db", "t", COLUMNS)
    with pytest.raises(SourceError, match="decoded 11 of 8 bytes"):
        decoder.images(image(0b100, b"\x01\0\0\0", b"\x05ab"), b"\x07")
    with pytest.raises(SourceError, match=r"cannot decode a row of db\.t"):
        decoder.images(image(0, b"\x01\0\0\0", b"\x00", b"\x02"), b"\x07")  # cut short
    # Text bytes the charset cannot decode are no error: they are escaped (docs/types.md).
    [(row, _)] = decoder.images(image(0, b"\x01\0\0\0", b"\x02\xff\xfe", b"\0\0"), b"\x07")
    assert json.loads(row)["name"] == "\uefff\ueffe"


def test_unsupported_types_fail_at_the_table_map() -> None:
    with pytest.raises(SourceError, match=r"db\.t: column 'x' has binlog type 0"):
        RowDecoder("db", "t", [ColumnSpec("x", FieldType.DECIMAL)])


def test_dumps_is_compact_and_keeps_unicode() -> None:
    assert dumps({"a": [1, "é"], "b": None}) == '{"a":[1,"é"],"b":null}'


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@given(_JSON_VALUES)
def test_row_json_is_compact_json_dumps(value: object) -> None:
    """The prebuilt encoder writes what json.dumps with the same options writes."""
    expected = json.dumps(value, ensure_ascii=False, separators=(",", ":"), check_circular=False)
    assert dumps(value) == expected


def test_row_json_refuses_what_json_cannot_encode() -> None:
    with pytest.raises(TypeError):
        dumps({"a": Decimal("1.5")})
