"""How many of the next rows fit a byte budget: chunks bounded by bytes, not only rows.

A chunk's rows are held in memory until its commit (snapshot), or its file (reconciliation's
staging). A row count alone does not bound that: 2,000 rows of a table of multi-MB BLOB or
JSON values are gigabytes, and a process killed by the OOM killer on its first chunk would
read the same chunk again at every restart. So before a chunk of a table whose rows can be
large is read, the server sums the value lengths of the next rows (``LENGTH`` of each column;
only keys and sums cross the network) and the chunk is cut where the sum passes the budget,
never below one row. A table whose columns are all short (no TEXT, BLOB, JSON or geometry,
and declared lengths that fit the budget) is never probed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pymysql

from cdc_platform.config.instance import DEFAULT_CHUNK_BYTES
from cdc_platform.source.reading.table_description import SnapshotTable
from cdc_platform.source.sql import format_safe, qualified_name, quote_identifier

__all__ = ["DEFAULT_CHUNK_BYTES", "keys_within", "row_bytes_bound", "rows_within"]
_UNBOUNDED_TYPES = frozenset({"text", "blob", "json", "geometry"})
_SHORT_VALUE_BYTES = 32
"""Bytes counted for a value without a declared length (numbers, dates, ...)."""
_ROW_OVERHEAD_BYTES = 64
"""Counted per row besides its values (the key JSON, the image's framing)."""


def row_bytes_bound(spec: SnapshotTable) -> int | None:
    """The most bytes a row of ``spec`` can hold, or None when a column is unbounded in
    practice (TEXT, BLOB, JSON, geometry)."""
    total = _ROW_OVERHEAD_BYTES
    for column in spec.columns:
        described = column.described
        if described.get("type") in _UNBOUNDED_TYPES:
            return None
        total += int(described.get("length") or 0) or _SHORT_VALUE_BYTES
    return total


def rows_within(
    conn: pymysql.connections.Connection[Any],
    spec: SnapshotTable,
    after: Sequence[Any] | None,
    limit: int,
    max_bytes: int,
) -> int:
    """How many of the next ``limit`` rows after key ``after`` (None: from the start) fit
    ``max_bytes``: ``limit`` when they all do (or the table ends first), else at least 1."""
    bound = row_bytes_bound(spec)
    if bound is not None and bound * limit <= max_bytes:
        return limit
    key_sql = _key_sql(spec)
    tail = ""
    args: tuple[Any, ...] = ()
    if after is not None:
        tail = f"WHERE ({key_sql}) > {spec.key_marks()} "
        args = spec.key_args(after)
    table = format_safe(qualified_name(spec.db, spec.table))
    sql = f"SELECT {_lengths(spec)} FROM {table} {tail}ORDER BY {key_sql} LIMIT {int(limit)}"  # noqa: S608 (identifiers quoted by the source's quoting, values bound as parameters)
    with conn.cursor() as cur:
        cur.execute(sql, args)
        sizes = [int(size or 0) + _ROW_OVERHEAD_BYTES for (size,) in cur.fetchall()]
    total = 0
    for fitted, size in enumerate(sizes):
        total += size
        if total > max_bytes:
            return max(1, fitted)
    return limit


def keys_within(
    conn: pymysql.connections.Connection[Any],
    spec: SnapshotTable,
    keys: Sequence[Sequence[Any]],
    max_bytes: int,
) -> int:
    """How many of ``keys`` (raw key values, from the first) the rows of which fit
    ``max_bytes`` together: all of them, or half as many again until they fit (at least 1)."""
    count = len(keys)
    bound = row_bytes_bound(spec)
    if bound is not None and bound * count <= max_bytes:
        return count
    table = format_safe(qualified_name(spec.db, spec.table))
    marks = spec.key_marks()
    while count > 1:
        sql = (
            f"SELECT SUM({_lengths(spec)} + {_ROW_OVERHEAD_BYTES}) FROM {table} "  # noqa: S608 (identifiers quoted by the source's quoting, values bound as parameters)
            f"WHERE ({_key_sql(spec)}) IN ({', '.join([marks] * count)})"
        )
        with conn.cursor() as cur:
            cur.execute(sql, tuple(v for key in keys[:count] for v in spec.key_args(key)))
            row = cur.fetchone()
        if int((row[0] if row else 0) or 0) <= max_bytes:
            return count
        count = max(1, count // 2)
    return count


def _key_sql(spec: SnapshotTable) -> str:
    return format_safe(", ".join(quote_identifier(k) for k in spec.primary_key))


def _lengths(spec: SnapshotTable) -> str:
    """The SQL sum of a row's value lengths."""
    return " + ".join(
        f"COALESCE(LENGTH({format_safe(quote_identifier(c.name))}), 0)" for c in spec.columns
    )
