"""SQL text built from names the source or the configuration supplies, and the one place where
the snapshot path turns pymysql errors into the engine's errors.

Table and column names are data: a table may be called ``we`ird.t ab``. Every name that goes
into SQL text goes through :func:`quote_identifier`; values go through query parameters. pymysql
substitutes parameters with Python's ``%`` operator whenever ``args`` is given (even ``()``),
so SQL text executed with parameters passes its quoted names through :func:`format_safe`
(a column may be called ``50%``).
"""

from __future__ import annotations

import pymysql

from cdc_platform.errors import CdcError, SourceConnectionError, SourceError

__all__ = [
    "NO_SUCH_TABLE",
    "format_safe",
    "is_missing_table",
    "mysql_error",
    "qualified_name",
    "quote_identifier",
]

NO_SUCH_TABLE = 1146
"""ER_NO_SUCH_TABLE: the table was dropped or renamed."""

_BAD_DB = 1049
"""ER_BAD_DB_ERROR: the whole database was dropped."""

_TRANSIENT_SERVER_CODES = frozenset({1053, 1205, 1213, 1927})
"""Server shutdown, lock wait timeout, deadlock, connection killed: a retry may succeed."""


def quote_identifier(name: str) -> str:
    """``name`` as a MySQL/MariaDB quoted identifier (backticks doubled)."""
    return "`" + name.replace("`", "``") + "`"


def qualified_name(db: str, table: str) -> str:
    """```db`.`table``` with both parts quoted."""
    return f"{quote_identifier(db)}.{quote_identifier(table)}"


def format_safe(sql: str) -> str:
    """SQL text (quoted names) made literal for pymysql's ``%`` parameter substitution."""
    return sql.replace("%", "%%")


def _code(exc: BaseException) -> int | None:
    args = getattr(exc, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def is_missing_table(exc: BaseException) -> bool:
    """Whether a pymysql error says the table (or its database) no longer exists."""
    return isinstance(exc, pymysql.MySQLError) and _code(exc) in (NO_SUCH_TABLE, _BAD_DB)


def mysql_error(exc: BaseException, doing: str) -> CdcError:
    """The engine's error for a pymysql (or socket) error raised while ``doing``.

    A lost or refused connection is transient (rerun to continue); anything else the server
    refused (syntax, privileges, a missing object) is a plain SourceError.
    """
    code = _code(exc)
    detail = f"{doing}: {type(exc).__name__}" + (f" {code}" if code is not None else "")
    message = exc.args[1] if len(getattr(exc, "args", ())) > 1 else str(exc)
    connection = OSError | pymysql.err.OperationalError | pymysql.err.InterfaceError
    lost = isinstance(exc, connection) and (code is None or code < 1000 or code >= 2000)
    if lost or code in _TRANSIENT_SERVER_CODES:
        return SourceConnectionError(f"{detail}: {message}")
    return SourceError(f"{detail}: {message}")
