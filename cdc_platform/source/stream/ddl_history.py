"""DDL written after a rows event: which statements may have changed a column's type since.

The binlog's table map cannot tell a MariaDB UUID or INET6 column from BINARY(16), INET4
from BINARY(4), nor give ENUM/SET labels outside UTF-8; information_schema can, but only for
today's definition. During a catch-up across an ALTER, the reader asks the binlog itself
which statements after the event name the table, and whether one of them may have changed
a column whose facts come from the catalog (:mod:`.table_maps` then refuses).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pymysql.cursors import SSCursor

__all__ = ["LaterStatement", "statements_after", "touched_columns"]


@dataclass(frozen=True)
class LaterStatement:
    """One statement of the binlog after an event: where, and its text."""

    file: str
    pos: int
    text: str


_USE = re.compile(r"^\s*use\s+`((?:[^`]|``)+)`\s*;\s*", re.IGNORECASE)


_COMMENT = re.compile(r"/\*.*?\*/", re.DOTALL)
_TABLE_RENAME = re.compile(r"\brename\s+(?!(?:column|index|key)\b)")
"""``ALTER TABLE ... RENAME [TO|AS] name``: the table renamed (not a column or an index)."""
_DDL = ("alter", "create", "drop", "rename")
"""Statements that may change or replace a table's definition (TRUNCATE keeps it)."""


def _names(text: str, name: str) -> bool:
    """Whether ``text`` names the identifier ``name`` (bare or in backquotes), by token."""
    quoted = "`" + name.replace("`", "``") + "`"
    if quoted.lower() in text.lower():
        return True
    bare = re.compile(rf"(?<![\w$`]){re.escape(name)}(?![\w$`])", re.IGNORECASE)
    return bare.search(text) is not None


def touched_columns(statement: str, table: str, columns: tuple[str, ...]) -> tuple[str, ...]:
    """Which of ``columns`` a statement naming ``table`` may have changed (all of them for a
    statement that is not a plain ALTER TABLE, or that renames: a table created, replaced or
    renamed into place may have had any definition before). Conservative: a column merely
    named (in an index, say) counts as touched; the reader then refuses rather than guess.
    Other statements (DML written as statements, transaction control) change no type."""
    text = _USE.sub("", statement, count=1)
    head = _COMMENT.sub(" ", text).lstrip().lower()
    if not head.startswith(_DDL) or not _names(text, table):
        return ()
    plain_alter = head.startswith(("alter table", "alter online table", "alter ignore table"))
    if not plain_alter or _TABLE_RENAME.search(head):
        return columns
    return tuple(column for column in columns if _names(text, column))


def statements_after(conn: Any, file: str, pos: int) -> Iterator[LaterStatement]:
    """The Query events of the binlog from ``file``:``pos`` to its end (``SHOW BINLOG EVENTS``,
    streamed: a long catch-up may have many events), DDL and other statements alike.

    Only asked when a table's definition may have changed since an event whose decoding
    needs the catalog (so rarely, and once per table until the next DDL)."""
    with conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        files = [str(row[0]) for row in cur.fetchall()]
    if file not in files:
        return
    for name in files[files.index(file) :]:
        start = pos if name == file else 4
        with conn.cursor(SSCursor) as cur:
            cur.execute(f"SHOW BINLOG EVENTS IN %s FROM {int(start)}", (name,))
            for row in cur:
                if str(row[2]) == "Query":
                    yield LaterStatement(str(row[0]), int(row[1]), str(row[5]))
