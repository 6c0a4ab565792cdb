"""Which tables a destination captures, and which tables a binlog statement touches.

``TableFilter`` holds the include/exclude regexes over ``db.table``. It runs on every
table-map event, before any row of the table is decoded, so the result is cached per name.
System schemas are never captured: their rows (``mysql.*`` grant tables,
``mysql.gtid_slave_pos`` on a replica) are server bookkeeping, not user data. Nor is a
transient table of an online schema-change tool beside a captured table
(:mod:`.online_ddl`): the stream follows the tool's copy (:meth:`TableFilter.captures`), but
it is no table of its own (no snapshot, catalog entry, re-read or mirror).

``classify_statement`` reads the statements a ROW-format binlog still carries as text (DDL,
transaction control, account management) well enough to filter DDL by table and to refuse
statement-based DML, which cannot be captured as row changes.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from cdc_platform.source.online_ddl import transient_table
from cdc_platform.source.sql import strip_comments

__all__ = [
    "SYSTEM_SCHEMAS",
    "Statement",
    "StatementKind",
    "TableFilter",
    "classify_statement",
    "filter_fingerprint",
    "statement_label",
]

SYSTEM_SCHEMAS = frozenset({"mysql", "information_schema", "performance_schema", "sys"})
"""Schemas that are never captured, whatever the patterns say."""

_ANY_TABLE = frozenset({".*", ".+", "[^.]*", "[^.]+", r"[^\.]*", r"[^\.]+"})
"""Table parts of an exclude pattern that mean "every table of the database"."""


def _split_pattern(pattern: str) -> tuple[str, str] | None:
    r"""Split ``db\.table`` at its first escaped dot (or plain dot); None if there is none."""
    for separator in (r"\.", "."):
        index = pattern.find(separator)
        if index >= 0:
            return pattern[:index], pattern[index + len(separator) :]
    return None


class TableFilter:
    """Include/exclude decision for ``db.table`` names (``re.fullmatch``, cached)."""

    __slots__ = ("_cache", "_db_cache", "_exclude", "_include")

    def __init__(self, include: Iterable[str], exclude: Iterable[str] = ()) -> None:
        self._include = [re.compile(p) for p in include]
        self._exclude = [re.compile(p) for p in exclude]
        self._cache: dict[tuple[str, str], bool] = {}
        self._db_cache: dict[str, bool] = {}

    def matches(self, db: str, table: str) -> bool:
        """True when ``db.table`` is captured: matches an include pattern and no exclude one."""
        key = (db, table)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._decide(db, table)
            if len(self._cache) > 65536:  # a pathological number of tables: stay bounded
                self._cache.clear()
            self._cache[key] = hit
        return hit

    def decided(self, db: str, table: str) -> bool:
        """Whether the decision for ``db.table`` is kept (the stream asks for every event)."""
        return (db, table) in self._cache

    def _decide(self, db: str, table: str) -> bool:
        if db.lower() in SYSTEM_SCHEMAS:
            return False
        name = f"{db}.{table}"
        if self._include and not any(p.fullmatch(name) for p in self._include):
            return False
        if any(p.fullmatch(name) for p in self._exclude):
            return False
        return not self.transient(db, table)

    def follows(self, db: str, table: str) -> bool:
        """True for the shadow of a captured table (``_t_new``, ``_t_gho``): the stream records
        its rows and DDL, which become the table's at the tool's swap (docs/ddl.md)."""
        found = transient_table(table)
        return found is not None and found.shadow and self.matches(db, found.target)

    def transient(self, db: str, table: str) -> bool:
        """True for any transient table of a schema-change tool beside a captured table: no
        table of its own (no catalog entry, asset or mirror)."""
        found = transient_table(table)
        return found is not None and self.matches(db, found.target)

    def captures(self, db: str, table: str) -> bool:
        """What the stream records: the captured tables and the shadows it follows."""
        return self.matches(db, table) or self.follows(db, table)

    def matches_database(self, db: str) -> bool:
        r"""Best-effort decision for statements that name a database but no table.

        Used for ``CREATE/DROP DATABASE`` and other DDL whose table cannot be parsed. A
        regex cannot be asked "could you match some table of db?", so each pattern is split
        at its first ``\.`` (or ``.``) and the database part is matched against ``db``. An
        exclude pattern only excludes a whole database when its table part is ``.*``/``.+``.
        """
        hit = self._db_cache.get(db)
        if hit is None:
            hit = self._decide_database(db)
            self._db_cache[db] = hit
        return hit

    def _decide_database(self, db: str) -> bool:
        if not db or db.lower() in SYSTEM_SCHEMAS:
            return False
        if self._include and not any(_database_part_matches(p.pattern, db) for p in self._include):
            return False
        for pattern in self._exclude:
            parts = _split_pattern(pattern.pattern)
            if parts is not None and parts[1] in _ANY_TABLE and _fullmatch(parts[0], db):
                return False
        return True


def _database_part_matches(pattern: str, db: str) -> bool:
    parts = _split_pattern(pattern)
    if parts is None:
        return _fullmatch(pattern, db)
    return _fullmatch(parts[0], db)


def _fullmatch(pattern: str, text: str) -> bool:
    try:
        return re.fullmatch(pattern, text) is not None
    except re.error:
        # The database part of a valid pattern may not compile on its own (e.g. a group
        # split in two): err on the side of emitting the statement.
        return True


# -- statements -------------------------------------------------------------------------------


class StatementKind(StrEnum):
    """What a binlog query event means to the source."""

    BEGIN = "begin"
    """Starts a transaction (MySQL's BEGIN; MariaDB sends a GTID event instead)."""
    COMMIT = "commit"
    """Ends a transaction on non-transactional engines."""
    ROLLBACK = "rollback"
    SAVEPOINT = "savepoint"
    """SAVEPOINT / ROLLBACK TO / RELEASE SAVEPOINT inside a transaction: no effect here."""
    XA = "xa"
    DML = "dml"
    """Statement-based row changes: cannot be captured losslessly."""
    ADMIN = "admin"
    """Accounts, grants, maintenance: not schema changes (and may carry password hashes)."""
    DDL = "ddl"


@dataclass(frozen=True, slots=True)
class Statement:
    """A classified statement: its kind and the ``(db, table)`` names it touches, if parsed.

    ``database`` is the database a database-level statement names (CREATE DATABASE x), else
    the session's default database.
    """

    kind: StatementKind
    tables: tuple[tuple[str, str], ...] = ()
    database: str = ""
    database_level: bool = False


_IDENT = r"(?:`(?:[^`]|``)+`|[\w$]+)"
_QNAME = rf"{_IDENT}(?:\s*\.\s*{_IDENT})?"
_QNAME_LIST = rf"{_QNAME}(?:\s*,\s*{_QNAME})*"
_FLAGS = re.IGNORECASE | re.DOTALL

_TABLE_STATEMENTS = [
    re.compile(p, _FLAGS)
    for p in (
        rf"CREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMPORARY\s+)?(?:TABLE|SEQUENCE)\s+"
        rf"(?:IF\s+NOT\s+EXISTS\s+)?(?P<names>{_QNAME})",
        rf"ALTER\s+(?:ONLINE\s+)?(?:IGNORE\s+)?(?:TABLE|SEQUENCE)\s+(?:IF\s+EXISTS\s+)?"
        rf"(?P<names>{_QNAME})",
        rf"DROP\s+(?:TEMPORARY\s+)?(?:TABLES?|SEQUENCES?)\s+(?:IF\s+EXISTS\s+)?"
        rf"(?P<names>{_QNAME_LIST})",
        rf"RENAME\s+TABLES?\s+(?P<names>{_QNAME}\s+TO\s+{_QNAME}"
        rf"(?:\s*,\s*{_QNAME}\s+TO\s+{_QNAME})*)",
        rf"TRUNCATE\s+(?:TABLE\s+)?(?P<names>{_QNAME})",
        rf"(?:CREATE|DROP)\s+(?:OR\s+REPLACE\s+)?(?:ONLINE\s+|OFFLINE\s+)?"
        rf"(?:UNIQUE\s+|FULLTEXT\s+|SPATIAL\s+)?INDEX\s+(?:IF\s+(?:NOT\s+)?EXISTS\s+)?"
        rf"{_IDENT}(?:\s+USING\s+\w+)?\s+ON\s+(?P<names>{_QNAME})",
        rf"(?:CREATE|ALTER)\s+(?:OR\s+REPLACE\s+)?(?:ALGORITHM\s*=\s*\w+\s+)?"
        rf"(?:DEFINER\s*=\s*\S+\s+)?(?:SQL\s+SECURITY\s+\w+\s+)?VIEW\s+"
        rf"(?:IF\s+NOT\s+EXISTS\s+)?(?P<names>{_QNAME})",
        rf"DROP\s+VIEWS?\s+(?:IF\s+EXISTS\s+)?(?P<names>{_QNAME_LIST})",
        rf"(?:CREATE|DROP)\s+(?:OR\s+REPLACE\s+)?(?:DEFINER\s*=\s*\S+\s+)?TRIGGER\s+"
        rf"(?:IF\s+(?:NOT\s+)?EXISTS\s+)?{_QNAME}\s+(?:BEFORE|AFTER)\s+\w+\s+ON\s+"
        rf"(?P<names>{_QNAME})",
    )
]
_ALTER_RENAME = re.compile(
    rf"\bRENAME\s+(?!COLUMN\b|INDEX\b|KEY\b|CONSTRAINT\b)(?:TO\s+|AS\s+)?(?P<names>{_QNAME})",
    _FLAGS,
)
_ALTER_EXCHANGE = re.compile(
    rf"\b(?:EXCHANGE\s+PARTITION\b.*?\bWITH\s+TABLE|CONVERT\s+PARTITION\b.*?\bTO\s+TABLE"
    rf"|CONVERT\s+TABLE)\s+(?P<names>{_QNAME})",
    _FLAGS,
)
"""The second table of a partition exchange or conversion: its rows change too."""
_DATABASE_STATEMENT = re.compile(
    rf"(?:CREATE|ALTER|DROP)\s+(?:OR\s+REPLACE\s+)?(?:DATABASE|SCHEMA)\s+"
    rf"(?:IF\s+(?:NOT\s+)?EXISTS\s+)?"
    rf"(?:(?!(?:DEFAULT|CHARACTER|CHARSET|COLLATE|COMMENT|UPGRADE|READ)\b)(?P<db>{_IDENT}))?",
    _FLAGS,
)
_DML_TARGET = [
    re.compile(p, _FLAGS)
    for p in (
        rf"(?:INSERT|REPLACE)\s+(?:(?:LOW_PRIORITY|DELAYED|HIGH_PRIORITY|IGNORE)\s+)*"
        rf"(?:INTO\s+)?(?P<names>{_QNAME})",
        rf"UPDATE\s+(?:(?:LOW_PRIORITY|IGNORE)\s+)*(?P<names>{_QNAME_LIST})\s+SET\b",
        rf"DELETE\s+(?:(?:LOW_PRIORITY|QUICK|IGNORE)\s+)*FROM\s+(?P<names>{_QNAME_LIST})",
        rf"LOAD\s+(?:DATA|XML)\b.*?\bINTO\s+TABLE\s+(?P<names>{_QNAME})",
    )
]
_NAME = re.compile(rf"(?P<a>{_IDENT})(?:\s*\.\s*(?P<b>{_IDENT}))?")
_MAY_COMMENT = re.compile(r"/\*|--|#")
_ADMIN_WORDS = frozenset(
    {
        "GRANT", "REVOKE", "SET", "FLUSH", "INSTALL", "UNINSTALL", "ANALYZE", "OPTIMIZE",
        "REPAIR", "CHECK", "CHECKSUM", "KILL", "RESET", "PURGE", "CHANGE", "DO", "CALL",
        "SHOW", "USE", "HANDLER", "LOCK", "UNLOCK", "BINLOG",
    }
)  # fmt: skip
_ADMIN_OBJECTS = frozenset(
    {
        "USER", "ROLE", "SERVER", "TRIGGER", "PROCEDURE", "FUNCTION", "EVENT", "VIEW",
        "PACKAGE", "TABLESPACE", "LOGFILE", "RESOURCE",
    }
)  # fmt: skip
"""Objects that hold no rows: their CREATE/ALTER/DROP changes no captured table (a trigger
changes what later statements write, and those writes come as rows of their own)."""
_DML_WORDS = frozenset({"INSERT", "UPDATE", "DELETE", "REPLACE", "LOAD"})


def _unquote(ident: str) -> str:
    if ident.startswith("`"):
        return ident[1:-1].replace("``", "`")
    return ident


def _names(text: str, default_db: str) -> tuple[tuple[str, str], ...]:
    found: list[tuple[str, str]] = []
    for match in _NAME.finditer(text):
        first, second = match.group("a"), match.group("b")
        if second is None and first.upper() == "TO":
            continue
        if second is None:
            found.append((default_db, _unquote(first)))
        else:
            found.append((_unquote(first), _unquote(second)))
    return tuple(found)


def classify_statement(sql: str, default_db: str) -> Statement:
    """Classify a query event's statement; ``default_db`` is the event's schema (USE db).

    Best effort by design: the statement kinds that matter for correctness (transaction
    control, DML, CREATE/ALTER/DROP/RENAME/TRUNCATE of tables) are recognised exactly;
    anything else is DDL without a parsed table and is filtered by its database.
    """
    # Comments go, executable ones (``/*!100100 ALTER TABLE t ...*/``) keep their code: the
    # server runs it. Most statements (BEGIN, plain DML) have none: no lexing for them.
    text = strip_comments(sql) if _MAY_COMMENT.search(sql) else sql.strip()
    words = text.split(None, 3)
    if not words:
        return Statement(StatementKind.ADMIN, database=default_db)
    first = words[0].upper().rstrip(";")
    kind = _control_kind(first, [w.upper() for w in words[1:3]])
    if kind is not None:
        return Statement(kind, database=default_db)
    if first in _DML_WORDS:
        return Statement(StatementKind.DML, _first_names(_DML_TARGET, text, default_db), default_db)
    if first in _ADMIN_WORDS or (
        first in ("CREATE", "ALTER", "DROP", "RENAME") and _object_word(text) in _ADMIN_OBJECTS
    ):
        return Statement(StatementKind.ADMIN, database=default_db)
    database = _DATABASE_STATEMENT.match(text)
    if database:
        db = _unquote(database["db"]) if database["db"] else default_db
        return Statement(StatementKind.DDL, database=db, database_level=True)
    tables = _first_names(_TABLE_STATEMENTS, text, default_db)
    if tables and first == "ALTER":
        rename = _ALTER_RENAME.search(text)
        if rename:
            tables += _names(rename["names"], default_db)
        exchange = _ALTER_EXCHANGE.search(text)
        if exchange:
            tables += _names(exchange["names"], default_db)
    return Statement(StatementKind.DDL, tables, default_db)


_CONTROL = {
    "BEGIN": StatementKind.BEGIN,
    "COMMIT": StatementKind.COMMIT,
    "SAVEPOINT": StatementKind.SAVEPOINT,
    "RELEASE": StatementKind.SAVEPOINT,
    "XA": StatementKind.XA,
}


def _control_kind(first: str, following: list[str]) -> StatementKind | None:
    if first in _CONTROL:
        return _CONTROL[first]
    if first == "START" and following[:1] == ["TRANSACTION"]:
        return StatementKind.BEGIN
    if first == "ROLLBACK":
        # ROLLBACK [WORK] TO [SAVEPOINT] x undoes part of a transaction that goes on.
        return StatementKind.SAVEPOINT if "TO" in following else StatementKind.ROLLBACK
    return None


def _first_names(
    patterns: list[re.Pattern[str]], text: str, default_db: str
) -> tuple[tuple[str, str], ...]:
    for pattern in patterns:
        match = pattern.match(text)
        if match:
            return _names(match["names"], default_db)
    return ()


_OBJECT_MODIFIERS = frozenset(
    {
        "OR", "REPLACE", "IF", "NOT", "EXISTS", "DEFINER", "SQL", "SECURITY", "INVOKER",
        "AGGREGATE", "ALGORITHM", "MERGE", "UNDEFINED", "TEMPTABLE",
    }
)  # fmt: skip


def _object_word(text: str) -> str:
    """The object type after CREATE/ALTER/DROP, skipping OR REPLACE, IF [NOT] EXISTS and the
    view and routine options the server writes before it (``DEFINER=`u`@`h```)."""
    for word in text.upper().split()[1:14]:
        if word not in _OBJECT_MODIFIERS and "=" not in word and "@" not in word:
            return word
    return ""


def statement_label(sql: str) -> str:
    """The statement's verb and object type (``CREATE TRIGGER``, ``FLUSH``): all a log line
    says of a statement, whose text may carry a password (``CREATE USER ... IDENTIFIED BY``)."""
    text = strip_comments(sql) if _MAY_COMMENT.search(sql) else sql.strip()
    words = text.split(None, 1)
    verb = words[0].upper().rstrip(";") if words else ""
    if not verb.isalpha():
        return "a statement"
    if verb in ("CREATE", "ALTER", "DROP", "RENAME"):
        kind = _object_word(text).rstrip(";")
        return f"{verb} {kind}" if kind.isalpha() else verb
    return verb


def filter_fingerprint(include: Sequence[str], exclude: Sequence[str]) -> str:
    """A short digest of the table filters, stored in every checkpoint: a skip inside a
    transaction counts the captured events, so it is only valid under the same filters."""
    text = json.dumps({"include": list(include), "exclude": list(exclude)}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
