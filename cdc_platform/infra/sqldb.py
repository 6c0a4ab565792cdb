"""One small SQL layer for the lease table, the node registry and the state watch (both
``ha/`` and ``watch/`` use it, so it lives beneath them).

SQLite (stdlib, the embedded default), MariaDB/MySQL (pymysql) and PostgreSQL (psycopg 3,
imported only when used). Statements are written once with ``?`` placeholders; a
:class:`Dialect` supplies the few pieces that differ (the database clock, GREATEST, insert
if absent, column types).

Times are stored as seconds since the Unix epoch (double) computed by the database itself, so
no node clock and no session time zone is ever involved (ServiceComb's master_lock needs
``serverTimezone`` and synchronised node clocks; this does not).

Every driver error becomes the error type the caller chose (a transient CdcError), with the
URL's password never in the message. A failed connection is dropped and reopened on next use.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pydantic import SecretStr

from cdc_platform.config.tls import TlsConfig, is_loopback
from cdc_platform.config.urls import DatabaseKind, DatabaseUrl, parse_database_url
from cdc_platform.errors import CdcError, ConfigError, LeaseBackendError

__all__ = [
    "MYSQL",
    "POSTGRESQL",
    "SQLITE",
    "Database",
    "DatabaseUrl",
    "Dialect",
    "Tx",
    "parse_database_url",
]

log = logging.getLogger("cdc_platform.infra")

Params = Sequence[Any]


@dataclass(frozen=True, slots=True)
class Dialect:
    """What differs between the supported databases."""

    name: str
    now: str
    """SQL expression: the database's clock, seconds since the Unix epoch, as a double."""
    greatest: str
    """Name of the two-argument maximum function."""
    insert_ignore: str
    """``{table}`` and ``{columns}``/``{values}`` template of an insert that skips duplicates."""
    double: str
    bigint: str
    text: str
    begin: str | None
    """Statement that opens a write transaction, when the driver does not."""
    for_update: str
    """Suffix of a SELECT that locks the rows it reads until the end of the transaction."""
    update_limit: bool
    """True when ``UPDATE/DELETE ... ORDER BY ... LIMIT n`` works (MariaDB/MySQL)."""

    def insert_if_absent(self, table: str, columns: Sequence[str]) -> str:
        """``INSERT`` that does nothing when the primary key already exists."""
        cols = ", ".join(columns)
        values = ", ".join("?" for _ in columns)
        return self.insert_ignore.format(table=table, columns=cols, values=values)


SQLITE = Dialect(
    name="sqlite",
    now="cdc_now()",
    greatest="MAX",
    insert_ignore="INSERT OR IGNORE INTO {table} ({columns}) VALUES ({values})",
    double="REAL",
    bigint="INTEGER",
    text="TEXT",
    begin="BEGIN IMMEDIATE",
    for_update="",  # BEGIN IMMEDIATE already holds the database's write lock
    update_limit=False,
)
"""SQLite's clock is this machine's (the file is local): ``cdc_now()`` is registered per
connection and returns the injected database clock, ``time.time`` by default."""

MYSQL = Dialect(
    name="mysql",
    now="UNIX_TIMESTAMP(NOW(6))",
    greatest="GREATEST",
    insert_ignore="INSERT IGNORE INTO {table} ({columns}) VALUES ({values})",
    double="DOUBLE",
    bigint="BIGINT",
    text="LONGTEXT",
    begin=None,
    for_update=" FOR UPDATE",
    update_limit=True,
)
"""Sessions run with ``time_zone='+00:00'`` so UNIX_TIMESTAMP never meets a DST gap."""

POSTGRESQL = Dialect(
    name="postgresql",
    now="CAST(EXTRACT(EPOCH FROM clock_timestamp()) AS DOUBLE PRECISION)",
    greatest="GREATEST",
    insert_ignore="INSERT INTO {table} ({columns}) VALUES ({values}) ON CONFLICT DO NOTHING",
    double="DOUBLE PRECISION",
    bigint="BIGINT",
    text="TEXT",
    begin=None,
    for_update=" FOR UPDATE",
    update_limit=False,
)
"""``clock_timestamp()``, not ``now()``: the latter is frozen at transaction start."""


DIALECTS: dict[DatabaseKind, Dialect] = {"sqlite": SQLITE, "mysql": MYSQL, "postgresql": POSTGRESQL}
"""The dialect of each kind of database URL."""


class _Cursor(Protocol):
    rowcount: int

    def execute(self, sql: str, params: Params = ...) -> Any: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> Any: ...

    def close(self) -> Any: ...


class Tx:
    """One open transaction: run statements, read rows and the database clock."""

    def __init__(self, cursor: _Cursor, dialect: Dialect) -> None:
        self._cursor = cursor
        self.dialect = dialect

    def _sql(self, sql: str) -> str:
        return sql if self.dialect is SQLITE else sql.replace("?", "%s")

    def execute(self, sql: str, params: Params = ()) -> int:
        """Run one statement; the number of rows it matched (updates, deletes, inserts)."""
        self._cursor.execute(self._sql(sql), tuple(params))
        return int(self._cursor.rowcount)

    def one(self, sql: str, params: Params = ()) -> tuple[Any, ...] | None:
        """The first row of a query, or None."""
        self._cursor.execute(self._sql(sql), tuple(params))
        row = self._cursor.fetchone()
        return tuple(row) if row is not None else None

    def all(self, sql: str, params: Params = ()) -> list[tuple[Any, ...]]:
        """Every row of a query."""
        self._cursor.execute(self._sql(sql), tuple(params))
        return [tuple(row) for row in self._cursor.fetchall()]

    def now(self) -> float:
        """The database's clock, seconds since the Unix epoch."""
        row = self.one(f"SELECT {self.dialect.now}")
        assert row is not None
        return float(row[0])


ErrorFactory = Callable[[str], CdcError]


class Database:
    """A lazily opened connection to one lease/state database, serialised by a lock.

    ``db_clock`` is SQLite's clock (``cdc_now()``); other databases use their own. Each
    :meth:`transaction` commits on success and rolls back on error; driver errors are raised
    as ``error(...)`` and drop the connection, so the next call reconnects.
    """

    def __init__(  # noqa: PLR0913 (the URL; connection settings keyword-only)
        self,
        url: str | DatabaseUrl,
        *,
        password: SecretStr | None = None,
        base_dir: Path | None = None,
        db_clock: Callable[[], float] = time.time,
        timeout: float = 5.0,
        error: ErrorFactory = LeaseBackendError,
        tls: TlsConfig | None = None,
    ) -> None:
        if isinstance(url, DatabaseUrl):
            self.url = url
        else:
            try:
                self.url = parse_database_url(url, base_dir)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
        self.dialect = DIALECTS[self.url.kind]
        self._password = password
        self._db_clock = db_clock
        self._timeout = timeout
        self._error = error
        self._tls = tls or TlsConfig()
        host = self.url.host or ""
        if self.dialect is not SQLITE and not self._tls.verifies and not is_loopback(host):
            log.warning(
                "SECURITY: the lease database %s is not on this machine and its tls.mode is "
                "%s: its certificate is not checked, so a man in the middle can read the "
                "password and forge leases. Set lease.tls.mode to verify_identity with ca_file",
                self.url.display(),
                self._tls.mode,
            )
        self._conn: Any = None
        self._lock = threading.RLock()
        self._schemas: set[str] = set()

    def __repr__(self) -> str:
        return f"Database({self.url.display()!r})"

    # -- connections -----------------------------------------------------------------------------

    def _connect(self) -> Any:
        dialect = self.dialect
        if dialect is SQLITE:
            return self._connect_sqlite()
        password = self._password.get_secret_value() if self._password is not None else ""
        if dialect is MYSQL:
            import pymysql  # noqa: PLC0415 (only when a MySQL lease is configured)
            from pymysql.constants import CLIENT  # noqa: PLC0415 (only when a MySQL lease is configured)

            from cdc_platform.infra.mysql_tls import named_refusal  # noqa: PLC0415 (as pymysql)

            conn = pymysql.connect(
                host=self.url.host,
                port=self.url.port or 3306,
                user=self.url.user or "root",
                password=password,
                database=self.url.database,
                autocommit=False,
                connect_timeout=self._timeout,
                read_timeout=self._timeout,
                write_timeout=self._timeout,
                charset="utf8mb4",
                client_flag=CLIENT.FOUND_ROWS,  # rowcount = rows matched, not rows changed
                init_command="SET time_zone = '+00:00'",  # UTC for UNIX_TIMESTAMP
                defer_connect=True,
                **self._tls.pymysql_args(),
            )
            try:
                conn.connect()
            except pymysql.err.OperationalError as exc:  # a refused certificate, named
                refusal = named_refusal(exc, conn)
                if refusal is None:
                    raise
                raise refusal from None
            with conn.cursor() as cursor:
                # No gap locks: concurrent inserts-if-absent queue instead of deadlocking.
                cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
            return conn
        import psycopg  # noqa: PLC0415 (only when a PostgreSQL lease is configured)

        timeout_ms = int(self._timeout * 1000)
        return psycopg.connect(
            host=self.url.host,
            port=self.url.port or 5432,
            user=self.url.user or "postgres",
            password=password or None,
            dbname=self.url.database,
            connect_timeout=max(1, int(self._timeout)),
            autocommit=False,
            options=f"-c statement_timeout={timeout_ms} -c lock_timeout={timeout_ms}",
            **_libpq_tls(self._tls),
        )

    def _connect_sqlite(self) -> sqlite3.Connection:
        path = self.url.path
        assert path is not None
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(
            str(path), timeout=self._timeout, isolation_level=None, check_same_thread=False
        )
        conn.create_function("cdc_now", 0, self._db_clock)
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()
        if mode is None or str(mode[0]).lower() != "wal":
            log.info("%s: WAL journal not available, using %s", path, mode)
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception as exc:  # closing a broken connection may fail in any way
                log.debug("closing a broken connection failed: %s", exc)

    def close(self) -> None:
        """Close the connection (the next call reopens it)."""
        with self._lock:
            self._drop()

    # -- transactions --------------------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[Tx]:
        """A write transaction; errors of the driver become ``error`` and drop the connection."""
        with self._lock:
            try:
                if self._conn is None:
                    self._conn = self._connect()
                conn = self._conn
                cursor = conn.cursor()
                if self.dialect.begin:
                    cursor.execute(self.dialect.begin)
            except CdcError:
                raise
            except Exception as exc:
                self._drop()
                raise self._translate("connecting", exc) from exc
            tx = Tx(cursor, self.dialect)
            try:
                yield tx
                if self.dialect is SQLITE:
                    cursor.execute("COMMIT")
                else:
                    conn.commit()
            except CdcError:
                self._rollback(conn, cursor)
                raise
            except Exception as exc:
                self._rollback(conn, cursor)
                if _is_driver_error(exc):
                    self._drop()
                    raise self._translate("a statement", exc) from exc
                raise
            finally:
                try:
                    cursor.close()
                except Exception as exc:  # a cursor of a dropped connection
                    log.debug("closing a cursor failed: %s", exc)

    def _rollback(self, conn: Any, cursor: Any) -> None:
        try:
            if self.dialect is SQLITE:
                if conn.in_transaction:
                    cursor.execute("ROLLBACK")
            else:
                conn.rollback()
        except Exception as exc:  # the connection is probably gone; drop it
            log.debug("rollback failed: %s", exc)
            self._drop()

    def _translate(self, what: str, exc: BaseException) -> CdcError:
        detail = f"{type(exc).__name__}: {exc}"
        if self._password is not None:
            detail = detail.replace(self._password.get_secret_value() or "\0", "***")
        return self._error(f"{self.url.display()}: {what} failed: {detail}")

    def ensure_schema(self, name: str, statements: Sequence[str]) -> None:
        """Run ``CREATE ... IF NOT EXISTS`` statements once per Database object.

        Retried: two processes creating the same table at once can make one of them fail
        even with IF NOT EXISTS (PostgreSQL's catalog race); the second try sees the table.
        """
        with self._lock:
            if name in self._schemas:
                return
            for attempt in range(3):
                try:
                    with self.transaction() as tx:
                        for statement in statements:
                            tx.execute(statement)
                    break
                except CdcError:
                    if attempt == 2:
                        raise
                    time.sleep(0.05 * (attempt + 1))
            self._schemas.add(name)


def _is_driver_error(exc: BaseException) -> bool:
    """True for errors a database driver raises (they all derive from PEP 249's Error)."""
    if isinstance(exc, (sqlite3.Error, OSError)):
        return True
    module = type(exc).__module__
    return module.startswith(("pymysql", "psycopg"))


_LIBPQ_SSLMODE = {
    "disabled": "disable",
    "preferred": "prefer",
    "required": "require",
    "verify_ca": "verify-ca",
    "verify_identity": "verify-full",
}


def _libpq_tls(tls: TlsConfig) -> dict[str, Any]:
    """libpq's TLS parameters for ``tls`` (the same modes, PostgreSQL's names)."""
    params: dict[str, Any] = {"sslmode": _LIBPQ_SSLMODE[tls.mode]}
    for key, value in (
        ("sslrootcert", tls.ca_file),
        ("sslcert", tls.cert_file),
        ("sslkey", tls.key_file),
    ):
        if value is not None:
            params[key] = value
    return params
