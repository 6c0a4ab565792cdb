"""Reading a table's existing rows in primary-key chunks, as the same JSON the binlog gives.

The paging of the side reads: the next chunk after a key, the rows of given keys, any SELECT
of a table's rows (:func:`select_rows`), each one autocommit SELECT, read straight from the
packets (:mod:`.result_rows`) and written as key and image JSON (:mod:`.row_images`) with
each column's conversion (:mod:`.column_reads`); the table is described by
:mod:`.table_description`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pymysql

from cdc_platform.errors import SnapshotError
from cdc_platform.source.mysql import source_errors
from cdc_platform.source.reading.column_reads import image_converters
from cdc_platform.source.reading.result_rows import fetch_rows
from cdc_platform.source.reading.row_images import RowsJson, rows_json
from cdc_platform.source.reading.table_description import SnapshotTable
from cdc_platform.source.sql import format_safe, qualified_name
from cdc_platform.source.values import dumps
from cdc_platform.source.values.image_json import FAST_JSON, image_encoder

__all__ = [
    "ChunkRows",
    "estimated_rows",
    "read_chunk",
    "read_keys",
    "select_rows",
]


_write_image = image_encoder(FAST_JSON)
"""A row image's JSON text: orjson when installed, the same text as :data:`dumps`."""


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
        [(i, convert) for i, _, convert in image_converters(spec.columns)],
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
