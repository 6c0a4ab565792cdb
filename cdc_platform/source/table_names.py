"""``db.table`` names whose database holds a dot, split as the server knows them: the one
resolution every writer and face uses.

Configuration, CLI arguments, snapshot requests, the snapshot's progress file and the Airflow
operators name a table as ``db.table``. Database names may hold dots too (```a.b```.```c```
and ```a```.```b.c``` are different tables), so such a name is split at the dot where a table
of that database and name exists; splitting at the first dot is only the answer when no other
split exists (:func:`choose_split`). Which tables exist is asked of the server
(:func:`split_table_name`) or, where the source may be down, of what the caller already knows
(the destination's catalog).

Filters (``include_tables``/``exclude_tables``) are checked on the resolved ``(db, table)``
by the writer that copies rows (:func:`captured_split`); a check without the server (the
request inbox) can only refuse a name of which no split is captured
(:func:`any_split_captured`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

import pymysql

from cdc_platform.errors import SnapshotError

__all__ = [
    "any_split_captured",
    "captured_split",
    "choose_split",
    "split_table_name",
    "table_name_splits",
]


def table_name_splits(name: str) -> list[tuple[str, str]]:
    """Every ``(db, table)`` that ``name`` can mean (a dot with text on both sides), the
    split at the first dot first; empty when ``name`` is not ``db.table`` at all."""
    splits = [(name[:i], name[i + 1 :]) for i, ch in enumerate(name) if ch == "."]
    return [(db, table) for db, table in splits if db and table]


def choose_split(name: str, existing: Collection[tuple[str, str]]) -> tuple[str, str]:
    """``(db, table)`` of ``name``: the split at the first dot, unless ``existing`` lacks it
    and holds exactly one other split (a database with a dot).

    Raises:
        SnapshotError: ``name`` is not ``db.table`` (not transient: name the table as
            ``db.table``).
    """
    splits = table_name_splits(name)
    if not splits:
        raise SnapshotError(f"{name!r} is not `db.table` (its database, a dot, its name)")
    found = [split for split in splits if split in existing]
    if splits[0] in found or len(found) != 1:
        return splits[0]
    return found[0]


def split_table_name(conn: pymysql.connections.Connection[Any], name: str) -> tuple[str, str]:
    """:func:`choose_split` over the tables the server has.

    Raises:
        SnapshotError: ``name`` is not ``db.table``.
    """
    splits = table_name_splits(name)
    if len(splits) <= 1:
        return choose_split(name, ())
    marks = ", ".join(["%s"] * len(splits))
    with conn.cursor() as cur:
        sql = f"SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA IN ({marks})"  # noqa: S608, E501 (placeholders only)
        cur.execute(sql, [db for db, _ in splits])
        # compared here, exactly: the server's comparison ignores case
        existing = {(str(db), str(table)) for db, table in cur.fetchall()}
    return choose_split(name, existing)


def captured_split(
    conn: pymysql.connections.Connection[Any], name: str, captured: Callable[[str, str], bool]
) -> tuple[str, str]:
    """:func:`split_table_name`, refused unless ``captured`` (the destination's
    ``TableFilter.matches``) takes the table: no writer copies rows its filters exclude.

    Raises:
        SnapshotError: not ``db.table``, or not captured (not transient: add the table to the
            destination's ``include_tables``, or take it out of ``exclude_tables``, first).
    """
    db, table = split_table_name(conn, name)
    if not captured(db, table):
        raise SnapshotError(
            f"{name} (database {db!r}, table {table!r}) is not captured by the destination's "
            "filters: add it to include_tables (or take it out of exclude_tables) first"
        )
    return db, table


def any_split_captured(name: str, captured: Callable[[str, str], bool]) -> bool:
    """Whether some meaning of ``name`` is captured: the check a reader without the server
    can make (the writer checks the split the server names, :func:`captured_split`)."""
    return any(captured(db, table) for db, table in table_name_splits(name))
