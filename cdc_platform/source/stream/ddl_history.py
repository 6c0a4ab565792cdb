"""DDL written after a rows event: which statements may have changed a column's type since.

The binlog's table map cannot tell a MariaDB UUID or INET6 column from BINARY(16), INET4
from BINARY(4), nor give ENUM/SET labels outside UTF-8; information_schema can, but only for
today's definition. During a catch-up across an ALTER, the reader asks the binlog itself
(:mod:`.ddl_index`) which statements after the event name the table, and whether one of them
may have changed a column whose facts come from the catalog (:mod:`.table_maps` then refuses).

A statement names the tables the stream's own statement parser finds in it
(:func:`~cdc_platform.source.filters.classify_statement`), each with its database: the
event's schema (``use `db`;`` in ``SHOW BINLOG EVENTS``) or the qualified name. Executable
comments (``/*!100100 ...*/``) are code, as the server runs them; other comments and the text
of strings name nothing. A table merely mentioned (``REFERENCES t``, an account ``'t'@'%'``,
the same name in another database) is not touched.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache

from cdc_platform.source.filters import StatementKind, classify_statement
from cdc_platform.source.sql import strip_comments

__all__ = ["LaterStatement", "names_tables", "touched_columns"]


@dataclass(frozen=True)
class LaterStatement:
    """One statement of the binlog after an event: where, and its text."""

    file: str
    pos: int
    text: str


class _Reach(Enum):
    """How much of a named table's definition a statement may have changed."""

    NAMED = "named"
    """A plain ALTER TABLE / CREATE INDEX: the columns it names (conservatively: any mention)."""
    ALL = "all"
    """Created, replaced, dropped, renamed or swapped into place: any column may differ."""


@dataclass(frozen=True)
class _Targets:
    code: str
    """The statement as the server runs it: no comments, strings emptied."""
    tables: tuple[tuple[str, str, _Reach], ...] = ()
    """(db, table) lowercased, db ``""`` when the statement has no session database."""
    dropped_databases: tuple[str, ...] = ()


_USE = re.compile(r"^\s*use\s+`((?:[^`]|``)+)`\s*;\s*", re.IGNORECASE)
"""``SHOW BINLOG EVENTS`` writes a query event's schema as ``use `db`; `` before its text."""
_QUOTED = re.compile(r"`(?:[^`]|``)*`|'(?:[^'\\]|\\.|'')*'")
_FLAGS = re.IGNORECASE | re.DOTALL
_OBJECT = re.compile(r"\b(TABLES?|INDEX|VIEWS?|TRIGGER|SEQUENCES?|TEMPORARY)\b", _FLAGS)
"""The object a CREATE/ALTER/DROP/RENAME is about: the first of these words outside names."""
_NO_TYPE_CHANGE = frozenset({"VIEW", "VIEWS", "TRIGGER", "TEMPORARY"})
"""A view or trigger of that name is not the table; a temporary table only hides it for its
session."""


def _session(statement: str) -> tuple[str, str]:
    """(the event's schema, the statement's text) of a ``SHOW BINLOG EVENTS`` Info."""
    match = _USE.match(statement)
    if match is None:
        return "", statement
    return match.group(1).replace("``", "`"), statement[match.end() :]


def _empty_strings(code: str) -> str:
    return _QUOTED.sub(lambda m: m.group(0) if m.group(0)[0] == "`" else "''", code)


@lru_cache(maxsize=4096)
def _targets(statement: str) -> _Targets:
    """The tables a statement may have changed the definition of, and how far."""
    db, text = _session(statement)
    code = _empty_strings(strip_comments(text)).rstrip(";").strip()
    parsed = classify_statement(code, db)
    if parsed.kind is not StatementKind.DDL:
        return _Targets(code)
    verb = code.split(None, 1)[0].upper()
    if parsed.database_level:
        dropped = (parsed.database.lower(),) if verb == "DROP" else ()
        return _Targets(code, dropped_databases=dropped)
    unquoted = _QUOTED.sub(" ", code)
    found = _OBJECT.search(unquoted)
    kind = found.group(1).upper() if found else ""
    if verb == "TRUNCATE" or kind in _NO_TYPE_CHANGE or not parsed.tables:
        return _Targets(code)
    named = [(d.lower(), t.lower()) for d, t in parsed.tables]
    if kind == "INDEX" or (verb == "ALTER" and len(named) == 1):
        return _Targets(code, ((*named[0], _Reach.NAMED),))
    # CREATE/DROP/RENAME TABLE, or an ALTER that renames or swaps in another table's rows
    return _Targets(code, tuple((d, t, _Reach.ALL) for d, t in dict.fromkeys(named)))


def _mentions(code: str, name: str) -> bool:
    """Whether ``code`` names the identifier ``name`` (bare or in backquotes), by token."""
    quoted = "`" + name.replace("`", "``") + "`"
    if quoted.lower() in code.lower():
        return True
    bare = re.compile(rf"(?<![\w$`]){re.escape(name)}(?![\w$`])", re.IGNORECASE)
    return bare.search(code) is not None


def names_tables(statement: str) -> bool:
    """Whether a statement (``SHOW BINLOG EVENTS`` Info) may change any table's definition:
    the ones worth keeping in the history (:mod:`.ddl_index`)."""
    targets = _targets(statement)
    return bool(targets.tables or targets.dropped_databases)


def touched_columns(
    statement: str, db: str, table: str, columns: tuple[str, ...]
) -> tuple[str, ...]:
    """Which of ``columns`` of ``db``.``table`` a statement may have changed: all of them when
    it creates, replaces, drops or renames the table (or its database), or swaps rows in (a
    table put in place may have had any definition); the columns a plain ALTER TABLE or
    CREATE INDEX of it names. Conservative: a column merely named (in an index, say) counts
    as touched; the reader then refuses rather than guess. Names compare without case (as
    the server does with lower_case_table_names, and always for columns)."""
    targets = _targets(statement)
    wanted_db, wanted = db.lower(), table.lower()
    if wanted_db in targets.dropped_databases:
        return columns
    reach: _Reach | None = None
    for target_db, target, how in targets.tables:
        if target == wanted and target_db in (wanted_db, ""):
            reach = how if reach is None or how is _Reach.ALL else reach
    if reach is None:
        return ()
    if reach is _Reach.ALL:
        return columns
    return tuple(column for column in columns if _mentions(targets.code, column))
