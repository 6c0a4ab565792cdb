"""A private PostgreSQL server for the database-lease and state-watch tests.

Started from Debian's ``postgresql`` package (``initdb`` + ``postgres`` under
``/usr/lib/postgresql/<version>/bin``) on 127.0.0.1 and a free port, with its own data
directory and password-less (trust) access for the user ``postgres``, so no test touches a
system server and a new machine needs none running.

PostgreSQL refuses to run as root (``initdb: cannot be run as root``). Under root the server
runs as the unprivileged ``postgres`` account the Debian package creates (or ``nobody``),
in a directory of its own under the system temporary directory: the pytest temporary tree of
root is not readable by another user.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any

from cdc_platform.testing.processes import (
    PrivateServer,
    ServerStartError,
    child_setup,
    tail_of,
    wait_until,
)

__all__ = ["PostgreSQLServer", "find_postgres_bin"]

_RUN_AS = ("postgres", "nobody")
"""Accounts tried, in order, when the tests run as root."""


def find_postgres_bin() -> Path:
    """The newest ``/usr/lib/postgresql/<version>/bin`` (or ``initdb`` on PATH)."""
    on_path = shutil.which("initdb")
    if on_path is not None:
        return Path(on_path).parent
    candidates = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    if not candidates:
        raise ServerStartError(
            "initdb not found on PATH or under /usr/lib/postgresql; run scripts/setup.sh to "
            "install Debian's postgresql package"
        )
    return candidates[-1].parent


def _unprivileged_account() -> pwd.struct_passwd | None:
    """The account the server runs as: None when not root (run as ourselves)."""
    if os.geteuid() != 0:
        return None
    for name in _RUN_AS:
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise ServerStartError(
        "PostgreSQL refuses to run as root and neither a 'postgres' nor a 'nobody' account "
        "exists; run scripts/setup.sh (Debian's postgresql package creates 'postgres')"
    )


class PostgreSQLServer(PrivateServer):
    """One private ``postgres``: start, stop, restart, a connection URL, its log."""

    STOP_SIGNAL = signal.SIGINT
    """PostgreSQL's fast shutdown (SIGTERM would wait for every client to leave)."""
    STOP_TIMEOUT = 30.0

    def __init__(self, base_dir: Path, *, port: int | None = None, database: str = "test") -> None:
        self.base_dir = base_dir
        self.log_path = base_dir / "postgresql.log"
        self.host = "127.0.0.1"
        super().__init__(port)
        self._database_missing = False
        self.user = "postgres"
        self.database = database
        self._account = _unprivileged_account()
        self._run_dir: Path | None = None

    @property
    def url(self) -> str:
        """The lease / state-watch URL of the test database (no password: trust access)."""
        return f"postgresql://{self.user}@{self.host}:{self.port}/{self.database}"

    @property
    def data_dir(self) -> Path:
        """The cluster's data directory (created on first start)."""
        return self._workdir() / "data"

    def _workdir(self) -> Path:
        if self._account is None:
            return self.base_dir
        if self._run_dir is None:
            self._run_dir = Path(tempfile.mkdtemp(prefix="cdc-postgresql-"))
            os.chown(self._run_dir, self._account.pw_uid, self._account.pw_gid)
        return self._run_dir

    def _as_account(self) -> dict[str, Any]:
        """``subprocess`` arguments that run a child as the unprivileged account."""
        if self._account is None:
            return {}
        return {
            "user": self._account.pw_uid,
            "group": self._account.pw_gid,
            "extra_groups": [],
            "env": {**os.environ, "HOME": str(self._workdir()), "USER": self._account.pw_name},
        }

    def _start_once(self, timeout: float) -> None:
        """Initialise the cluster on first start, then start and wait until SQL works."""
        if self._proc is not None and self._proc.poll() is None:
            return
        self.base_dir.mkdir(parents=True, exist_ok=True)
        bindir = find_postgres_bin()
        if not (self.data_dir / "PG_VERSION").exists():
            self._initdb(bindir)
            self._database_missing = True  # until created (a start that failed keeps it so)
        log = self.log_path.open("ab")
        self._proc = subprocess.Popen(
            [
                str(bindir / "postgres"),
                "-D",
                str(self.data_dir),
                "-h",
                self.host,
                "-p",
                str(self.port),
                "-k",
                str(self._workdir()),
                # A throw-away server: durability across a machine crash is not what it tests.
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
                "-c",
                "full_page_writes=off",
                "-c",
                "shared_buffers=16MB",
                "-c",
                "max_connections=200",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=child_setup(),  # noqa: PLW1509 (only from the main thread)
            **self._as_account(),
        )
        log.close()
        proc = self._proc

        def ready() -> bool:
            if proc.poll() is not None:
                raise ServerStartError(
                    f"postgres exited with {proc.returncode}\n{tail_of(self.log_path)}"
                )
            return self._answers("postgres")

        wait_until(ready, timeout=timeout, what="PostgreSQL", log=self.log_path)
        if self._database_missing:
            self.execute(f'CREATE DATABASE "{self.database}"', database="postgres")
            self._database_missing = False

    def _initdb(self, bindir: Path) -> None:
        result = subprocess.run(
            [
                str(bindir / "initdb"),
                "-D",
                str(self.data_dir),
                "-U",
                self.user,
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
            ],
            capture_output=True,
            check=False,
            cwd=self._workdir(),
            **self._as_account(),
        )
        if result.returncode != 0:
            raise ServerStartError(
                "initdb failed:\n" + result.stderr.decode(errors="replace")[-4000:]
            )

    def _answers(self, database: str) -> bool:
        import psycopg  # noqa: PLC0415 (only the PostgreSQL tests load the driver)

        try:
            with psycopg.connect(self._dsn(database), connect_timeout=2) as conn:
                conn.execute("SELECT 1")
            return True
        except psycopg.OperationalError:
            return False

    def _dsn(self, database: str) -> str:
        return f"host={self.host} port={self.port} user={self.user} dbname={database}"

    def execute(self, *statements: str, database: str | None = None) -> None:
        """Run statements as the superuser, each in autocommit (CREATE DATABASE needs it)."""
        import psycopg  # noqa: PLC0415 (only the PostgreSQL tests load the driver)

        with psycopg.connect(self._dsn(database or self.database), autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement.encode())

    def remove(self) -> None:
        """Stop and delete the private directory made for the unprivileged account."""
        self.stop()
        if self._run_dir is not None:
            shutil.rmtree(self._run_dir, ignore_errors=True)
            self._run_dir = None

    def log_tail(self, lines: int = 60) -> str:
        """The tail of the server log, for failure reports."""
        return tail_of(self.log_path, lines)

    def __enter__(self) -> PostgreSQLServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.remove()
