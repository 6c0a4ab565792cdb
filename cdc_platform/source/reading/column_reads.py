"""How each column type is selected and turned into the JSON value the binlog source gives.

The snapshot writes op ``r`` rows next to the binlog source's rows, and mirrors and replays
compare them by their JSON text, so every value must come out exactly as
:mod:`cdc_platform.source.values` decodes it from the binlog (docs/types.md). The server
does most of the work: each column is selected through an expression whose text is already
that representation (``CAST(... AS CHAR)`` for decimals, dates, times, UUID/INET, SETs; the
session time zone is UTC so TIMESTAMP text is the instant in UTC), and the few remaining
conversions (base64, BIT strings, FLOAT shortest form, geometry) reuse the same helpers.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from cdc_platform.errors import SnapshotError
from cdc_platform.source.reading.key_forms import KeyForm, key_form
from cdc_platform.source.sql import quote_identifier
from cdc_platform.source.values.charsets import server_text_is_exact, text_decoder
from cdc_platform.source.values.image_json import FAST_JSON, float_fragment

__all__ = ["ColumnRead", "Convert", "column_read", "image_converters"]

Convert = Callable[[Any], Any]


_INTEGER_TYPES = frozenset({"tinyint", "smallint", "mediumint", "int", "bigint"})
_TEXT_TYPES = frozenset({"tinytext", "text", "mediumtext", "longtext"})
_BLOB_TYPES = frozenset({"tinyblob", "blob", "mediumblob", "longblob"})
_GEOMETRY_TYPES = frozenset(
    {
        "geometry",
        "point",
        "linestring",
        "polygon",
        "multipoint",
        "multilinestring",
        "multipolygon",
        "geometrycollection",
    }
)
_FLOAT32 = struct.Struct("<f")


def _b64(raw: Any) -> str:
    return base64.b64encode(bytes(raw)).decode("ascii")


def _float32(value: Any) -> float:
    """FLOAT as the shortest decimal that reads back as the same 32-bit float (values.numbers)."""
    raw = _FLOAT32.pack(float(value))
    exact: float = _FLOAT32.unpack(raw)[0]
    for digits in (6, 7, 8, 9):
        candidate = float(f"{exact:.{digits}g}")
        if _FLOAT32.pack(candidate) == raw:
            return candidate
    return exact


def _bits(width: int) -> Convert:
    def convert(raw: Any) -> str:
        return format(int.from_bytes(bytes(raw), "big"), f"0{width}b")

    return convert


def _timestamp(text: Any) -> str:
    value = str(text)
    if value.startswith("0000-00-00"):
        return value  # the zero TIMESTAMP is not an instant: no T, no Z (docs/types.md)
    return value.replace(" ", "T", 1) + "Z"


def _set(text: Any) -> list[str]:
    value = str(text)
    return value.split(",") if value else []


def _json(text: Any) -> Any:
    """A MariaDB JSON document as its text, as the binlog path keeps it (docs/types.md)."""
    return str(text)


def _geometry(raw: Any) -> dict[str, Any]:
    data = bytes(raw)
    return {"srid": int.from_bytes(data[:4], "little"), "wkb": _b64(data[4:])}


def _text(value: Any) -> str:
    return str(value)


def _integer(value: Any) -> int:
    return int(value)


def _double(value: Any) -> float:
    return float(value)


_DRIVER_TYPED = frozenset({_text, _integer, _double})
"""Conversions whose result the driver already gives for the selected expression (str for
text and CAST(... AS CHAR), int for integers and YEAR, float for DOUBLE): skipped per row."""

_FLOATS = frozenset({_double, _float32})
"""Conversions that give floats: orjson writes them differently from the standard library,
so with orjson their values become fragments of the standard library's text."""


def image_converters(columns: Sequence[ColumnRead]) -> list[tuple[int, str, Convert]]:
    """(index, name, conversion) of the columns whose driver value is not yet what the
    image encoder takes as it is."""
    out: list[tuple[int, str, Convert]] = []
    for i, c in enumerate(columns):
        convert = c.convert
        if FAST_JSON and convert in _FLOATS:
            out.append((i, c.name, _as_fragment(convert)))
        elif convert not in _DRIVER_TYPED:
            out.append((i, c.name, convert))
    return out


def _as_fragment(convert: Convert) -> Convert:
    if convert is _double:
        return float_fragment
    return lambda value: float_fragment(convert(value))


@dataclass(frozen=True, slots=True)
class ColumnRead:
    """How one column is selected and converted, and its `columns` entry."""

    name: str
    select: str
    """SQL expression whose value :attr:`convert` turns into the change log's representation."""
    convert: Convert
    described: dict[str, Any]
    key: KeyForm = field(default_factory=KeyForm)
    """As a key: how it is read and bound, so the comparison with the column orders and
    matches the way ``ORDER BY`` the column does (:mod:`.key_forms`)."""


def column_read(  # noqa: PLR0912, PLR0915 - one flat case per column type reads best
    row: dict[str, Any], logical_json: bool, pk: bool
) -> ColumnRead:
    """How to select and convert one column, and its `columns` entry (events.COLUMNS_DOC)."""
    name = str(row["COLUMN_NAME"])
    data_type = str(row["DATA_TYPE"]).lower()
    column_type = str(row["COLUMN_TYPE"]).lower()
    q = quote_identifier(name)
    as_char = f"CAST({q} AS CHAR)"
    precision: int | None = None
    scale: int | None = None
    length: int | None = None
    values: list[str] | None = None
    type_name = data_type
    convert: Convert
    select = q
    if data_type in _INTEGER_TYPES:
        convert = _integer
    elif data_type == "decimal":
        select, convert = as_char, _text
        precision, scale = int(row["NUMERIC_PRECISION"]), int(row["NUMERIC_SCALE"])
    elif data_type == "float":
        select, convert = f"CAST({q} AS DOUBLE)", _float32
    elif data_type == "double":
        convert = _double
    elif data_type == "bit":
        length = int(row["NUMERIC_PRECISION"])
        convert = _bits(length)
    elif data_type in ("date", "datetime", "time"):
        select, convert = as_char, _text
        if data_type != "date":
            scale = int(row["DATETIME_PRECISION"] or 0)
    elif data_type == "timestamp":
        select, convert = as_char, _timestamp
        scale = int(row["DATETIME_PRECISION"] or 0)
    elif data_type == "year":
        convert = _integer
    elif data_type in ("char", "varchar"):
        select, convert = _character(q, row.get("CHARACTER_SET_NAME"))
        length = int(row["CHARACTER_OCTET_LENGTH"])
    elif data_type in ("binary", "varbinary"):
        convert = _b64
        length = int(row["CHARACTER_OCTET_LENGTH"])
    elif data_type in _TEXT_TYPES:
        if logical_json:
            type_name, convert = "json", _json
        else:
            type_name = "text"
            select, convert = _character(q, row.get("CHARACTER_SET_NAME"))
    elif data_type in _BLOB_TYPES:
        type_name, convert = "blob", _b64
    elif data_type == "json":  # MySQL's binary JSON: the server's text, as the stream
        select, convert = as_char, _text  # prints it (values/mysql_json.py)
    elif data_type == "enum":
        convert = _text
        values = _labels(column_type)
    elif data_type == "set":
        select, convert = as_char, _set
        values = _labels(column_type)
    elif data_type in ("uuid", "inet4", "inet6"):
        select, convert = as_char, _text
    elif data_type in _GEOMETRY_TYPES:
        type_name, convert = "geometry", _geometry
    else:
        raise SnapshotError(
            f"column {name!r} has type {column_type!r}, which the snapshot cannot read"
        )
    described = {
        "name": name,
        "type": type_name,
        # The binlog's table map flags YEAR as unsigned; say the same.
        "unsigned": "unsigned" in column_type or data_type == "year",
        "precision": precision,
        "scale": scale,
        "length": length,
        "pk": pk,
        "values": values,
    }
    return ColumnRead(name, select, convert, described, key_form(q, data_type, row))


def _character(quoted: str, charset: Any) -> tuple[str, Convert]:
    """CHAR/VARCHAR/TEXT: the server's text for utf8 columns; for other charsets the bytes,
    decoded as the binlog source decodes them (the server's text has '?' for bytes the
    charset does not define, and Python's codecs differ from MySQL's charsets)."""
    name = str(charset or "utf8mb4")
    decode = text_decoder(name)
    if server_text_is_exact(name) or decode is None:
        return quoted, _text
    return f"CAST({quoted} AS BINARY)", lambda raw: decode(bytes(raw))


def _labels(column_type: str) -> list[str]:
    inner = column_type[column_type.index("(") + 1 : column_type.rindex(")")]
    labels: list[str] = []
    i = 0
    while i < len(inner):
        if inner[i] != "'":
            i += 1
            continue
        j = i + 1
        label: list[str] = []
        while j < len(inner):
            if inner[j] == "'" and j + 1 < len(inner) and inner[j + 1] == "'":
                label.append("'")
                j += 2
            elif inner[j] == "'":
                break
            else:
                label.append(inner[j])
                j += 1
        labels.append("".join(label))
        i = j + 1
    return labels
