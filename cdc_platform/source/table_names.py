"""``db.table`` names whose database holds a dot, split as the server knows them.

Configuration, CLI arguments and the snapshot's progress file name a table as ``db.table``.
Database names may hold dots too (```a.b```.```c``` and ```a```.```b.c``` are different
tables), so such a name is split at the dot where the server has a table of that database and
name; splitting at the first dot is only the answer when no other split exists.
"""

from __future__ import annotations

from typing import Any

import pymysql

__all__ = ["split_table_name"]


def split_table_name(conn: pymysql.connections.Connection[Any], name: str) -> tuple[str, str]:
    """``(db, table)`` of ``name``: the split at the first dot, unless the server has no such
    table and exactly one other split names a table it has (a database with a dot)."""
    splits = [(name[:i], name[i + 1 :]) for i, ch in enumerate(name) if ch == "."]
    splits = [(db, table) for db, table in splits if db and table]
    if len(splits) <= 1:
        return splits[0] if splits else (name, "")
    marks = ", ".join(["%s"] * len(splits))
    with conn.cursor() as cur:
        sql = f"SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA IN ({marks})"  # noqa: S608, E501 (placeholders only)
        cur.execute(sql, [db for db, _ in splits])
        # compared here, exactly: the server's comparison ignores case
        existing = {(str(db), str(table)) for db, table in cur.fetchall()}
    found = [split for split in splits if split in existing]
    if splits[0] in found or len(found) != 1:
        return splits[0]
    return found[0]
