"""Row images encoded by orjson, byte for byte the text of :data:`.columns.dumps`.

Encoding a row image with the standard library's C encoder was about a tenth of a catch-up
(profile of a bulk-insert catch-up); orjson encodes the same dict about 2.7 times faster. Its
text is the standard library's for strings (every code point), integers up to 64 bits, None,
lists and dicts, but not for floats (``1.5e-05`` is ``0.000015`` there) nor for NaN, and it
refuses integers beyond 64 bits. So only the values of column types whose reader returns
strings, 64-bit integers, None, or lists and dicts of those go to orjson as they are; every
other column's value (FLOAT, DOUBLE, any type not listed) becomes an ``orjson.Fragment``
holding the standard library's text of it. The change log's text therefore does not depend
on whether orjson is installed; without it every image goes through :data:`.columns.dumps`.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from typing import Any

from cdc_platform.source.values.columns import ColumnSpec, FieldType, Reader, dumps

__all__ = ["FAST_JSON", "float_fragment", "image_encoder", "native_reader"]

try:
    import orjson
except ImportError:  # pragma: no cover - the project depends on orjson; kept for a bare install
    orjson = None  # type: ignore[assignment]  # orjson is optional; None says it is missing

FAST_JSON: bool = orjson is not None
"""Whether orjson is importable (the default of :class:`.rows.RowDecoder`'s ``fast_json``)."""

_NATIVE_TYPES = frozenset(
    {
        FieldType.TINY,
        FieldType.SHORT,
        FieldType.INT24,
        FieldType.LONG,
        FieldType.LONGLONG,  # at most 2**64 - 1 unsigned, -2**63 signed: within orjson's range
        FieldType.YEAR,
        FieldType.DATE,
        FieldType.NEWDATE,
        FieldType.DATETIME,
        FieldType.DATETIME2,
        FieldType.TIMESTAMP,
        FieldType.TIMESTAMP2,
        FieldType.TIME,
        FieldType.TIME2,
        FieldType.NEWDECIMAL,  # text
        FieldType.BIT,  # text of binary digits
        FieldType.ENUM,
        FieldType.SET,  # list of text
        FieldType.VARCHAR,
        FieldType.VAR_STRING,
        FieldType.STRING,
        FieldType.TINY_BLOB,  # text or base64 text (a MariaDB JSON document's text)
        FieldType.MEDIUM_BLOB,
        FieldType.LONG_BLOB,
        FieldType.BLOB,
        FieldType.GEOMETRY,  # {"srid": int, "wkb": base64 text}
        FieldType.JSON,  # the document's text
    }
)
"""Binlog types whose decoded values orjson writes exactly as the standard library does."""


def native_reader(column: ColumnSpec, read: Reader) -> Reader:
    """``read`` itself when its values can go to orjson as they are; otherwise a reader
    whose values are fragments of the standard library's JSON text of them."""
    if column.type in _NATIVE_TYPES:
        return read
    fragment = _fragment_type()
    if column.type == FieldType.DOUBLE:
        return _double_fragment(fragment)

    def read_fragment(data: bytes, pos: int) -> tuple[Any, int]:
        value, end = read(data, pos)
        if value is None:
            return None, end
        if type(value) is float and math.isfinite(value):
            return fragment(float.__repr__(value)), end  # what the standard library writes
        return fragment(dumps(value)), end

    return read_fragment


def float_fragment(value: Any) -> Any:
    """A float as an orjson fragment of the standard library's text of it (None stays None):
    for image values that do not come from a binlog reader (the snapshot's rows)."""
    if value is None:
        return None
    fragment = _fragment_type()
    if type(value) is float and value - value == 0.0:  # finite
        return fragment(float.__repr__(value))
    return fragment(dumps(value))


def _double_fragment(fragment: Any) -> Reader:
    """DOUBLE, unpacked and written in one call (the most common float column)."""
    unpack_from = struct.Struct("<d").unpack_from

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        value: float = unpack_from(data, pos)[0]
        if value - value == 0.0:  # finite
            return fragment(float.__repr__(value)), pos + 8
        return fragment(dumps(value)), pos + 8

    return read


def image_encoder(fast: bool) -> Callable[[Any], str]:
    """The function writing a row image (a dict of one table's reader values, or one value):
    orjson when ``fast`` (the readers then come from :func:`native_reader`), else
    :data:`.columns.dumps`."""
    if not fast:
        return dumps
    assert orjson is not None, "fast JSON needs orjson"
    encode = orjson.dumps
    encode_error = orjson.JSONEncodeError

    def write(value: Any) -> str:
        try:
            return encode(value).decode()
        except encode_error:
            return _fallback(value)

    return write


def _fallback(value: Any) -> str:
    """The standard library's text of a value orjson refused (a type no reader returns
    today); fragments inside are kept as the text they hold."""
    assert orjson is not None
    if isinstance(value, orjson.Fragment):
        return orjson.dumps(value).decode()  # a fragment alone is written as its text
    if isinstance(value, dict):
        return "{" + ",".join(f"{dumps(k)}:{_fallback(v)}" for k, v in value.items()) + "}"
    return dumps(value)


def _fragment_type() -> Any:
    if orjson is None:
        raise RuntimeError("fast JSON needs orjson")
    return orjson.Fragment
