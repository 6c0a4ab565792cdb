"""One destination's pipeline end to end: real MariaDB binlog -> ring buffer -> real Delta table."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pymysql
import pytest
from deltalake import DeltaTable

from cdc_platform.cli import main
from cdc_platform.config.instance import InstanceConfig
from cdc_platform.errors import BinlogGapError
from cdc_platform.runtime import DestinationRuntime, RunSummary
from cdc_platform.sink import DeltaChangeLog
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.sink.report import CommitReport
from cdc_platform.sink.term import WriteTerm
from cdc_platform.testing.destinations import PASSWORD_ENV, instance_config, write_conf
from cdc_platform.testing.processes import wait_for
from cdc_platform.testing.replay import has_commits, replay
from tests.conftest import MariaDBDatabase

pytestmark = pytest.mark.integration


def instance(db: MariaDBDatabase, **store: object) -> InstanceConfig:
    return instance_config(db.server, db.user.name, [rf"{db.name}\..*"], server_id=2001, **store)


class Running:
    """The runtime of ``term`` in a background thread, with its commit reports."""

    def __init__(self, term: WriteTerm) -> None:
        self.reports: list[CommitReport] = []
        self.runtime = DestinationRuntime(replace(term, on_commit=self.reports.append))
        self.summary: RunSummary | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.summary = self.runtime.run()

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 60.0) -> None:
        """:func:`wait_for` ``predicate`` while the runtime runs (its end fails the wait)."""

        def met() -> bool:
            if predicate():
                return True
            assert self.thread.is_alive(), f"runtime ended early: {self.summary}"
            return False

        wait_for(met, "the condition", timeout=timeout)

    def stop(self) -> RunSummary:
        self.runtime.request_stop("test done")
        self.thread.join(timeout=60)
        assert self.summary is not None
        return self.summary


@pytest.fixture
def env_password(mariadb: MariaDBDatabase, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PASSWORD_ENV, mariadb.user.password)


def summary_file(uri: str) -> str:
    """The binlog file the change log's checkpoint points into."""
    checkpoint = DeltaChangeLog(uri, "d").recover()
    assert checkpoint is not None
    return checkpoint.resume.file


def rows_of(uri: str) -> list[dict[str, object]]:
    table = DeltaTable(uri).to_pyarrow_table()
    return sorted(table.to_pylist(), key=lambda row: int(row["seq"]))


@pytest.mark.usefixtures("env_password")
def test_changes_land_in_order_with_positions(mariadb: MariaDBDatabase, lake_root: Path) -> None:
    server, db = mariadb.server, mariadb.name
    server.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))", database=db)
    layout = DestinationLake.at(lake_root, "d")
    uri = layout.change_log
    running = Running(WriteTerm("d", instance(mariadb), layout))
    running.wait_for(lambda: has_commits(uri))
    with server.connect(db, autocommit=False) as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b')")
        cur.execute("UPDATE t SET v = 'bb' WHERE id = 2")
        conn.commit()
        cur.execute("INSERT INTO t VALUES (3, 'never')")
        conn.rollback()
        cur.execute("DELETE FROM t WHERE id = 1")
        conn.commit()
    server.execute(
        "ALTER TABLE t ADD COLUMN w INT", "INSERT INTO t VALUES (4, 'd', 40)", database=db
    )
    running.wait_for(lambda: sum(r.rows for r in running.reports) >= 6)
    summary = running.stop()
    assert summary.error is None
    rows = rows_of(uri)
    assert [(r["op"], r["table"]) for r in rows] == [
        ("c", "t"),
        ("c", "t"),
        ("u", "t"),
        ("d", "t"),
        ("ddl", "t"),
        ("c", "t"),
    ]
    assert [r["seq"] for r in rows] == list(range(1, 7))
    first_txn = rows[:3]
    assert len({r["batch_seq"] for r in first_txn}) == 1, "one transaction, one commit"
    assert len({r["gtid"] for r in first_txn}) == 1
    assert json.loads(str(rows[2]["before"])) == {"id": 2, "v": "b"}
    assert json.loads(str(rows[2]["after"])) == {"id": 2, "v": "bb"}
    assert "ADD COLUMN" in str(rows[4]["ddl"])
    assert json.loads(str(rows[5]["after"])) == {"id": 4, "v": "d", "w": 40}
    assert all(r["binlog_file"] and int(r["binlog_pos"]) > 0 for r in rows)
    assert "never" not in json.dumps([r["after"] for r in rows])


@pytest.mark.usefixtures("env_password")
def test_transaction_larger_than_the_buffer_commits_in_chunks(
    mariadb: MariaDBDatabase, lake_root: Path
) -> None:
    server, db = mariadb.server, mariadb.name
    server.execute("CREATE TABLE big (id INT PRIMARY KEY, pad VARCHAR(50))", database=db)
    layout = DestinationLake.at(lake_root, "d")
    uri = layout.change_log
    config = instance(mariadb, buffer_size=16, batch_mode="ITEMSIZE", batch_size=8)
    running = Running(WriteTerm("d", config, layout))
    running.wait_for(lambda: has_commits(uri))
    with server.connect(db, autocommit=False) as conn, conn.cursor() as cur:
        cur.executemany("INSERT INTO big VALUES (%s, 'x')", [(i,) for i in range(100)])
        conn.commit()
    running.wait_for(lambda: sum(r.rows for r in running.reports) >= 100)
    assert running.stop().error is None
    assert any(r.partial for r in running.reports), "the transaction must arrive in chunks"
    rows = rows_of(uri)
    assert len(rows) == 100
    assert len({r["batch_seq"] for r in rows}) > 1
    assert [r["txn_index"] for r in rows] == list(range(100))
    assert len({r["gtid"] for r in rows}) == 1
    # A restart resumes after the last chunk: nothing is committed twice.
    server.execute("INSERT INTO big VALUES (1000, 'after')", database=db)
    summary = DestinationRuntime(WriteTerm("d", config, layout)).run(exit_when_idle_seconds=2)
    assert summary.error is None
    result = replay(uri)
    assert not result.duplicates
    assert len(result.tables[f"{db}.big"]) == 101


@pytest.mark.usefixtures("env_password")
def test_purged_binlog_fails_loudly_and_keeps_the_log(
    mariadb: MariaDBDatabase, lake_root: Path
) -> None:
    server, db = mariadb.server, mariadb.name
    server.execute("CREATE TABLE t (id INT PRIMARY KEY)", database=db)
    layout = DestinationLake.at(lake_root, "d")
    uri = layout.change_log
    running = Running(WriteTerm("d", instance(mariadb), layout))
    running.wait_for(lambda: has_commits(uri))
    server.execute("INSERT INTO t VALUES (1)", database=db)
    running.wait_for(lambda: sum(r.rows for r in running.reports) >= 1)
    running.stop()
    version = DeltaTable(uri).version()
    server.execute("INSERT INTO t VALUES (2)", database=db)
    server.execute("FLUSH BINARY LOGS")
    current = server.query("SHOW MASTER STATUS")[0][0]
    # The server never purges a file a dump thread still reads; earlier tests' killed
    # readers may leave such threads behind until their next write fails. KILL is
    # asynchronous: retry until the threads are gone and the purge took the file.

    def purged() -> bool:
        for (thread,) in server.query(
            "SELECT id FROM information_schema.processlist WHERE command LIKE 'Binlog Dump%'"
        ):
            with contextlib.suppress(pymysql.MySQLError):
                server.execute(f"KILL CONNECTION {int(thread)}")
        server.execute(f"PURGE BINARY LOGS TO '{current}'")
        return str(summary_file(uri)) not in {row[0] for row in server.query("SHOW BINARY LOGS")}

    wait_for(purged, "test setup: the binlog purged", timeout=30, interval=0.2)
    summary = DestinationRuntime(WriteTerm("d", instance(mariadb), layout)).run(
        exit_when_idle_seconds=2
    )
    assert isinstance(summary.error, BinlogGapError)
    assert "purged" in str(summary.error) or "no longer" in str(summary.error)
    assert DeltaTable(uri).version() == version, "a failed start must not touch the change log"


def test_cli_run_and_checkpoint_show(
    mariadb: MariaDBDatabase,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(PASSWORD_ENV, mariadb.user.password)
    conf = tmp_path / "conf"
    write_conf(
        conf,
        destination="cli",
        server=mariadb.server,
        user=mariadb.user,
        database=mariadb.name,
        lake_root=tmp_path / "lake",
    )
    assert main(["checkpoint", "show", "--conf", str(conf), "--destination", "cli"]) == 0
    assert "no checkpoint yet" in capsys.readouterr().out
    assert main(["run", "--conf", str(conf), "--destination", "cli", "--exit-when-idle", "1"]) == 0
    assert main(["checkpoint", "show", "--conf", str(conf), "--destination", "cli"]) == 0
    out = capsys.readouterr().out
    assert "cli: batch 1, epoch 0" in out
    assert "resume at mysql-bin." in out
    assert main(["run", "--conf", str(conf), "--destination", "nope"]) == 2
    assert "no destination 'nope'" in capsys.readouterr().err


@pytest.mark.usefixtures("env_password")
def test_rows_describe_their_table_columns(mariadb: MariaDBDatabase, lake_root: Path) -> None:
    server, db = mariadb.server, mariadb.name
    server.execute(
        "CREATE TABLE typed (id BIGINT UNSIGNED PRIMARY KEY, price DECIMAL(10,2), "
        "name VARCHAR(20), at DATETIME(3), flags SET('a','b'), raw VARBINARY(8))",
        database=db,
    )
    layout = DestinationLake.at(lake_root, "d")
    uri = layout.change_log
    running = Running(WriteTerm("d", instance(mariadb), layout))
    running.wait_for(lambda: has_commits(uri))
    server.execute("INSERT INTO typed VALUES (1, 2.50, 'x', NOW(3), 'a', X'00')", database=db)
    running.wait_for(lambda: sum(r.rows for r in running.reports) >= 1)
    running.stop()
    (row,) = rows_of(uri)
    columns = json.loads(str(row["columns"]))
    assert [(c["name"], c["type"], c["pk"]) for c in columns] == [
        ("id", "bigint", True),
        ("price", "decimal", False),
        ("name", "varchar", False),
        ("at", "datetime", False),
        ("flags", "set", False),
        ("raw", "varbinary", False),
    ]
    assert columns[0]["unsigned"] is True
    assert (columns[1]["precision"], columns[1]["scale"]) == (10, 2)
    assert columns[3]["scale"] == 3
    assert columns[4]["values"] == ["a", "b"]
    assert columns[5]["length"] == 8


@pytest.mark.usefixtures("env_password")
def test_a_crashing_source_thread_ends_the_run_with_an_error(
    mariadb: MariaDBDatabase, lake_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fault injection: a bug in the reader must fail the run, not leave it waiting forever."""

    def broken_lists(self: object) -> Iterator[object]:
        raise RuntimeError("injected bug")
        yield  # pragma: no cover

    monkeypatch.setattr("cdc_platform.source.BinlogSource.event_lists", broken_lists)
    layout = DestinationLake.at(lake_root, "d")
    summary = DestinationRuntime(WriteTerm("d", instance(mariadb), layout)).run()
    assert summary.reason == "failed"
    assert "injected bug" in str(summary.error)
