"""Row images of one table's rows events, decoded into JSON text; the table's `columns` JSON."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from cdc_platform.errors import SourceError, SourceSettingsError
from cdc_platform.source.values.columns import ColumnSpec, FieldType, Reader, dumps
from cdc_platform.source.values.image_json import FAST_JSON, image_encoder, native_reader
from cdc_platform.source.values.readers import make_reader

__all__ = ["RowDecoder", "describe_columns", "type_name"]


_TYPE_NAMES: dict[int, str] = {
    FieldType.TINY: "tinyint",
    FieldType.SHORT: "smallint",
    FieldType.INT24: "mediumint",
    FieldType.LONG: "int",
    FieldType.LONGLONG: "bigint",
    FieldType.DECIMAL: "decimal",
    FieldType.NEWDECIMAL: "decimal",
    FieldType.FLOAT: "float",
    FieldType.DOUBLE: "double",
    FieldType.BIT: "bit",
    FieldType.DATE: "date",
    FieldType.NEWDATE: "date",
    FieldType.DATETIME: "datetime",
    FieldType.DATETIME2: "datetime",
    FieldType.TIMESTAMP: "timestamp",
    FieldType.TIMESTAMP2: "timestamp",
    FieldType.TIME: "time",
    FieldType.TIME2: "time",
    FieldType.YEAR: "year",
    FieldType.JSON: "json",
    FieldType.GEOMETRY: "geometry",
    FieldType.ENUM: "enum",
    FieldType.SET: "set",
}

_BLOB_TYPES = frozenset(
    {FieldType.TINY_BLOB, FieldType.MEDIUM_BLOB, FieldType.LONG_BLOB, FieldType.BLOB}
)

_STRING_TYPE_NAMES: dict[int, tuple[str, str]] = {
    FieldType.VARCHAR: ("varchar", "varbinary"),
    FieldType.VAR_STRING: ("varchar", "varbinary"),
    FieldType.STRING: ("char", "binary"),
    **dict.fromkeys(_BLOB_TYPES, ("text", "blob")),
}
"""(character, binary) names of the types whose name depends on having a charset."""


def type_name(spec: ColumnSpec) -> str:
    """The lowercase MySQL/MariaDB type name of a column (events.COLUMNS_DOC)."""
    if spec.logical:
        return spec.logical
    if spec.enum_values or spec.set_values:
        return "enum" if spec.enum_values else "set"
    if spec.type in _STRING_TYPE_NAMES:
        text, binary = _STRING_TYPE_NAMES[spec.type]
        return text if spec.encoding else binary
    return _TYPE_NAMES.get(spec.type, "unknown")


def describe_columns(columns: Sequence[ColumnSpec], primary_key: Sequence[str]) -> str:
    """The change log's `columns` JSON for one table version (format: events.COLUMNS_DOC)."""
    keys = set(primary_key)
    described = []
    for spec in columns:
        name = type_name(spec)
        temporal = name in ("time", "datetime", "timestamp")
        described.append(
            {
                "name": spec.name,
                "type": name,
                "unsigned": spec.unsigned,
                "precision": spec.precision if name == "decimal" else None,
                "scale": spec.scale if name == "decimal" else (spec.fsp if temporal else None),
                "length": spec.bits
                if name == "bit"
                else (
                    spec.max_length if name in ("char", "varchar", "binary", "varbinary") else None
                ),
                "pk": spec.name in keys,
                "values": list(spec.enum_values or spec.set_values) or None,
            }
        )
    return dumps(described)


class RowDecoder:
    """Decodes the row images of one table's rows events into JSON text.

    Built once per table-map event of a captured table. Row images are dicts in column order,
    serialised with :data:`dumps`; ``pk`` is the JSON of the primary-key columns, or of the
    whole image when the table has no primary key.
    """

    __slots__ = (
        "_by_bitmap",
        "_columns",
        "_dumps",
        "_fast_json",
        "_pk_names",
        "_pk_prefix",
        "columns_json",
        "db",
        "table",
    )

    def __init__(
        self,
        db: str,
        table: str,
        columns: Sequence[ColumnSpec],
        primary_key: Sequence[int] = (),
        *,
        fast_json: bool = FAST_JSON,
    ) -> None:
        self.db = db
        self._fast_json = fast_json
        self._dumps = image_encoder(fast_json)
        """Writes images and keys: the same text either way (:mod:`.image_json`)."""
        self.table = table
        self._columns = tuple(columns)
        self._pk_names = tuple(columns[i].name for i in primary_key if i < len(columns))
        self._pk_prefix = "{" + dumps(self._pk_names[0]) + ":" if len(self._pk_names) == 1 else ""
        """``{"name":`` of a one-column key: its JSON is then this, the value's JSON and ``}``
        (measured: a fifth of the time of encoding a one-entry dict, about 2 us a row less)."""
        self.columns_json = describe_columns(self._columns, self._pk_names)
        """The change log's `columns` value for rows of this table version (one shared str)."""
        self._by_bitmap: dict[bytes, tuple[tuple[tuple[str, Reader], ...], int]] = {}
        # Fail on an unsupported column now, at the table map, not at the first row.
        self._readers(b"\xff" * ((len(self._columns) + 7) // 8))

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its definition (the readers are rebuilt): worker processes decode with it."""
        names = [c.name for c in self._columns]
        primary_key = [names.index(name) for name in self._pk_names]
        return (
            _rebuild,
            (self.db, self.table, self._columns, primary_key, self._fast_json),
        )

    @property
    def columns(self) -> tuple[ColumnSpec, ...]:
        """The table's columns, in order."""
        return self._columns

    @property
    def primary_key(self) -> tuple[str, ...]:
        """Names of the primary-key columns (empty: no primary key)."""
        return self._pk_names

    def _readers(self, present: bytes) -> tuple[tuple[tuple[str, Reader], ...], int]:
        """(name, reader) of the columns present in an image, and its NULL-bitmap length."""
        cached = self._by_bitmap.get(present)
        if cached is None:
            bitmap = int.from_bytes(present, "little")
            full = (1 << len(self._columns)) - 1
            if bitmap & full != full:
                raise SourceSettingsError(
                    f"rows event of {self.db}.{self.table} with a partial row image "
                    f"({bin(bitmap & full).count('1')} of {len(self._columns)} columns): every "
                    "session must use binlog_row_image=FULL for lossless CDC"
                )
            try:
                columns = self._columns
                readers = tuple(
                    (c.name, self._reader(c)) for i, c in enumerate(columns) if bitmap >> i & 1
                )
            except SourceError as exc:
                raise SourceError(f"{self.db}.{self.table}: {exc}") from None
            cached = (readers, (len(readers) + 7) // 8)
            self._by_bitmap[present] = cached
        return cached

    def _reader(self, column: ColumnSpec) -> Reader:
        read = make_reader(column)
        return native_reader(column, read) if self._fast_json else read

    @staticmethod
    def _image(
        data: bytes, pos: int, readers: tuple[tuple[str, Reader], ...], null_bytes: int
    ) -> tuple[dict[str, Any], int]:
        nulls = int.from_bytes(data[pos : pos + null_bytes], "little")
        pos += null_bytes
        row: dict[str, Any] = {}
        for name, read in readers:
            if nulls & 1:
                row[name] = None
            else:
                row[name], pos = read(data, pos)
            nulls >>= 1
        return row, pos

    def _pk(self, row: dict[str, Any], image: str) -> str:
        names = self._pk_names
        if self._pk_prefix:
            return self._pk_prefix + self._dumps(row.get(names[0])) + "}"
        if not names:
            return image
        return self._dumps({name: row.get(name) for name in names})

    def images(self, data: bytes, present: bytes) -> list[tuple[str, str]]:
        """(image JSON, pk JSON) of each row of a write or delete rows event."""
        readers, null_bytes = self._readers(present)
        out: list[tuple[str, str]] = []
        pos, end = 0, len(data)
        image_of, dumps_image = self._image, self._dumps
        try:
            while pos < end:
                row, pos = image_of(data, pos, readers, null_bytes)
                image = dumps_image(row)
                out.append((image, self._pk(row, image)))
        except (ValueError, IndexError, struct.error, TypeError, SourceError) as exc:
            raise self._error(exc) from exc
        self._check_end(pos, end)
        return out

    def updates(
        self, data: bytes, present_before: bytes, present_after: bytes
    ) -> list[tuple[str, str, str]]:
        """(before JSON, after JSON, pk JSON of the after image) of each row of an update."""
        before_readers, before_nulls = self._readers(present_before)
        after_readers, after_nulls = self._readers(present_after)
        out: list[tuple[str, str, str]] = []
        pos, end = 0, len(data)
        image_of, dumps_image = self._image, self._dumps
        try:
            while pos < end:
                before, pos = image_of(data, pos, before_readers, before_nulls)
                after, pos = image_of(data, pos, after_readers, after_nulls)
                after_json = dumps_image(after)
                out.append((dumps_image(before), after_json, self._pk(after, after_json)))
        except (ValueError, IndexError, struct.error, TypeError, SourceError) as exc:
            raise self._error(exc) from exc
        self._check_end(pos, end)
        return out

    def _error(self, exc: Exception) -> SourceError:
        """The table named (a reader's SourceError names the column and says what to do)."""
        detail = str(exc) if isinstance(exc, SourceError) else repr(exc)
        return SourceError(f"cannot decode a row of {self.db}.{self.table}: {detail}")

    def _check_end(self, pos: int, end: int) -> None:
        # Every column width must add up to the event exactly; anything else means the
        # table map and the rows disagree, and guessing would corrupt data silently.
        if pos != end:
            raise SourceError(
                f"rows event of {self.db}.{self.table}: decoded {pos} of {end} bytes; "
                "the table map does not describe these rows"
            )


def _rebuild(
    db: str, table: str, columns: Sequence[ColumnSpec], primary_key: Sequence[int], fast_json: bool
) -> RowDecoder:
    """RowDecoder's arguments, positional for pickle."""
    return RowDecoder(db, table, columns, primary_key, fast_json=fast_json)
