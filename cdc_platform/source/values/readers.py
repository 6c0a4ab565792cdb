"""The reader of each column: binlog type, signedness, charset and logical type pick one."""

from __future__ import annotations

from collections.abc import Callable

from cdc_platform.errors import SourceError
from cdc_platform.source.values.columns import ColumnSpec, FieldType, Reader
from cdc_platform.source.values.json_values import json_text_reader, mysql_json_reader
from cdc_platform.source.values.logical import LOGICAL_BINARY, logical_reader
from cdc_platform.source.values.numbers import (
    INTEGER_READERS,
    bit_reader,
    decimal_reader,
    fixed_width,
    read_float,
)
from cdc_platform.source.values.spatial import geometry_reader
from cdc_platform.source.values.strings import binary_reader, enum_reader, set_reader, text_reader
from cdc_platform.source.values.temporal import (
    datetime2_reader,
    read_date,
    read_datetime_v1,
    read_time_v1,
    read_timestamp_v1,
    read_year,
    time2_reader,
    timestamp2_reader,
)

__all__ = ["make_reader"]


def make_reader(column: ColumnSpec) -> Reader:
    """The reader for one column; SourceError for a type the change log cannot represent."""
    integer = INTEGER_READERS.get((column.type, column.unsigned))
    if integer is not None:
        return integer
    plain = _FIXED_READERS.get(column.type)
    if plain is not None:
        return plain
    factory = _READER_FACTORIES.get(column.type)
    if factory is not None:
        return factory(column)
    if column.type == FieldType.JSON:
        return mysql_json_reader(column.length_size, column.name)
    raise SourceError(
        f"column {column.name!r} has binlog type {column.type}, which is not supported"
    )


def _varstring(column: ColumnSpec) -> Reader:
    prefix = 2 if column.max_length > 255 else 1
    return _string_reader(column, prefix, pad=column.type == FieldType.STRING)


def _blob(column: ColumnSpec) -> Reader:
    if column.encoding and column.logical == "json":
        return json_text_reader(column.length_size, column.encoding)
    return _string_reader(column, column.length_size, pad=False)


_FIXED_READERS: dict[int, Reader] = {
    FieldType.FLOAT: read_float,
    FieldType.DOUBLE: fixed_width("<d"),
    FieldType.YEAR: read_year,
    FieldType.DATE: read_date,
    FieldType.DATETIME: read_datetime_v1,
    FieldType.TIMESTAMP: read_timestamp_v1,
    FieldType.TIME: read_time_v1,
}

_READER_FACTORIES: dict[int, Callable[[ColumnSpec], Reader]] = {
    FieldType.NEWDECIMAL: lambda c: decimal_reader(c.precision, c.scale),
    FieldType.DATETIME2: lambda c: datetime2_reader(c.fsp),
    FieldType.TIMESTAMP2: lambda c: timestamp2_reader(c.fsp),
    FieldType.TIME2: lambda c: time2_reader(c.fsp),
    FieldType.BIT: lambda c: bit_reader(c.bits),
    FieldType.ENUM: lambda c: enum_reader(c.enum_values, c.size),
    FieldType.SET: lambda c: set_reader(c.set_values, c.size),
    FieldType.STRING: _varstring,
    FieldType.VARCHAR: _varstring,
    FieldType.VAR_STRING: _varstring,
    FieldType.BLOB: _blob,
    FieldType.TINY_BLOB: _blob,
    FieldType.MEDIUM_BLOB: _blob,
    FieldType.LONG_BLOB: _blob,
    FieldType.GEOMETRY: lambda c: geometry_reader(c.length_size),
}


def _string_reader(column: ColumnSpec, prefix: int, *, pad: bool) -> Reader:
    if column.encoding:
        return text_reader(prefix, column.encoding)
    logical = LOGICAL_BINARY.get((column.logical or "", column.max_length))
    if logical is not None and pad:
        return logical_reader(prefix, logical)
    return binary_reader(prefix, column.max_length if pad else 0)
