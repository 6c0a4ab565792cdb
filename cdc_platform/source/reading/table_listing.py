"""Which source tables a destination's filters capture, and why each other table is skipped.

`cdc-platform tables` prints this before a first run, so a filter mistake (a regex that
matches nothing, an exclude that swallows a schema, a view listed as a table) shows while it
is still cheap to fix. It reads ``information_schema`` once, with the destination's own login.
:func:`base_tables` is the captured base tables alone, the list the snapshot and the
reconciliation read.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pymysql

from cdc_platform.config.source import SourceConfig
from cdc_platform.source.filters import SYSTEM_SCHEMAS, TableFilter
from cdc_platform.source.mysql import SourceServer, source_errors
from cdc_platform.source.mysql_errors import MYSQL_ERRORS

__all__ = ["ListedTable", "TableListing", "base_tables", "list_tables"]

_READ_TIMEOUT_SECONDS = 60.0


@dataclass(frozen=True)
class ListedTable:
    """One source table (or view) and the filters' decision about it."""

    db: str
    table: str
    kind: str
    """``BASE TABLE``, ``VIEW``, ``SEQUENCE``, ... as information_schema says."""
    captured: bool
    reason: str
    """Why: the pattern that includes it, or why it is skipped."""
    has_primary_key: bool
    rows_estimate: int | None
    """information_schema's estimate (InnoDB's may be off by tens of percent)."""

    @property
    def name(self) -> str:
        return f"{self.db}.{self.table}"

    def to_dict(self) -> dict[str, object]:
        return {
            "table": self.name,
            "kind": self.kind,
            "captured": self.captured,
            "reason": self.reason,
            "primary_key": self.has_primary_key,
            "rows_estimate": self.rows_estimate,
        }


@dataclass(frozen=True)
class TableListing:
    """Every table outside the system schemas, captured ones first."""

    tables: tuple[ListedTable, ...]
    system_tables: int
    """Tables in the system schemas (never captured), counted, not listed."""

    @property
    def captured(self) -> list[ListedTable]:
        return [t for t in self.tables if t.captured]

    @property
    def skipped(self) -> list[ListedTable]:
        return [t for t in self.tables if not t.captured]


def _decide(
    name: str, kind: str, include: list[re.Pattern[str]], exclude: list[re.Pattern[str]]
) -> tuple[bool, str]:
    """The same decision as the binlog source's TableFilter, with its reason."""
    matched = next((p for p in include if p.fullmatch(name)), None)
    if include and matched is None:
        return False, "matches no include_tables pattern"
    excluded = next((p for p in exclude if p.fullmatch(name)), None)
    if excluded is not None:
        return False, f"excluded by exclude_tables {excluded.pattern!r}"
    if kind != "BASE TABLE":
        return False, f"a {kind.lower()}: it has no rows of its own in the binlog"
    return True, f"included by {matched.pattern!r}" if matched is not None else "included"


def list_tables(source: SourceConfig) -> TableListing:
    """Every non-system table of the source with the destination's decision about it.

    Raises:
        SourceError: the server cannot be reached, refused the login or the query.
    """
    server = SourceServer(source, purpose="table listing")
    conn = server.connect(read_timeout=_READ_TIMEOUT_SECONDS)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT t.TABLE_SCHEMA, t.TABLE_NAME, t.TABLE_TYPE, t.TABLE_ROWS, "
                "EXISTS (SELECT 1 FROM information_schema.TABLE_CONSTRAINTS c "
                "WHERE c.TABLE_SCHEMA = t.TABLE_SCHEMA AND c.TABLE_NAME = t.TABLE_NAME "
                "AND c.CONSTRAINT_TYPE = 'PRIMARY KEY') "
                "FROM information_schema.TABLES t ORDER BY t.TABLE_SCHEMA, t.TABLE_NAME"
            )
            rows = list(cur.fetchall())
    except MYSQL_ERRORS as exc:
        raise server.error(exc, "listing the tables of") from None
    finally:
        conn.close()
    include = [re.compile(p) for p in source.include_tables]
    exclude = [re.compile(p) for p in source.exclude_tables]
    listed: list[ListedTable] = []
    system = 0
    for db, table, kind, rows_estimate, has_key in rows:
        if str(db).lower() in SYSTEM_SCHEMAS:
            system += 1
            continue
        name = f"{db}.{table}"
        captured, reason = _decide(name, str(kind), include, exclude)
        estimate = int(rows_estimate) if rows_estimate is not None else None
        listed.append(
            ListedTable(str(db), str(table), str(kind), captured, reason, bool(has_key), estimate)
        )
    listed.sort(key=lambda t: (not t.captured, t.db, t.table))
    return TableListing(tuple(listed), system)


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
