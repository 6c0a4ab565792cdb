"""Online schema-change tools on a streaming destination: Percona's pt-online-schema-change and
GitHub's gh-ost, the real programs, against the private MariaDB while a live workload writes.

Each tool runs ADD COLUMN (with a default: values the binlog never shows for old rows), MODIFY
COLUMN (a value-converting one), DROP COLUMN on a keyed table, and a rebuild (``ENGINE=InnoDB``)
of a second keyed table and of a table without a primary key (a unique key only, which both
tools need). Then:

* every mirror equals its source table row for row (a multiset for the keyless one);
* nothing was copied again (no re-read, no snapshot): the tool's own copy, streamed through its
  shadow table (``_t_new`` / ``_t_gho``), is what the mirror takes at the swap;
* the transient tables (``_t_new``, ``_t_old``, ``_t_gho``, ``_t_ghc``, ``_t_del``) are no
  table of the catalog and no asset of the definitions, also when a catalog read while the tool
  ran names them;
* the destination's ``cdc_mirrors`` job, all its mirrors, succeeds after the swaps, also with a
  table that no longer exists and never had a row in the change log (it says ``dropped`` on
  its asset).

The tools come from ``scripts/setup.sh``: percona-toolkit (Debian), gh-ost (built from the Go
module proxy into ``~/.cache/cdc-platform/bin``).
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pymysql
import pytest
from dagster import DagsterInstance
from pyspark.sql import SparkSession

from cdc_platform.config import ConfigSet, load_config
from cdc_platform.coordination.table_catalog import Catalog, CatalogTable, discover_tables
from cdc_platform.runtime.supervised import supervised_destination
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.spark.locations import mirror_root, mirror_uri
from cdc_platform.testing.destinations import PASSWORD_ENV, sqlite_lease, write_conf
from cdc_platform.testing.mariadb import MariaDBServer
from dagster_defs import build_definitions
from dagster_defs.table_assets import MIRRORS_JOB
from tests.conftest import MariaDBDatabase

pytestmark = pytest.mark.integration

TABLES = ("orders", "items", "notes")
SCHEMA = (
    "CREATE TABLE orders (id INT PRIMARY KEY, amount DECIMAL(10,2) NOT NULL, note VARCHAR(32))",
    "CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(16) NOT NULL)",
    # no primary key: the platform mirrors it as a multiset; both tools need the unique key
    "CREATE TABLE notes (k INT NOT NULL, body VARCHAR(32), UNIQUE KEY uk (k))",
)
CHANGES = (  # (table, alter) in order; the keyed table is altered three times
    ("orders", "ADD COLUMN color VARCHAR(16) NOT NULL DEFAULT 'red'"),
    ("orders", "MODIFY amount DECIMAL(12,1) NOT NULL"),
    ("orders", "DROP COLUMN note"),
    ("items", "ENGINE=InnoDB"),
    ("notes", "ENGINE=InnoDB"),
)
TRANSIENT = ("_{t}_new", "_{t}_old", "_{t}_gho", "_{t}_ghc", "_{t}_del")
GH_OST = (
    Path(os.environ.get("CDC_PLATFORM_CACHE", Path.home() / ".cache" / "cdc-platform"))
    / "bin"
    / "gh-ost"
)


def _pt_osc(server: MariaDBServer, db: str, table: str, alter: str, work: Path) -> list[str]:
    del work
    return [
        "pt-online-schema-change", f"--alter={alter}",
        f"h={server.host},P={server.port},u=root,D={db},t={table}",
        "--execute", "--chunk-size=40", "--recursion-method=none",
        "--no-check-replication-filters", "--set-vars=lock_wait_timeout=30",
        "--tries=create_triggers:20:0.5,drop_triggers:20:0.5,swap_tables:20:0.5",
    ]  # fmt: skip


def _gh_ost(server: MariaDBServer, db: str, table: str, alter: str, work: Path) -> list[str]:
    return [
        str(GH_OST), f"--alter={alter}",
        f"--host={server.host}", f"--port={server.port}", "--user=root", "--password=",
        f"--database={db}", f"--table={table}", "--execute",
        "--allow-on-master", "--assume-rbr", "--initially-drop-ghost-table",
        "--initially-drop-old-table", "--ok-to-drop-table", "--chunk-size=40",
        "--replica-server-id=4161", f"--serve-socket-file={work / 'gh-ost.sock'}",
        "--heartbeat-interval-millis=100", "--cut-over-lock-timeout-seconds=5",
        "--default-retries=30", "--verbose",
    ]  # fmt: skip


TOOLS: dict[str, Callable[[MariaDBServer, str, str, str, Path], list[str]]] = {
    "pt-osc": _pt_osc,
    "gh-ost": _gh_ost,
}


def _require(tool: str, server: MariaDBServer) -> None:
    found = shutil.which("pt-online-schema-change") if tool == "pt-osc" else None
    if tool == "gh-ost":
        found = str(GH_OST) if GH_OST.exists() else None
    assert found, f"{tool} is not installed: run scripts/setup.sh"
    if tool == "gh-ost":
        try:
            server.query("SELECT @@transaction_isolation")
        except pymysql.MySQLError:
            # gh-ost 1.1.6 (the version the Go module proxy serves) puts transaction_isolation
            # in every connection; MariaDB before 11.1 knows only tx_isolation (docs/ddl.md)
            pytest.skip("gh-ost cannot connect to this server: no transaction_isolation")


class _Workload:
    """Random inserts, updates and deletes on the three tables until stopped (a seeded rng;
    statements a tool's lock blocks simply wait)."""

    def __init__(self, server: MariaDBServer, db: str) -> None:
        self.server, self.db = server, db
        self.rng = random.Random(46)
        self.done = threading.Event()
        self.statements = 0
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        with self.server.connect(self.db, autocommit=True) as conn, conn.cursor() as cur:
            while not self.done.is_set():
                self._one(cur)
                self.statements += 1
                self.done.wait(0.005)

    def _one(self, cur: Any) -> None:
        rng = self.rng
        key = rng.randint(1, 400)
        table = rng.choice(TABLES)
        kind = rng.random()
        if table == "notes":
            if kind < 0.4:
                cur.execute("INSERT IGNORE INTO notes VALUES (%s, %s)", (key, f"n{key}"))
            elif kind < 0.8:
                cur.execute("UPDATE notes SET body = %s WHERE k = %s", (f"u{rng.random()}", key))
            else:
                cur.execute("DELETE FROM notes WHERE k = %s", (key,))
            return
        if kind < 0.4:
            if table == "orders":
                cur.execute("INSERT IGNORE INTO orders (id, amount) VALUES (%s, %s)", (key, 1.25))
            else:
                cur.execute("INSERT IGNORE INTO items VALUES (%s, %s)", (key, "new"))
        elif kind < 0.8:
            if table == "orders":
                cur.execute("UPDATE orders SET amount = amount + 0.35 WHERE id = %s", (key,))
            else:
                cur.execute("UPDATE items SET name = %s WHERE id = %s", (f"i{kind:.3f}", key))
        else:
            cur.execute(f"DELETE FROM {table} WHERE id = %s", (key,))

    def __enter__(self) -> _Workload:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join(timeout=60)


@contextmanager
def _streaming(config: ConfigSet, copied: set[str]) -> Iterator[None]:
    """The destination streams in a thread; on leaving, it runs until idle and ends."""
    with supervised_destination(
        config, config.destinations["d"], on_snapshot_progress=lambda p: copied.add(p.table)
    ) as supervisor:
        done = threading.Thread(
            target=lambda: supervisor.run(exit_when_idle_seconds=3), daemon=True
        )
        done.start()
        yield
        done.join(timeout=300)
        assert not done.is_alive()


def _rows(spark: SparkSession, mariadb: MariaDBDatabase, root: str, table: str) -> None:
    """The mirror equals the source table: same columns, same rows (as a multiset)."""
    with mariadb.server.connect(mariadb.name) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT * FROM `{table}`")
        names = [d[0] for d in cur.description]
        source = sorted(tuple(str(v) for v in row) for row in cur.fetchall())
    frame = spark.read.format("delta").load(mirror_uri(root, mariadb.name, table))
    assert frame.columns == names, f"{table}: same columns in the same order"
    mirror = sorted(tuple(str(v) for v in row) for row in frame.collect())
    assert len(mirror) == len(source), f"{table}: {len(mirror)} rows, source {len(source)}"
    assert mirror == source, f"{table}: same rows"


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_schema_change_tools_leave_exact_mirrors_and_no_transient_assets(  # noqa: PLR0917 (pytest passes each fixture as a parameter)
    tool: str,
    spark: SparkSession,
    mariadb: MariaDBDatabase,
    lake_root: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _require(tool, mariadb.server)
    monkeypatch.setenv(PASSWORD_ENV, mariadb.user.password)
    server, db = mariadb.server, mariadb.name
    conf = tmp_path / "conf"
    write_conf(
        conf,
        destination="d",
        server=server,
        user=mariadb.user,
        database=db,
        lake_root=lake_root,
        server_id=4160 if tool == "pt-osc" else 4162,
        extra_platform=sqlite_lease(tmp_path),
    )
    config = load_config(conf)
    assert not config.errors, config.errors
    copied: set[str] = set()
    # a table the change log will know only by its DROP (no definition, no row)
    server.execute("CREATE TABLE gone (id INT PRIMARY KEY)", database=db)
    with _streaming(config, copied):  # pins the start position
        pass
    server.execute(*SCHEMA, database=db)
    values = ", ".join(f"({i}, {i}.25, 'n{i}')" for i in range(1, 301))
    server.execute(
        f"INSERT INTO orders VALUES {values}",
        "INSERT INTO items SELECT id, CONCAT('i', id) FROM orders",
        "INSERT INTO notes SELECT id, note FROM orders",
        "DROP TABLE gone",
        database=db,
    )
    stale: list[CatalogTable] = []  # what a catalog read while a tool runs would list
    with _streaming(config, copied), _Workload(server, db) as load:
        for table, alter in CHANGES:
            command = TOOLS[tool](server, db, table, alter, tmp_path)
            done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
            assert done.returncode == 0, f"{command}\n{(done.stdout + done.stderr)[-3000:]}"
            stale += [CatalogTable(db, name.format(t=table)) for name in TRANSIENT]
        assert load.statements > 0
    assert copied == set(), "no table copied again: the tools' own copies streamed"
    assert DestinationLake.at(lake_root, "d").reread_tables.read_json() is None

    catalog = discover_tables(config, "d")
    assert {t.table for t in catalog.tables} == {*TABLES, "gone"}
    stale_catalog = Catalog("d", (*catalog.tables, *stale))
    for catalogs in (None, {"d": stale_catalog}):
        defs = build_definitions(str(conf), catalogs=catalogs)
        keys = {k for k in defs.resolve_all_asset_keys() if k.path[:2] == ["cdc", "d"]}
        tables = {k.path[-1].removesuffix("_daily_history") for k in keys if len(k.path) == 4}
        assert tables == {*TABLES, "gone"}, keys  # mirrors and daily histories alike

    built = defs.resolve_job_def(MIRRORS_JOB).execute_in_process(
        instance=DagsterInstance.ephemeral(), raise_on_error=False
    )
    assert built.success, [str(e.message) for e in built.all_events if e.is_failure]
    events = {
        e.asset_key.path[-1]: e.metadata
        for e in built.asset_materializations_for_node("cdc_mirrors_d")
    }
    assert set(events) == {*TABLES, "gone"}
    assert events["gone"]["dropped"].value == "dropped"
    root = mirror_root(lake_root, "d")
    for table in TABLES:
        assert "dropped" not in events[table]  # said only of a table that is gone
        _rows(spark, mariadb, root, table)
