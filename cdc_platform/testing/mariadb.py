"""A private MariaDB server with the binlog settings lossless CDC needs.

Started from the Debian package as a child process on 127.0.0.1 and a free port, with its own
data directory, so tests, benchmarks and the demo never touch a system database. Measured
start-up (measured here): install-db ~1 s, ready ~1 s, restart on an existing datadir ~0.3 s.
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pymysql

from cdc_platform.events import ResumePosition
from cdc_platform.source.mysql import mysql_connection
from cdc_platform.testing.processes import (
    PrivateServer,
    ServerStartError,
    child_setup,
    find_binary,
    tail_of,
    wait_until,
)
from cdc_platform.testing.secrets import REPLICATION_PASSWORD

if TYPE_CHECKING:
    from cdc_platform.testing.tls import Certificates

__all__ = ["MariaDBServer", "ReplicationUser"]

BINLOG_ARGS: tuple[str, ...] = (
    "--log-bin=mysql-bin",
    "--binlog-format=ROW",
    "--binlog-row-image=FULL",
    "--binlog-row-metadata=FULL",
    "--gtid-strict-mode=ON",
)
"""What the binlog source requires (README: source server settings); tests that need other
settings pass their own."""


_SOCKET_PATH_MAX = 107
"""The server refuses a Unix socket path longer than this (``sun_path``)."""


def _socket_path(base_dir: Path) -> Path:
    """``base_dir/mysqld.sock``, or one in a short private temporary directory when that path
    is too long (deep test directories, e.g. under parallel pytest workers)."""
    path = base_dir / "mysqld.sock"
    if len(str(path).encode()) <= _SOCKET_PATH_MAX:
        return path
    return Path(tempfile.mkdtemp(prefix="cdc-mariadb-")) / "mysqld.sock"


@dataclass(frozen=True)
class ReplicationUser:
    """A user with only the grants CDC needs: SELECT, REPLICATION SLAVE, REPLICATION CLIENT."""

    name: str
    password: str

    def __repr__(self) -> str:
        return f"ReplicationUser(name={self.name!r}, password='***')"


class MariaDBServer(PrivateServer):
    """One private ``mariadbd``: start, stop, kill, restart, connect, read its error log."""

    STOP_TIMEOUT = 30.0
    """InnoDB may flush for a while before it ends."""

    def __init__(
        self,
        base_dir: Path,
        *,
        port: int | None = None,
        server_id: int = 1,
        binlog_args: Sequence[str] = BINLOG_ARGS,
        extra_args: Sequence[str] = (),
        tls: Certificates | None = None,
    ) -> None:
        """``tls``: serve TLS with these certificates and refuse connections without it
        (``require_secure_transport``), so a plain-text connection cannot pass unnoticed."""
        self.base_dir = base_dir
        self.datadir = base_dir / "data"
        self.socket = _socket_path(base_dir)
        self.error_log_path = base_dir / "error.log"
        # A private temporary directory: servers bootstrapping at once in a shared /tmp collided
        # on their temporary table files ("Could not remove temporary table", install aborted).
        self.tmpdir = base_dir / "tmp"
        self.host = "127.0.0.1"
        super().__init__(port)
        self.server_id = server_id
        tls_args = (
            [
                f"--ssl-ca={tls.ca_file}",
                f"--ssl-cert={tls.server_cert}",
                f"--ssl-key={tls.server_key}",
                "--require-secure-transport=ON",
            ]
            if tls is not None
            else []
        )
        self._args = [*binlog_args, *tls_args, *extra_args]

    # -- life cycle --------------------------------------------------------------------------

    def _start_once(self, timeout: float) -> None:
        """Initialise the data directory on first start, then start and wait until SQL works."""
        if self._proc is not None and self._proc.poll() is None:
            return
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.tmpdir.mkdir(exist_ok=True)
        if not (self.datadir / "mysql").exists():
            self._install_db()
        mariadbd = find_binary("mariadbd")
        cmd = [
            mariadbd,
            "--no-defaults",
            "--user=root",
            f"--datadir={self.datadir}",
            f"--tmpdir={self.tmpdir}",
            f"--socket={self.socket}",
            f"--port={self.port}",
            "--bind-address=127.0.0.1",
            "--skip-name-resolve",
            f"--server-id={self.server_id}",
            f"--pid-file={self.base_dir / 'mysqld.pid'}",
            f"--log-error={self.error_log_path}",
            "--innodb-buffer-pool-size=64M",
            "--innodb-log-file-size=16M",
            "--max-connections=200",
            *self._args,
        ]
        self._proc = subprocess.Popen(
            cmd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=child_setup(),  # noqa: PLW1509 (only from the main thread)
        )
        proc = self._proc

        def ready() -> bool:
            if proc.poll() is not None:
                raise ServerStartError(
                    f"mariadbd exited with {proc.returncode}\n{tail_of(self.error_log_path)}"
                )
            try:
                with self.connect() as conn, conn.cursor() as cur:
                    cur.execute("SELECT 1")
                return True
            except pymysql.MySQLError:
                return False

        wait_until(ready, timeout=timeout, what="MariaDB", log=self.error_log_path)

    def _install_db(self) -> None:
        install = find_binary("mariadb-install-db")
        result = subprocess.run(
            [
                install,
                "--no-defaults",
                "--user=root",
                f"--datadir={self.datadir}",
                f"--tmpdir={self.tmpdir}",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                "--innodb-log-file-size=16M",
            ],
            capture_output=True,
            check=False,
        )
        if result.returncode != 0:
            raise ServerStartError(
                "mariadb-install-db failed:\n" + result.stderr.decode(errors="replace")[-4000:]
            )

    # -- SQL ---------------------------------------------------------------------------------

    def connect(
        self, database: str | None = None, **kwargs: Any
    ) -> pymysql.connections.Connection[Any]:
        """A root connection over TCP (autocommit on unless overridden).

        Made as the engine makes its own (:func:`~cdc_platform.source.mysql.mysql_connection`):
        pymysql alone builds a new TLS context for every connection in its default mode,
        loading the system's CA certificates each time, and the tests' helpers connect often
        (in one run of the suite that loading was 160 of the test workers' 770 CPU-seconds)."""
        options: dict[str, Any] = {"autocommit": True, "connect_timeout": 5, "charset": "utf8mb4"}
        options.update(kwargs)
        return mysql_connection(
            host=self.host, port=self.port, user="root", password="", database=database, **options
        )

    def execute(self, *statements: str, database: str | None = None) -> None:
        """Run statements as root, one after the other."""
        with self.connect(database) as conn, conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)

    def query(self, sql: str, database: str | None = None) -> list[tuple[Any, ...]]:
        """Rows of one query, as root."""
        with self.connect(database) as conn, conn.cursor() as cur:
            cur.execute(sql)
            return list(cur.fetchall())

    def binlog_position(self) -> ResumePosition:
        """Where the binlog ends now (``SHOW MASTER STATUS``): a test's workload starts here."""
        file, pos = self.query("SHOW MASTER STATUS")[0][:2]
        return ResumePosition(str(file), int(pos))

    def create_replication_user(
        self,
        name: str = "cdc",
        password: str = REPLICATION_PASSWORD,
    ) -> ReplicationUser:
        """Create (or reset) a user with exactly the grants CDC needs."""
        self.execute(
            f"CREATE USER IF NOT EXISTS '{name}'@'%' IDENTIFIED BY '{password}'",
            f"ALTER USER '{name}'@'%' IDENTIFIED BY '{password}'",
            f"GRANT SELECT, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO '{name}'@'%'",
        )
        return ReplicationUser(name, password)

    @contextmanager
    def database(self, name: str) -> Iterator[str]:
        """A fresh database, dropped afterwards."""
        self.execute(f"DROP DATABASE IF EXISTS `{name}`", f"CREATE DATABASE `{name}`")
        try:
            yield name
        finally:
            if self.running:
                self.rollback_prepared_xa()
                self.execute(f"DROP DATABASE IF EXISTS `{name}`")

    def rollback_prepared_xa(self) -> list[str]:
        """Roll back the prepared XA transactions no connection holds (a test that failed
        between its XA PREPARE and its XA COMMIT leaves one, whose locks would stop the
        database's DROP until ``lock_wait_timeout``); returns their XIDs as hex."""
        left = []
        for format_id, gtrid_length, _, data in self.query("XA RECOVER"):
            raw = bytes(data)
            gtrid, bqual = raw[: int(gtrid_length)].hex(), raw[int(gtrid_length) :].hex()
            self.execute(f"XA ROLLBACK X'{gtrid}', X'{bqual}', {int(format_id)}")
            left.append(gtrid)
        return left

    def error_log(self, lines: int = 60) -> str:
        """The tail of the server's error log, for failure reports."""
        return tail_of(self.error_log_path, lines)
