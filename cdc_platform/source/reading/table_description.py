"""A table described for reading: its columns, primary key and `columns` JSON, from
information_schema.

Only tables with a primary key can be chunked; others are refused with a SnapshotError
(docs/snapshot.md), because without a key neither the chunk boundaries nor the merge with
the binlog window are defined (a reader that does not chunk may describe them anyway).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pymysql

from cdc_platform.errors import SnapshotError
from cdc_platform.source.mysql import source_errors
from cdc_platform.source.reading.column_reads import ColumnRead, column_read
from cdc_platform.source.sql import format_safe, quote_identifier
from cdc_platform.source.values import dumps

__all__ = ["SnapshotTable", "describe_table"]


@dataclass(frozen=True, slots=True)
class SnapshotTable:
    """A table prepared for chunked reading: its columns, key and `columns` JSON."""

    db: str
    table: str
    columns: tuple[ColumnRead, ...]
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
    def _key(self) -> list[ColumnRead]:
        by_name = {c.name: c for c in self.columns}
        return [by_name[k] for k in self.primary_key]


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
            column_read(r, str(r["COLUMN_NAME"]) in json_columns, str(r["COLUMN_NAME"]) in key)
            for r in rows
        )
    except SnapshotError as exc:
        raise SnapshotError(f"{db}.{table}: {exc}") from None
    return SnapshotTable(db, table, columns, key, dumps([c.described for c in columns]))
