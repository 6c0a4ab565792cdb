"""Source column types -> Spark types, and JSON row images -> typed Spark columns.

The change log's ``columns`` JSON (:data:`cdc_platform.events.COLUMNS_DOC`) describes each
source column; the row images hold the lossless JSON representation of ``docs/types.md``. A
mirror stores typed columns, so every value is parsed once from its JSON text:
``from_json(image, struct<every column: string>)`` gives each value's raw text (numbers keep
all their digits, objects and arrays stay JSON text), and a per-type expression turns that text
into the Spark value. Everything here is plain Spark SQL, so Apache Spark runs it as Sail does.

=========================== ======================= =========================================
source type                 Spark type              notes
=========================== ======================= =========================================
tinyint / unsigned          byte / short
smallint / unsigned         short / int
mediumint                   int
int / unsigned              int / long
bigint / unsigned           long / decimal(20,0)    BIGINT UNSIGNED max needs 20 digits
decimal(p,s)                decimal(p,s)            p > 38 (Spark's limit): string
float / double              float / double          exact: the JSON is the shortest round trip
bit(n)                      long / decimal(20,0)    the '0'/'1' string read as a number (n=64)
date, datetime, timestamp   string                  zero_dates "string" (the default), and in
                                                    a primary key: the change log's text
date                        date                    zero_dates "null": zero / partial -> null
datetime                    timestamp_ntz           zero_dates "null"; local, no zone
timestamp                   timestamp               zero_dates "null"; the UTC instant
time                        string                  '[-]HH:MM:SS[.f]', beyond a day's range
year                        short                   0000 is 0
char, varchar, *text        string
binary, varbinary, *blob    binary                  from base64
enum                        string                  the label
set                         array<string>           labels in definition order
json                        string                  the JSON text
geometry (all spatial)      string                  the JSON {"srid": n, "wkb": base64}
uuid, inet4, inet6          string                  canonical text
=========================== ======================= =========================================
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from pyspark.sql import Column
from pyspark.sql import functions as F  # noqa: N812 (the PySpark idiom)
from pyspark.sql import types as T  # noqa: N812 (the PySpark idiom)

from cdc_platform.errors import SparkError, UnsupportedColumnTypeError
from cdc_platform.spark.names import EngineColumns, engine_columns

__all__ = [
    "TYPE_ALIASES",
    "ColumnSpec",
    "TableSchema",
    "ZeroDates",
    "parse_columns",
    "raw_struct",
    "spark_type",
    "typed_value",
    "with_zero_dates",
    "zero_dates_of",
]

ZeroDates = Literal["string", "null"]
"""How a mirror holds DATE, DATETIME and TIMESTAMP columns, whose zero and partial values
(``0000-00-00``, ``2026-00-15``) no Spark type holds: ``string`` keeps the change log's text
(every value round-trips; the default), ``null`` types them as date / timestamp_ntz /
timestamp and turns those values into null."""

_SPARK_MAX_PRECISION = 38

TYPE_ALIASES: dict[str, str] = {
    "integer": "int",
    "bool": "tinyint",
    "boolean": "tinyint",
    "numeric": "decimal",
    "dec": "decimal",
    "fixed": "decimal",
    "real": "double",
    "double precision": "double",
    "tinytext": "text",
    "mediumtext": "text",
    "longtext": "text",
    "tinyblob": "blob",
    "mediumblob": "blob",
    "longblob": "blob",
    "point": "geometry",
    "linestring": "geometry",
    "polygon": "geometry",
    "multipoint": "geometry",
    "multilinestring": "geometry",
    "multipolygon": "geometry",
    "geometrycollection": "geometry",
    "geomcollection": "geometry",
}
"""Spellings the source might use for the canonical names of COLUMNS_DOC."""

_TEXT_TYPES = frozenset(
    {"char", "varchar", "text", "enum", "time", "uuid", "inet4", "inet6", "json", "geometry"}
)
"""Kept as text. Geometry stays the change log's JSON: Sail 0.7.2 panics reading back a Delta
struct column written from an expression (measured), and WKB text is what tools exchange."""
_BINARY_TYPES = frozenset({"binary", "varbinary", "blob"})
_TEMPORAL_TYPES = frozenset({"date", "datetime", "timestamp"})
"""Types with zero and partial values (``0000-00-00``) no Spark type holds: they become null,
so in a primary key they would collapse distinct rows; there they stay text."""
_INTEGER_TYPES: dict[str, tuple[T.DataType, T.DataType]] = {
    "tinyint": (T.ByteType(), T.ShortType()),
    "smallint": (T.ShortType(), T.IntegerType()),
    "mediumint": (T.IntegerType(), T.IntegerType()),
    "int": (T.IntegerType(), T.LongType()),
    "bigint": (T.LongType(), T.DecimalType(20, 0)),
}
"""(signed, unsigned) Spark type of each integer type: the narrowest that holds every value."""

_FIXED_TYPES: dict[str, T.DataType] = {
    "float": T.FloatType(),
    "double": T.DoubleType(),
    "date": T.DateType(),
    "datetime": T.TimestampNTZType(),
    "timestamp": T.TimestampType(),
    "year": T.ShortType(),
    "set": T.ArrayType(T.StringType()),
}


@dataclass(frozen=True, slots=True)
class ColumnSpec:
    """One source column as the change log's ``columns`` JSON describes it."""

    name: str
    type: str
    """Canonical lowercase type name (aliases such as ``longtext`` already mapped)."""
    unsigned: bool = False
    precision: int | None = None
    scale: int | None = None
    length: int | None = None
    pk: bool = False
    values: tuple[str, ...] | None = None
    text: bool = False
    """A date/datetime/timestamp the mirror keeps as the change log's text (``ZeroDates``)."""


@dataclass(frozen=True, slots=True)
class TableSchema:
    """A table's columns in table order; ``key`` are the primary-key columns, or every column
    when the table has no primary key (rows are then identified by their whole image)."""

    columns: tuple[ColumnSpec, ...]

    @property
    def names(self) -> list[str]:
        """Column names in table order."""
        return [c.name for c in self.columns]

    @property
    def engine(self) -> EngineColumns:
        """Names for the engine's own columns beside these (never equal to one of them)."""
        return engine_columns(self.names)

    @property
    def has_primary_key(self) -> bool:
        """Whether any column is flagged ``pk``."""
        return any(c.pk for c in self.columns)

    @property
    def key(self) -> list[str]:
        """The columns that identify a row."""
        keys = [c.name for c in self.columns if c.pk]
        return keys or self.names

    def column(self, name: str) -> ColumnSpec:
        """The column called ``name``."""
        for spec in self.columns:
            if spec.name == name:
                return spec
        raise KeyError(name)

    def to_json(self) -> str:
        """Canonical JSON (sorted keys, table order kept), used to compare schemas."""
        return json.dumps(
            [
                {
                    "name": c.name,
                    "type": c.type,
                    "unsigned": c.unsigned,
                    "precision": c.precision,
                    "scale": c.scale,
                    "length": c.length,
                    "pk": c.pk,
                    "values": list(c.values) if c.values is not None else None,
                    # only when set: mirrors of tables without such columns keep their schema
                    **({"text": True} if c.text else {}),
                }
                for c in self.columns
            ],
            sort_keys=True,
            separators=(",", ":"),
        )


def _optional_int(item: dict[str, Any], key: str) -> int | None:
    value = item.get(key)
    return None if value is None else int(value)


def parse_columns(text: str) -> TableSchema:
    """Parse the ``columns`` JSON of a change-log row; raises SparkError when malformed."""
    try:
        items = json.loads(text)
        if not isinstance(items, list) or not items:
            raise TypeError("expected a non-empty list")
        specs: list[ColumnSpec] = []
        for item in items:
            type_name = str(item["type"]).strip().lower()
            values = item.get("values")
            specs.append(
                ColumnSpec(
                    name=str(item["name"]),
                    type=TYPE_ALIASES.get(type_name, type_name),
                    unsigned=bool(item.get("unsigned", False)),
                    precision=_optional_int(item, "precision"),
                    scale=_optional_int(item, "scale"),
                    length=_optional_int(item, "length"),
                    pk=bool(item.get("pk", False)),
                    values=tuple(str(v) for v in values) if values is not None else None,
                    text=bool(item.get("text", False)),
                )
            )
    except (ValueError, TypeError, KeyError) as exc:
        raise SparkError(
            f"unreadable `columns` JSON in the change log ({exc}): {text[:200]}"
        ) from exc
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise SparkError(f"`columns` JSON names a column twice: {names}")
    return TableSchema(tuple(specs))


def spark_type(  # noqa: PLR0911 (one return per family of types)
    spec: ColumnSpec, *, db: str = "?", table: str = "?"
) -> T.DataType:
    """The mirror's Spark type for a source column (see the module table)."""
    kind = spec.type
    if (spec.pk or spec.text) and kind in _TEMPORAL_TYPES:
        return T.StringType()
    if kind in _INTEGER_TYPES:
        signed, unsigned = _INTEGER_TYPES[kind]
        return unsigned if spec.unsigned else signed
    if kind == "decimal":
        precision = spec.precision if spec.precision is not None else 10
        scale = spec.scale if spec.scale is not None else 0
        if precision > _SPARK_MAX_PRECISION:
            return T.StringType()
        return T.DecimalType(precision, scale)
    if kind == "bit":
        return T.DecimalType(20, 0) if (spec.length or 1) > 63 else T.LongType()
    if kind in _TEXT_TYPES:
        return T.StringType()
    if kind in _BINARY_TYPES:
        return T.BinaryType()
    fixed = _FIXED_TYPES.get(kind)
    if fixed is None:
        raise UnsupportedColumnTypeError(db, table, spec.name, spec.type)
    return fixed


def typed_value(
    raw: Column, spec: ColumnSpec, *, db: str = "?", table: str = "?", lenient: bool = False
) -> Column:
    """The typed value of one column from its raw JSON text (a string column).

    Numbers use strict casts: a value that does not parse is a defect worth stopping for.
    Dates and times use ``try_cast``, because MySQL's zero and partial dates are valid source
    values that no Spark type can hold; they become null (primary-key columns keep the text).
    ``lenient``: the text was written under another column type (before a ``MODIFY``), so a
    value the new type cannot hold becomes null instead of failing every apply; the source
    re-reads such tables, so those rows are replaced by their converted values.
    """
    target = spark_type(spec, db=db, table=table)
    kind = spec.type
    if kind in _BINARY_TYPES:
        return F.unbase64(raw)
    if kind == "bit":
        return F.conv(raw, 2, 10).cast(target)
    if isinstance(target, T.StringType):
        return raw
    if kind in _TEMPORAL_TYPES:
        return raw.try_cast(target)
    if kind == "set":
        return F.from_json(raw, T.ArrayType(T.StringType()))
    return raw.try_cast(target) if lenient else raw.cast(target)


def raw_struct(names: Sequence[str]) -> T.StructType:
    """``struct<name: string, ...>``: parsing an image with it keeps each value's raw text."""
    return T.StructType([T.StructField(name, T.StringType()) for name in names])


def with_zero_dates(schema: TableSchema, policy: ZeroDates) -> TableSchema:
    """``schema`` with its date/datetime/timestamp columns held as ``policy`` says."""
    text = policy == "string"
    return TableSchema(
        tuple(
            replace(c, text=text and c.type in _TEMPORAL_TYPES)
            if c.type in _TEMPORAL_TYPES or c.text
            else c
            for c in schema.columns
        )
    )


def zero_dates_of(schema: TableSchema) -> ZeroDates:
    """The policy a mirror's schema was built with (``string`` when it has no such column)."""
    temporal = [c for c in schema.columns if c.type in _TEMPORAL_TYPES]
    return "null" if temporal and not any(c.text for c in temporal) else "string"
