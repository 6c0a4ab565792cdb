"""MySQL's binary JSON as the text the server prints for it.

A MySQL JSON column stores a binary document; the binlog carries those bytes, while a
snapshot reads the server's text of them (``CAST(doc AS CHAR)``). Both must give the same
text, so the bytes are printed here by the server's own rules instead of being parsed into
Python values (which turns DECIMAL 1.50 into 1.5 or "1.50", and cannot hold TIME 838:59:59).

The format (MySQL's json_binary.h): a type byte, then the value. Objects and arrays have a
small form (2-byte count, size and offsets) and a large one (4-byte); after count and size
come the key entries (offset, 2-byte length), the value entries (type, then an offset from
the container's start or a scalar that fits inline), the keys, the values. Strings are UTF-8
behind a variable-length size (7 bits a byte, low first); opaque values carry a MySQL field
type, a size and the value's bytes.

The text (json_dom.cc ``wrapper_to_string``): ``", "`` and ``": "`` between members, keys in
stored order, strings escaped only where JSON requires it, doubles as ``my_gcvt`` writes
them (".0" added when no point or exponent shows), DECIMAL with its scale's digits, DATE as
``2024-01-02``, TIME and DATETIME/TIMESTAMP with six fraction digits, an opaque VAR_STRING as
a string, any other opaque value as ``"base64:typeN:..."`` (lines of 76, as MySQL encodes).
"""

from __future__ import annotations

import binascii
import json
import math
import struct
from collections.abc import Callable
from decimal import Decimal
from functools import lru_cache

from cdc_platform.source.values.numbers import decimal_reader

__all__ = ["datetime_text", "double_text", "json_text", "time_text"]

_OBJECTS = {0x00: False, 0x01: True}  # type -> large
_ARRAYS = {0x02: False, 0x03: True}
_LITERAL, _STRING, _OPAQUE = 0x04, 0x0C, 0x0F
_NUMBERS = {
    0x05: struct.Struct("<h"),
    0x06: struct.Struct("<H"),
    0x07: struct.Struct("<i"),
    0x08: struct.Struct("<I"),
    0x09: struct.Struct("<q"),
    0x0A: struct.Struct("<Q"),
}
_DOUBLE_TYPE, _DOUBLE = 0x0B, struct.Struct("<d")
_INLINE = {False: frozenset({0x04, 0x05, 0x06}), True: frozenset({0x04, 0x05, 0x06, 0x07, 0x08})}
_LITERALS = ("null", "true", "false")
_MAX_DEPTH = 100  # JSON_DOCUMENT_MAX_DEPTH: the server stores nothing deeper
_DECIMAL, _DATE, _TIME, _DATETIME, _TIMESTAMP, _VAR_STRING = 246, 10, 11, 12, 7, 253
_PACKED = struct.Struct("<q")

_quote: Callable[[str], str] = json.JSONEncoder(ensure_ascii=False).encode
"""A JSON string as MySQL's double_quote writes it: '"', '\\' and characters below U+0020
escaped (\\b \\t \\n \\f \\r, else \\u00xx in lowercase), everything else as it is."""


def json_text(raw: bytes) -> str:
    """The server's text of one binary JSON document; ValueError saying what is wrong when
    the bytes are not one. An empty value is the JSON null (MySQL reads it as that)."""
    if not raw:
        return "null"
    out: list[str] = []
    _Printer(raw, out).value(raw[0], 1, len(raw), 0)
    return "".join(out)


class _Printer:
    """Appends the text of values to ``out``; every read is checked against its bounds."""

    __slots__ = ("_budget", "_data", "_out")

    def __init__(self, data: bytes, out: list[str]) -> None:
        self._data = data
        self._out = out
        self._budget = len(data)
        """Values left to print: each of a real document has an entry of its own, so a
        corrupt one whose entries share their values cannot make the work explode."""

    def value(self, kind: int, pos: int, end: int, depth: int) -> None:
        """Print the value of type ``kind`` whose bytes start at ``pos`` and end by ``end``."""
        self._budget -= 1
        if self._budget < 0:
            raise ValueError("entries point at the same values over and over")
        data, out = self._data, self._out
        if kind in _OBJECTS or kind in _ARRAYS:
            self._container(kind, pos, end, depth + 1)
        elif kind in _NUMBERS:
            out.append(str(_unpack(_NUMBERS[kind], data, pos, end)))
        elif kind == _DOUBLE_TYPE:
            if pos + 8 > end:
                raise ValueError(f"a double at byte {pos} passes the end")
            out.append(double_text(_DOUBLE.unpack_from(data, pos)[0]))
        elif kind == _LITERAL:
            if pos >= end or data[pos] > 2:
                raise ValueError(f"no literal at byte {pos}")
            out.append(_LITERALS[data[pos]])
        elif kind == _STRING:
            start, stop = _sized(data, pos, end)
            out.append(_quote(_utf8(data[start:stop], start)))
        elif kind == _OPAQUE:
            if pos >= end:
                raise ValueError(f"an opaque value at byte {pos} passes the end")
            start, stop = _sized(data, pos + 1, end)
            out.append(_opaque(data[pos], data[start:stop], start))
        else:
            raise ValueError(f"unknown value type {kind} (a value at byte {pos})")

    def _container(self, kind: int, pos: int, end: int, depth: int) -> None:
        if depth > _MAX_DEPTH:
            raise ValueError(f"nested deeper than {_MAX_DEPTH}")
        is_object = kind in _OBJECTS
        large = _OBJECTS[kind] if is_object else _ARRAYS[kind]
        width = 4 if large else 2
        offset = _NUMBERS[0x08 if large else 0x06]  # uint32 or uint16
        data, out = self._data, self._out
        count = _unpack(offset, data, pos, end)
        size = _unpack(offset, data, pos + width, end)
        stop = pos + size
        keys_at = pos + 2 * width
        values_at = keys_at + (count * (width + 2) if is_object else 0)
        header = values_at + count * (1 + width) - pos
        if stop > end or header > size:
            raise ValueError(f"a container at byte {pos} of {size} bytes passes the end")
        inline = _INLINE[large]
        out.append("{" if is_object else "[")
        for i in range(count):
            if i:
                out.append(", ")
            if is_object:
                entry = keys_at + i * (width + 2)
                key = pos + offset.unpack_from(data, entry)[0]
                length = int.from_bytes(data[entry + width : entry + width + 2], "little")
                if key < pos + header or key + length > stop:
                    raise ValueError(f"a key at byte {key} passes the end")
                out.append(_quote(_utf8(data[key : key + length], key)))
                out.append(": ")
            entry = values_at + i * (1 + width)
            value_kind = data[entry]
            if value_kind in inline:
                self.value(value_kind, entry + 1, entry + 1 + width, depth)
                continue
            at = offset.unpack_from(data, entry + 1)[0]
            if not header <= at < size:
                raise ValueError(f"a value at byte {pos + at} passes the end")
            self.value(value_kind, pos + at, stop, depth)
        out.append("}" if is_object else "]")


def _unpack(form: struct.Struct, data: bytes, pos: int, end: int) -> int:
    """An integer of the format ``form`` at ``pos``, if it ends by ``end``."""
    if pos + form.size > end:
        raise ValueError(f"a {form.size}-byte value at byte {pos} passes the end")
    return int(form.unpack_from(data, pos)[0])


def _sized(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """(start, end) of a value behind a variable-length size (at most 5 bytes, 32 bits)."""
    size = 0
    for i in range(5):
        if pos + i >= end:
            break
        byte = data[pos + i]
        size |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            start = pos + i + 1
            if size > 0xFFFFFFFF or start + size > end:
                break
            return start, start + size
    raise ValueError(f"a string or opaque value at byte {pos} passes the end")


def _utf8(raw: bytes, pos: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"text at byte {pos + exc.start} is not UTF-8") from None


def _opaque(field_type: int, raw: bytes, pos: int) -> str:
    """An opaque value: DECIMAL, DATE, TIME, DATETIME, TIMESTAMP as such, a VAR_STRING as a
    string, other types as their bytes in base64 (json_dom.cc)."""
    if field_type == _DECIMAL:
        return _decimal_text(raw, pos)
    if field_type in (_DATE, _TIME, _DATETIME, _TIMESTAMP):
        if len(raw) != _PACKED.size:
            raise ValueError(f"a date or time at byte {pos} has {len(raw)} bytes, not 8 bytes")
        packed = _PACKED.unpack(raw)[0]
        if field_type == _TIME:
            return '"' + time_text(packed) + '"'
        return '"' + datetime_text(packed, with_time=field_type != _DATE) + '"'
    if field_type == _VAR_STRING:
        return _quote(_utf8(raw, pos))
    encoded = binascii.b2a_base64(raw, newline=False).decode("ascii")
    lines = "\n".join(encoded[i : i + 76] for i in range(0, len(encoded), 76))
    return _quote(f"base64:type{field_type}:{lines}")


def _decimal_text(raw: bytes, pos: int) -> str:
    """Precision and scale bytes, then the digits as a DECIMAL column stores them; printed
    with as many fraction digits as the scale (decimal2string)."""
    if len(raw) < 2 or not 0 < raw[0] <= 65 or raw[1] > min(raw[0], 30):
        raise ValueError(f"no DECIMAL at byte {pos}")
    text, end = _decimal(raw[0], raw[1])(raw, 2)
    if end != len(raw):
        raise ValueError(f"a DECIMAL at byte {pos} has {len(raw)} bytes, not {end}")
    return str(text)


_decimal = lru_cache(maxsize=256)(decimal_reader)


def time_text(packed: int) -> str:
    """A packed TIME (hours, days folded in, << 12 | minutes << 6 | seconds, shifted 24 bits,
    plus microseconds; negated when negative) as my_time_to_str writes it: '-838:59:59.000000'."""
    sign = "-" if packed < 0 else ""
    packed = abs(packed)
    hms, micros = packed >> 24, packed & 0xFFFFFF
    if micros > 999_999:
        raise ValueError(f"a TIME with {micros} microseconds")
    hours, minutes, seconds = (hms >> 12) & 0x3FF, (hms >> 6) & 0x3F, hms & 0x3F
    return f"{sign}{hours:02d}:{minutes:02d}:{seconds:02d}.{micros:06d}"


def datetime_text(packed: int, *, with_time: bool) -> str:
    """A packed DATETIME/TIMESTAMP (((year * 13 + month) << 5 | day) << 17 | hour << 12 |
    minute << 6 | second, shifted 24 bits, plus microseconds) as my_datetime_to_str writes it
    ('2024-01-02 03:04:05.000000'), or its date (my_date_to_str: '2024-01-02')."""
    packed = abs(packed)
    ymdhms, micros = packed >> 24, packed & 0xFFFFFF
    if micros > 999_999:
        raise ValueError(f"a DATETIME with {micros} microseconds")
    ymd, hms = ymdhms >> 17, ymdhms & 0x1FFFF
    year, month, day = (ymd >> 5) // 13, (ymd >> 5) % 13, ymd & 0x1F
    date = f"{year:04d}-{month:02d}-{day:02d}"
    if not with_time:
        return date
    hour, minute, second = hms >> 12, (hms >> 6) & 0x3F, hms & 0x3F
    return f"{date} {hour:02d}:{minute:02d}:{second:02d}.{micros:06d}"


def double_text(value: float) -> str:
    """A double as MySQL's JSON text writes it: ``my_gcvt`` with the shortest digits that
    read back as the value (dtoa), in fixed notation for up to 15 integer digits (more when
    fraction digits follow) and up to 14 zeros after "0." ('100000000000000.0',
    '0.000000000000001'), else in exponent notation without '+' or padding ('1e15',
    '1e-16', '1.2345678901234568e17'); '.0' is added when no point or exponent shows."""
    if not math.isfinite(value):
        raise ValueError(f"a double that is not a number: {value!r}")
    sign, digit_tuple, exponent = Decimal(repr(value)).as_tuple()
    minus = "-" if sign else ""
    if value == 0:
        return minus + "0.0"
    digits = "".join(map(str, digit_tuple))  # no leading zeros; trailing ones go below
    point = len(digits) + int(exponent)  # dtoa's decpt: the value is 0.digits * 10**point
    return minus + _place(digits.rstrip("0"), point)


def _place(digits: str, point: int) -> str:
    count = len(digits)
    if point >= -14 and (point <= 15 or count > point):
        if point <= 0:
            return "0." + "0" * -point + digits
        if point < count:
            return digits[:point] + "." + digits[point:]
        return digits + "0" * (point - count) + ".0"
    mantissa = digits[0] + ("." + digits[1:] if count > 1 else "")
    return f"{mantissa}e{point - 1}"
