"""Table maps: which columns a rows event carries and how to decode them.

Built from the binlog's table-map events (with `binlog_row_metadata=FULL`) plus, where the
metadata cannot say, the catalog (information_schema); used by the transaction assembler
to turn rows events into row images (docs/types.md lists what the library alone gets wrong).
The catalog describes today's definition: a fact the event's own column type cannot carry is
not used, and one the event cannot confirm is refused when later DDL in the binlog names its
column (:mod:`.ddl_history`).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from pymysqlreplication import BinLogStreamReader

from cdc_platform.errors import (
    SourceError,
    SourceSettingsError,
)
from cdc_platform.source.filters import TableFilter
from cdc_platform.source.stream.ddl_history import LaterStatement, touched_columns
from cdc_platform.source.values import ColumnSpec, FieldType, RowDecoder
from cdc_platform.source.values.charsets import charset_of_collation, text_decoder

log = logging.getLogger("cdc_platform.source")


__all__ = [
    "JSON_VALID_CHECK",
    "Catalog",
    "TablePlans",
    "catalog_mismatch",
    "changed_after",
    "column_charsets",
    "definition_differs",
    "enum_labels",
    "labels_in_charset",
]


@dataclass
class Catalog:
    """Column facts from information_schema: MariaDB UUID/INET4/INET6/JSON columns (the binlog
    says BINARY(n) or LONGTEXT) and ENUM/SET labels (the library decodes the table map's
    labels as UTF-8 only, so labels in other charsets come out as '')."""

    logical: dict[str, str] = field(default_factory=dict)
    labels: dict[str, tuple[str, ...]] = field(default_factory=dict)
    columns: tuple[str, ...] = ()
    """Every column's name in order, as information_schema has it today (empty: unknown)."""
    defined_at: int | None = None
    """When the table's definition last changed (``TABLES.CREATE_TIME``, Unix seconds): a
    rows event written before it was written under an older definition."""


def catalog_mismatch(
    catalog: Catalog, names: tuple[str, ...], needed: tuple[str, ...] = ()
) -> str | None:
    """Why ``catalog`` (today's information_schema) certainly cannot describe the columns
    ``needed`` of a table map of ``names``, or None.

    The catalog says what the binlog cannot (a MariaDB UUID/INET/JSON column is BINARY or
    LONGTEXT in the table map, ENUM labels in other charsets are lost), by column name. Read
    during a catch-up across an ALTER it describes the new definition: a needed column it
    no longer has (renamed or dropped since) cannot be decoded from it. Other columns added
    or dropped leave the needed columns' facts usable (see :func:`definition_differs`)."""
    if not catalog.columns:
        return None
    gone = [name for name in needed if name not in catalog.columns]
    if gone:
        return (
            f"its column(s) {', '.join(gone)} are not in information_schema, whose columns "
            f"are ({', '.join(catalog.columns)}); the binlog has ({', '.join(names)})"
        )
    return None


def may_predate_change(catalog: Catalog, names: tuple[str, ...], event_time: int) -> bool:
    """Whether today's definition may be newer than an event's: the column lists differ, or
    the definition time is unknown, later or in the same second (``CREATE_TIME`` has whole
    seconds)."""
    if definition_differs(catalog, names) or catalog.defined_at is None:
        return True
    return event_time <= catalog.defined_at


def definition_differs(catalog: Catalog, names: tuple[str, ...]) -> bool:
    """Whether today's columns differ from the table map's (an ALTER since the event)."""
    return bool(catalog.columns) and catalog.columns != names


def changed_after(catalog: Catalog, event_time: int) -> bool:
    """Whether the table's definition changed after ``event_time`` (by the server's clock;
    a replica's events carry its primary's times, so this may only be suspected)."""
    return catalog.defined_at is not None and event_time < catalog.defined_at


def _utc(seconds: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


_LABEL = re.compile(r"'((?:[^']|'')*)'")


def enum_labels(column_type: str) -> tuple[str, ...]:
    """Labels of "enum('a','it''s')" (information_schema doubles quotes)."""
    inner = column_type[column_type.index("(") + 1 : column_type.rindex(")")]
    return tuple(m.group(1).replace("''", "'") for m in _LABEL.finditer(inner))


JSON_VALID_CHECK = re.compile(r"json_valid\(`((?:[^`]|``)+)`\)", re.IGNORECASE)


# -- table maps ---------------------------------------------------------------------------------

_CHARACTER_TYPES = frozenset(
    {
        FieldType.STRING,
        FieldType.VARCHAR,
        FieldType.VAR_STRING,
        FieldType.BLOB,
        FieldType.TINY_BLOB,
        FieldType.MEDIUM_BLOB,
        FieldType.LONG_BLOB,
    }
)


class TablePlans:
    """table id -> RowDecoder for captured tables (None for filtered ones).

    The reader runs with ``freeze_schema=True``: the library then parses a table map only the
    first time it sees the table id, which is most of its per-event cost when transactions
    are single rows. A table gets a new id when its definition changes and ids are only
    meaningful within one server run, but to be safe both maps, the library's and this one,
    are cleared on every rotation (a restart starts a new binlog file) and on every statement
    that is not transaction control (DDL), so the next table map is parsed again.
    """

    def __init__(
        self,
        tables: TableFilter,
        catalog: Callable[[str, str], Catalog],
        *,
        is_mariadb: bool,
        later: Callable[[str, int], Iterable[LaterStatement]] | None = None,
    ) -> None:
        """``later(file, pos)``: the binlog's statements after a position (see
        :mod:`.ddl_history`); without it a possible type change is only warned about."""
        self._tables = tables
        self._lookup = catalog
        self._later = later
        self._unchanged: set[tuple[str, str]] = set()
        self._mariadb = is_mariadb
        self._by_id: dict[int, tuple[tuple[Any, ...], RowDecoder] | None] = {}
        self._catalogs: dict[tuple[str, str], Catalog] = {}
        self._warned: set[tuple[str, str]] = set()
        self._reader: Any = None

    def attach(self, reader: BinLogStreamReader) -> None:
        """A new reader starts with an empty table map; so does this one."""
        self._reader = reader
        self._by_id.clear()

    def get(self, table_id: int) -> RowDecoder | None:
        """The decoder of a captured table, None for a filtered one."""
        try:
            entry = self._by_id[table_id]
        except KeyError:
            raise SourceError(
                f"rows event for table id {table_id} without a table map before it"
            ) from None
        return None if entry is None else entry[1]

    def knows(self, table_id: int) -> bool:
        """Whether a table map for ``table_id`` was seen (captured or filtered)."""
        return table_id in self._by_id

    def clear(self) -> None:
        self._by_id.clear()
        if self._reader is not None:
            self._reader.table_map = {}

    def invalidate(self) -> None:
        """After DDL: table definitions (and the MariaDB type lookups) may have changed."""
        self.clear()
        self._catalogs.clear()
        self._unchanged.clear()

    def table_map(self, event: Any) -> None:
        schema: str = event.schema
        table: str = event.table
        if not self._tables.captures(schema, table):
            self._by_id[event.table_id] = None
            return
        columns = event.columns
        signature = (schema, table, tuple(c.type for c in columns), tuple(c.name for c in columns))
        cached = self._by_id.get(event.table_id)
        if cached is not None and cached[0] == signature:
            return
        self._by_id[event.table_id] = (signature, self._build(event, schema, table))

    def _check_catalog(
        self,
        catalog: Catalog,
        names: tuple[str, ...],
        needed: tuple[str, ...],
        key: tuple[str, str],
    ) -> None:
        """Refuse a catalog of another definition (see :func:`catalog_mismatch`)."""
        schema, table = key
        why = catalog_mismatch(catalog, names, needed)
        if why is not None:
            raise SourceError(
                f"{schema}.{table}: the binlog cannot say how to decode some of its columns "
                "(MariaDB UUID/INET4/INET6/JSON, ENUM/SET labels outside UTF-8) and "
                f"information_schema describes another definition than this event's: {why} "
                "(an ALTER after it, read during a catch-up). The reader stops rather than "
                "decode old rows with a new type: exclude the table (exclude_tables) until "
                "the reader is past the change, then snapshot it (cdc-platform snapshot "
                "--table), or restore the old definition while the reader catches up"
            )

    def _warn_changed(
        self, catalog: Catalog, names: tuple[str, ...], event_time: int, key: tuple[str, str]
    ) -> None:
        """Say once per table that today's facts describe a newer definition than the event's
        (the checks above found nothing that stops the reader)."""
        suspect = changed_after(catalog, event_time) or definition_differs(catalog, names)
        if suspect and key not in self._warned:
            self._warned.add(key)
            changed = _utc(catalog.defined_at) if catalog.defined_at is not None else "?"
            log.warning(
                "%s.%s: its definition changed (at %s) after this rows event (%s): the "
                "UUID/INET4/INET6/JSON columns and ENUM/SET labels are taken from today's "
                "definition by name where the event's own column types can carry them and "
                "no later DDL in the binlog names those columns; check the table's mirror "
                "after the catch-up (cdc-platform reconcile) if in doubt",
                key[0],
                key[1],
                changed,
                _utc(event_time),
            )

    def _check_later_ddl(self, event: Any, needed: tuple[str, ...], key: tuple[str, str]) -> None:
        """Refuse when a statement after this table map may have changed a column whose
        facts come from today's catalog: the binlog cannot say what its type was then
        (BINARY(16) or UUID or INET6, BINARY(4) or INET4, which ENUM labels)."""
        file = getattr(self._reader, "log_file", None)
        pos = getattr(getattr(event, "packet", None), "log_pos", None)
        if self._later is None or key in self._unchanged or not file or not pos:
            return
        schema, table = key
        for statement in self._later(str(file), int(pos)):
            touched = touched_columns(statement.text, schema, table, needed)
            if touched:
                raise SourceError(
                    f"{schema}.{table}: column(s) {', '.join(touched)} may have changed type "
                    f"after this rows event ({file}:{pos}), by the statement at "
                    f"{statement.file}:{statement.pos}: {statement.text[:200]!r}. The binlog "
                    "cannot say what such a column was then (BINARY(16), UUID or INET6; "
                    "BINARY(4) or INET4; ENUM/SET labels outside UTF-8) and information_schema "
                    "only knows today's type, so the reader stops rather than decode old rows "
                    "with it. Exclude the table (exclude_tables) until the reader is past that "
                    "statement, then snapshot it (cdc-platform snapshot --table); or start the "
                    "destination after that statement"
                )
        self._unchanged.add(key)

    def _build(self, event: Any, schema: str, table: str) -> RowDecoder:
        catalog = Catalog()
        charsets = column_charsets(event, self._mariadb, schema, table)
        needed = tuple(
            str(c.name)
            for i, c in enumerate(event.columns)
            if (self._mariadb and _may_be_logical(c)) or _labels_lost(c, charsets[i])
        )
        if needed:
            key = (schema, table)
            if key not in self._catalogs:
                self._catalogs[key] = self._lookup(schema, table)
            catalog = self._catalogs[key]
            names = tuple(str(c.name) for c in event.columns)
            event_time = int(getattr(event, "timestamp", 0))
            self._check_catalog(catalog, names, needed, key)
            # BINARY(n) or UUID/INET, which labels: what the table map cannot tell. (LONGTEXT
            # or JSON is the same text either way; only the type's name may be today's.)
            unsure = tuple(
                str(c.name)
                for i, c in enumerate(event.columns)
                if (self._mariadb and c.type == FieldType.STRING and _may_be_logical(c))
                or _labels_lost(c, charsets[i])
            )
            if unsure and may_predate_change(catalog, names, event_time):
                self._check_later_ddl(event, unsure, key)
            self._warn_changed(catalog, names, event_time, key)
        specs = [
            _column_spec(c, catalog, schema, table, charsets[i])
            for i, c in enumerate(event.columns)
        ]
        metadata = getattr(event, "optional_metadata", None)
        primary_key: list[int] = list(getattr(metadata, "simple_primary_key_list", None) or [])
        if not primary_key:
            primary_key = list((getattr(metadata, "primary_keys_with_prefix", None) or {}).keys())
        return RowDecoder(schema, table, specs, primary_key)


_BLOB_TYPES = frozenset(
    {FieldType.BLOB, FieldType.TINY_BLOB, FieldType.MEDIUM_BLOB, FieldType.LONG_BLOB}
)

_COLLATED_TEXT = frozenset(
    {FieldType.STRING, FieldType.VAR_STRING, FieldType.VARCHAR, FieldType.BLOB}
)
"""Column types the table map lists in its charset metadata (plus GEOMETRY on MariaDB)."""


def column_charsets(event: Any, mariadb: bool, schema: str, table: str) -> list[str | None]:
    """Each column's charset name, from the collation ids of the table map's metadata.

    The library resolves the ids itself but falls back to utf8 for ids it does not know
    (MariaDB's uca1400 collations), so the ids are resolved here, and an unknown id refused.
    """
    metadata = getattr(event, "optional_metadata", None)
    text_ids = iter(list(getattr(metadata, "charset_collation_list", None) or []))
    label_ids = iter(list(getattr(metadata, "enum_and_set_collation_list", None) or []))
    out: list[str | None] = []
    for column in event.columns:
        collation: int | None = None
        if column.type in _COLLATED_TEXT or (mariadb and column.type == FieldType.GEOMETRY):
            collation = next(text_ids, None)
        elif column.type in (FieldType.ENUM, FieldType.SET):
            collation = next(label_ids, None)
        if collation is None:
            out.append(None)
            continue
        charset = charset_of_collation(int(collation), mariadb=mariadb)
        if charset is None:
            raise SourceError(
                f"{schema}.{table}.{column.name} has collation id {collation}, which the "
                "source does not know; it will not guess the charset"
            )
        out.append(charset)
    return out


def _may_be_logical(column: Any) -> bool:
    if column.type == FieldType.STRING:
        return column.character_set_name == "binary" and column.max_length in (4, 16)
    return column.type == FieldType.BLOB and getattr(column, "length_size", 0) == 4


def labels_in_charset(charset: str | None, labels: list[str]) -> tuple[str, ...]:
    """ENUM/SET labels in the column's charset. The library decodes the table map's label
    bytes as UTF-8 whatever the charset ('' when that fails, see _labels_lost): re-encoding
    gives back the bytes, which are then decoded with the right charset. A label with a byte
    the charset does not define is left '' so it comes from information_schema, where the
    server writes '?' for that byte, as the snapshot reads it (docs/types.md)."""
    decode = text_decoder(charset) if charset and charset not in _UTF8 else None
    if decode is None:
        return tuple(labels)
    out: list[str] = []
    for label in labels:
        text = decode(label.encode("utf-8"))
        out.append("" if any(0xEF00 <= ord(ch) <= 0xEFFF for ch in text) else text)
    return tuple(out)


_UTF8 = frozenset({"utf8", "utf8mb3", "utf8mb4"})


def _labels_lost(column: Any, charset: str | None) -> bool:
    """ENUM/SET labels that were not UTF-8 in the table map come out of the library as ''."""
    labels = labels_in_charset(
        charset, (column.enum_values or [""])[1:] + list(column.set_values or [])
    )
    return column.type in (FieldType.ENUM, FieldType.SET) and "" in labels


def _column_spec(
    column: Any, catalog: Catalog, schema: str, table: str, charset: str | None
) -> ColumnSpec:
    if not column.name:
        raise SourceSettingsError(
            f"the table map of {schema}.{table} has no column names; set "
            "binlog_row_metadata=FULL in the server config"
        )
    encoding: str | None = None
    if column.type in _CHARACTER_TYPES:
        name = charset or "utf8mb4"
        if name != "binary" and text_decoder(name) is None:
            raise SourceError(
                f"{schema}.{table}.{column.name} uses charset {name}, which cannot be "
                "decoded; convert the column to utf8mb4 or exclude the table"
            )
        encoding = None if name == "binary" else name
    enum_values = labels_in_charset(charset, column.enum_values[1:] if column.enum_values else [])
    set_values = labels_in_charset(charset, column.set_values or [])
    labels = catalog.labels.get(column.name)
    if labels is not None and _labels_lost(column, charset):
        count = len(enum_values or set_values)
        if len(labels) == count:  # the same definition as the binlog's; else keep the binlog's
            enum_values, set_values = (labels, ()) if enum_values else ((), labels)
    return ColumnSpec(
        name=column.name,
        type=column.type,
        unsigned=bool(column.unsigned),
        encoding=encoding,
        max_length=getattr(column, "max_length", 0),
        length_size=getattr(column, "length_size", 0),
        fsp=getattr(column, "fsp", 0),
        precision=getattr(column, "precision", 0),
        scale=getattr(column, "decimals", 0),
        bits=getattr(column, "bits", 0),
        size=getattr(column, "size", 0),
        enum_values=enum_values,
        set_values=set_values,
        logical=_logical_fitting(column, encoding, catalog.logical.get(column.name)),
    )


def _logical_fitting(column: Any, encoding: str | None, logical: str | None) -> str | None:
    """The catalog's logical type of a column if the table map's own type can carry it, else
    None: the event's metadata wins (CHAR(36) then, UUID today: the old rows are CHAR)."""
    if logical in ("uuid", "inet6", "inet4"):
        size = 4 if logical == "inet4" else 16
        fits = column.type == FieldType.STRING and encoding is None
        return logical if fits and getattr(column, "max_length", 0) == size else None
    if logical == "json":
        fits = column.type in _BLOB_TYPES and getattr(column, "length_size", 0) == 4
        return logical if fits and encoding is not None else None
    return logical
