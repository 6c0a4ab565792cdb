"""The tables an id watch reads: each one checked against its settings, and the small
queries the watch and its cleanup run on them (the database's clock, a unique index).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cdc_platform.config.id_watch import IdWatchTableConfig
from cdc_platform.errors import ConfigError, SnapshotError, SourceError
from cdc_platform.source.mysql import Connection
from cdc_platform.source.reading.table_description import SnapshotTable, describe_table
from cdc_platform.source.values import dumps

__all__ = ["TIME_TYPES", "WatchedTable", "db_now", "describe_watched", "key_json", "unique_index"]

TIME_TYPES = frozenset({"datetime", "timestamp"})
"""Column types the stability cut and the expiry compare with the database's clock."""
_INTEGER_TYPES = frozenset({"tinyint", "smallint", "mediumint", "int", "bigint"})


@dataclass(frozen=True, slots=True)
class WatchedTable:
    """A watched table: its settings and how to read it."""

    settings: IdWatchTableConfig
    spec: SnapshotTable
    created_type: str
    """``datetime`` or ``timestamp``: which clock reading the stability cut compares with."""
    modified_type: str | None = None
    """The same for ``expire.modified_column``."""

    @property
    def name(self) -> str:
        return self.settings.table

    def id_of(self, pk: str, image: str) -> int:
        """The id of a row read as (pk JSON, image JSON), e.g. by the list."""
        column = self.settings.id_column
        source = pk if column in self.spec.primary_key else image
        return int(json.loads(source)[column])


def describe_watched(conn: Connection, watched: Sequence[IdWatchTableConfig]) -> list[WatchedTable]:
    """Each watched table, checked: it exists with a primary key, an integer id column with a
    unique index of its own, a DATETIME/TIMESTAMP created column, and the expire columns.

    Raises:
        SourceError: the table does not exist or has no primary key.
        ConfigError: a configured column is missing or of the wrong type (names the fix).
    """
    tables: list[WatchedTable] = []
    for settings in watched:
        try:
            spec = describe_table(conn, settings.db, settings.name)
        except SnapshotError as exc:
            raise SourceError(f"id_watch: {exc}") from None
        types = {c.name: str(c.described["type"]) for c in spec.columns}
        problems: list[str] = []
        id_type = types.get(settings.id_column)
        if id_type is None:
            problems.append(f"id_column {settings.id_column!r} does not exist")
        elif id_type not in _INTEGER_TYPES:
            problems.append(f"id_column {settings.id_column!r} is {id_type}, not an integer")
        elif not unique_index(conn, settings.db, settings.name, settings.id_column):
            problems.append(
                f"id_column {settings.id_column!r} has no unique index of its own (the "
                "watch pages by `id > last`, which skips rows sharing an id)"
            )
        created_type = types.get(settings.created_column)
        if created_type is None:
            problems.append(f"created_column {settings.created_column!r} does not exist")
        elif created_type not in TIME_TYPES:
            problems.append(
                f"created_column {settings.created_column!r} is {created_type}, "
                "not DATETIME or TIMESTAMP"
            )
        expire = settings.expire
        if expire is not None:
            for key, column in (
                ("deleted_column", expire.deleted_column),
                ("modified_column", expire.modified_column),
            ):
                if column not in types:
                    problems.append(f"expire.{key} {column!r} does not exist")
            if types.get(expire.modified_column, "datetime") not in TIME_TYPES:
                problems.append(
                    f"expire.modified_column {expire.modified_column!r} is not DATETIME "
                    "or TIMESTAMP"
                )
        if problems:
            raise ConfigError(
                f"id_watch table {settings.table}: " + "; ".join(problems) + " (fix "
                "source.id_watch.tables or the table)"
            )
        assert created_type is not None
        modified_type = types.get(expire.modified_column) if expire is not None else None
        tables.append(WatchedTable(settings, spec, created_type, modified_type))
    return tables


def key_json(spec: SnapshotTable, raw: Sequence[Any]) -> str:
    """The pk JSON of a raw key, through the same encoders (reads no row)."""
    converters = {c.name: c.convert for c in spec.columns}
    return dumps(
        {
            name: None if value is None else converters[name](value)
            for name, value in zip(spec.primary_key, raw, strict=True)
        }
    )


def db_now(conn: Connection) -> tuple[datetime, datetime]:
    """The database's clock now, in its default time zone (what DATETIME columns set with
    NOW() hold) and in UTC (what TIMESTAMP columns compare with in this UTC session)."""
    with conn.cursor() as cur:
        cur.execute("SET time_zone = @@global.time_zone")
        try:
            cur.execute("SELECT NOW(6)")
            row = cur.fetchone()
        finally:
            cur.execute("SET time_zone = '+00:00'")
        cur.execute("SELECT NOW(6)")
        utc = cur.fetchone()
    assert row is not None
    assert utc is not None
    return row[0], utc[0]


def unique_index(conn: Connection, db: str, table: str, column: str) -> bool:
    with conn.cursor() as cur:
        cur.execute(
            "SELECT INDEX_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s "
            "AND TABLE_NAME = %s AND NON_UNIQUE = 0 GROUP BY INDEX_NAME "
            "HAVING COUNT(*) = 1 AND MAX(COLUMN_NAME) = %s",
            (db, table, column),
        )
        return cur.fetchone() is not None
