"""Reading a table's existing rows in primary-key chunks, as the same JSON the binlog gives.

The snapshot writes op ``r`` rows next to the binlog source's rows, and mirrors and replays
compare them by their JSON text, so every value must come out exactly as
:mod:`cdc_platform.source.values` decodes it from the binlog (docs/types.md). The server
does most of the work: each column is selected through an expression whose text is already
that representation (``CAST(... AS CHAR)`` for decimals, dates, times, UUID/INET, SETs; the
session time zone is UTC so TIMESTAMP text is the instant in UTC), and the few remaining
conversions (base64, BIT strings, FLOAT shortest form, geometry) reuse the same helpers.

Only tables with a primary key can be chunked; others are refused with a SnapshotError
(docs/snapshot.md), because without a key neither the chunk boundaries nor the merge with
the binlog window are defined.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pymysql

from cdc_platform.errors import SnapshotError
from cdc_platform.source.filters import TableFilter
from cdc_platform.source.mysql import source_errors
from cdc_platform.source.reading.key_forms import KeyForm, key_form
from cdc_platform.source.reading.result_rows import fetch_rows
from cdc_platform.source.reading.row_images import RowsJson, rows_json
from cdc_platform.source.sql import format_safe, qualified_name, quote_identifier
from cdc_platform.source.values import dumps
from cdc_platform.source.values.charsets import server_text_is_exact, text_decoder
from cdc_platform.source.values.image_json import FAST_JSON, float_fragment, image_encoder

__all__ = [
    "ChunkRows",
    "SnapshotTable",
    "base_tables",
    "describe_table",
    "estimated_rows",
    "read_chunk",
    "read_keys",
    "select_rows",
]

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

_write_image = image_encoder(FAST_JSON)
"""A row image's JSON text: orjson when installed, the same text as :data:`dumps`."""


def _converters(spec: SnapshotTable) -> list[tuple[int, str, Convert]]:
    """(index, name, conversion) of the columns whose driver value is not yet what the
    image encoder takes as it is."""
    out: list[tuple[int, str, Convert]] = []
    for i, c in enumerate(spec.columns):
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
class _Column:
    name: str
    select: str
    """SQL expression whose value :attr:`convert` turns into the change log's representation."""
    convert: Convert
    described: dict[str, Any]
    key: KeyForm = field(default_factory=KeyForm)
    """As a key: how it is read and bound, so the comparison with the column orders and
    matches the way ``ORDER BY`` the column does (:mod:`.key_forms`)."""


def _column(  # noqa: PLR0912, PLR0915 - one flat case per column type reads best
    row: dict[str, Any], logical_json: bool, pk: bool
) -> _Column:
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
    return _Column(name, select, convert, described, key_form(q, data_type, row))


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


@dataclass(frozen=True, slots=True)
class SnapshotTable:
    """A table prepared for chunked reading: its columns, key and `columns` JSON."""

    db: str
    table: str
    columns: tuple[_Column, ...]
    primary_key: tuple[str, ...]
    columns_json: str
    """The change log's `columns` value for its rows (same as the binlog source writes)."""

    @property
    def name(self) -> str:
        """``db.table``."""
        return f"{self.db}.{self.table}"

    def key_sql(self) -> str:
        """The primary key's columns, quoted and ``format_safe`` (``ORDER BY`` and the left
        side of a key comparison)."""
        return format_safe(", ".join(quote_identifier(k) for k in self.primary_key))

    def key_select(self) -> str:
        """What a chunk selects as the raw key (see :func:`.key_forms.key_form`)."""
        return ", ".join(c.key.select or format_safe(quote_identifier(c.name)) for c in self._key)

    def key_marks(self) -> str:
        """``(%s, ...)`` with each key column's bind form, for one raw key."""
        return "(" + ", ".join(c.key.bind for c in self._key) + ")"

    def key_args(self, key: Sequence[Any]) -> tuple[Any, ...]:
        """One raw key's values as :meth:`key_marks` binds them."""
        return tuple(
            v if v is None or c.key.value is None else c.key.value(v)
            for c, v in zip(self._key, key, strict=True)
        )

    @property
    def _key(self) -> list[_Column]:
        by_name = {c.name: c for c in self.columns}
        return [by_name[k] for k in self.primary_key]


def base_tables(
    conn: pymysql.connections.Connection[Any], include: Sequence[str], exclude: Sequence[str]
) -> list[str]:
    """Every base table (``db.table``) outside the system schemas that the destination's
    ``include_tables`` / ``exclude_tables`` regexes capture, sorted."""
    filt = TableFilter(list(include), list(exclude))
    with source_errors(conn, "listing the tables of"), conn.cursor() as cur:
        cur.execute(
            "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "
            "WHERE TABLE_TYPE = 'BASE TABLE' AND TABLE_SCHEMA NOT IN "
            "('mysql', 'information_schema', 'performance_schema', 'sys') "
            "ORDER BY TABLE_SCHEMA, TABLE_NAME"
        )
        return [f"{db}.{t}" for db, t in cur.fetchall() if filt.matches(str(db), str(t))]


def describe_table(
    conn: pymysql.connections.Connection[Any], db: str, table: str, *, require_key: bool = True
) -> SnapshotTable:
    """Read a table's columns and primary key from information_schema.

    ``require_key=False`` describes a table without a primary key too (``primary_key`` empty),
    for readers that do not chunk by key (the reconciliation of keyless tables).

    Raises:
        SnapshotError: the table does not exist, has no primary key (unless allowed) or an
            unreadable column.
        SourceError: the server failed the read (see :func:`~.mysql.translate`).
    """
    with (
        source_errors(conn, f"describing {db}.{table} on"),
        conn.cursor(pymysql.cursors.DictCursor) as cur,
    ):
        cur.execute(
            "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, NUMERIC_PRECISION, NUMERIC_SCALE, "
            "DATETIME_PRECISION, CHARACTER_OCTET_LENGTH, CHARACTER_SET_NAME, COLLATION_NAME "
            "FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
            (db, table),
        )
        rows = list(cur.fetchall())
        if not rows:
            raise SnapshotError(f"table {db}.{table} does not exist (or is not visible)")
        cur.execute(
            "SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s "
            "AND TABLE_NAME = %s AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX",
            (db, table),
        )
        key = tuple(str(r["COLUMN_NAME"]) for r in cur.fetchall())
        json_columns: set[str] = set()
        cur.execute(
            "SELECT CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS "
            "WHERE CONSTRAINT_SCHEMA = %s AND TABLE_NAME = %s",
            (db, table),
        )
        for r in cur.fetchall():
            clause = str(r["CHECK_CLAUSE"]).strip()
            if clause.lower().startswith("json_valid(`") and clause.endswith("`)"):
                json_columns.add(clause[len("json_valid(`") : -2].replace("``", "`"))
    if not key and require_key:
        raise SnapshotError(
            f"table {db}.{table} has no primary key: the snapshot chunks and merges by primary "
            "key, so it cannot copy this table consistently. Add a primary key, or exclude the "
            "table from the snapshot (its later changes are still captured from the binlog)."
        )
    try:
        columns = tuple(
            _column(r, str(r["COLUMN_NAME"]) in json_columns, str(r["COLUMN_NAME"]) in key)
            for r in rows
        )
    except SnapshotError as exc:
        raise SnapshotError(f"{db}.{table}: {exc}") from None
    return SnapshotTable(db, table, columns, key, dumps([c.described for c in columns]))


@dataclass(frozen=True, slots=True)
class ChunkRows:
    """One chunk in key order: each row's pk JSON and image JSON (two lists, the way the
    change log takes them), and the last row's raw key."""

    pks: list[str]
    images: list[str]
    last_key: list[Any] | None
    keys: list[Sequence[Any]] = field(default_factory=list)
    """Every row's raw key (as pymysql returned it), in row order."""

    def __len__(self) -> int:
        return len(self.pks)

    @property
    def rows(self) -> list[tuple[str, str]]:
        """(pk JSON, image JSON) per row."""
        return list(zip(self.pks, self.images, strict=True))


def _rows_json(spec: SnapshotTable) -> RowsJson:
    """The function writing ``spec``'s rows as key and image JSON (:mod:`.row_images`)."""
    index = {c.name: i for i, c in enumerate(spec.columns)}
    return rows_json(
        [c.name for c in spec.columns],
        [(i, convert) for i, _, convert in _converters(spec)],
        [index[k] for k in spec.primary_key],
        _write_image,
        [dumps(k) for k in spec.primary_key],
    )


def _select(
    conn: pymysql.connections.Connection[Any],
    spec: SnapshotTable,
    extra: str,
    tail: str,
    args: tuple[Any, ...],
) -> tuple[list[str], list[str], list[tuple[Any, ...]]]:
    """``SELECT <columns>, <extra> FROM <table> <tail>``: the pk JSONs, the image JSONs and
    the rows as the driver returned them (the values of ``extra`` after the columns)."""
    select = format_safe(", ".join(c.select for c in spec.columns))
    if extra:
        select += ", " + extra
    table = format_safe(qualified_name(spec.db, spec.table))
    sql = f"SELECT {select} FROM {table} {tail}"  # noqa: S608 (identifiers quoted by the source's quoting, values bound as parameters)
    with source_errors(conn, f"reading {spec.name} from"):
        records = fetch_rows(conn, sql, args)
    pks, images = _rows_json(spec)(records)
    return pks, images, records


def select_rows(
    conn: pymysql.connections.Connection[Any],
    spec: SnapshotTable,
    extra: str,
    tail: str,
    args: tuple[Any, ...] = (),
) -> list[tuple[str, str, tuple[Any, ...]]]:
    """``SELECT <columns>, <extra> FROM <table> <tail>``: per row the ``pk`` JSON, the image
    JSON (the same text the binlog source writes) and the values of ``extra``.

    The one place that turns selected rows into change-log JSON (snapshot, reconciliation,
    id watch). One autocommit SELECT: no lock, one consistent read. ``extra`` and ``tail`` are
    executed with parameters: names in them go through ``format_safe(quote_identifier(...))``.

    Raises:
        SourceError: the server failed the read (see :func:`~.mysql.translate`), e.g.
            SourceTableMissingError, SourceTableChangedError, SourceConnectionError.
    """
    pks, images, records = _select(conn, spec, extra, tail, args)
    width = len(spec.columns)
    return list(zip(pks, images, (r[width:] for r in records), strict=True))


def _chunk(
    conn: pymysql.connections.Connection[Any],
    spec: SnapshotTable,
    tail: str,
    args: tuple[Any, ...],
) -> ChunkRows:
    """The rows of ``tail`` as a chunk, with each row's raw key (``spec.key_select()``)."""
    pks, images, records = _select(conn, spec, spec.key_select(), tail, args)
    width = len(spec.columns)
    keys: list[Sequence[Any]] = [r[width:] for r in records]
    return ChunkRows(pks, images, list(keys[-1]) if keys else None, keys)


def read_chunk(
    conn: pymysql.connections.Connection[Any],
    spec: SnapshotTable,
    after: Sequence[Any] | None,
    limit: int,
) -> ChunkRows:
    """The next ``limit`` rows with a key greater than ``after`` (None: from the start).

    One autocommit SELECT on the key, so it holds no lock and reads one consistent view;
    the caller takes the binlog watermarks around it.
    """
    key_sql = spec.key_sql()
    tail = ""
    args: tuple[Any, ...] = ()
    if after is not None:
        tail = f"WHERE ({key_sql}) > {spec.key_marks()} "
        args = spec.key_args(after)
    tail += f"ORDER BY {key_sql} LIMIT {int(limit)}"
    return _chunk(conn, spec, tail, args)


def read_keys(
    conn: pymysql.connections.Connection[Any],
    spec: SnapshotTable,
    keys: Sequence[Sequence[Any]],
) -> ChunkRows:
    """The rows whose primary key is one of ``keys`` (raw values), in key order.

    Like :func:`read_chunk`, one autocommit SELECT without locks; keys that have no row are
    simply absent from the result.
    """
    if not keys:
        return ChunkRows([], [], None)
    width_key = len(spec.primary_key)
    for key in keys:
        if len(key) != width_key:
            raise SnapshotError(
                f"{spec.name}: a key has {len(key)} values, the primary key has {width_key}"
            )
    key_sql = spec.key_sql()
    row_marks = spec.key_marks()
    tail = f"WHERE ({key_sql}) IN ({', '.join([row_marks] * len(keys))}) ORDER BY {key_sql}"
    args = tuple(value for key in keys for value in spec.key_args(key))
    return _chunk(conn, spec, tail, args)


def estimated_rows(conn: pymysql.connections.Connection[Any], spec: SnapshotTable) -> int:
    """The table's estimated row count, for progress only: ``TABLE_ROWS`` of
    information_schema (InnoDB's estimate, read without scanning the table, unlike COUNT(*));
    a missing table raises the server's "doesn't exist" error like a read would."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT TABLE_ROWS FROM information_schema.TABLES "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
            (spec.db, spec.table),
        )
        row = cur.fetchone()
        if row is None:
            # The same error a read of a dropped table gets, so one path handles both.
            cur.execute(f"SELECT 1 FROM {qualified_name(spec.db, spec.table)} LIMIT 0")  # noqa: S608 (identifiers quoted by the source's quoting, values bound as parameters)
            return 0
    return int(row[0] or 0)
