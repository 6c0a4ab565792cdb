"""Initial snapshot: chunked, watermark-merged with the binlog, resumable after kill -9."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from deltalake import DeltaTable

from cdc_platform.backfill.progress import SnapshotObservers
from cdc_platform.backfill.snapshot import SnapshotProgress, SnapshotRunner
from cdc_platform.config.instance import InstanceConfig, SnapshotSettings
from cdc_platform.runtime import DestinationRuntime
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.sink.term import WriteTerm
from cdc_platform.testing.destinations import (
    PASSWORD_ENV,
    instance_config,
    sqlite_lease,
    write_conf,
)
from cdc_platform.testing.processes import wait_for
from cdc_platform.testing.replay import has_commits, replay
from cdc_platform.testing.workload import Workload, source_rows
from tests.conftest import MariaDBDatabase

pytestmark = pytest.mark.integration


def instance(db: MariaDBDatabase) -> InstanceConfig:
    return instance_config(db.server, db.user.name, [rf"{db.name}\..*"], server_id=2101)


@pytest.fixture
def env_password(mariadb: MariaDBDatabase, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PASSWORD_ENV, mariadb.user.password)


def catch_up(db: MariaDBDatabase, layout: DestinationLake) -> None:
    """The destination's normal run after the snapshot, until it is idle."""
    summary = DestinationRuntime(WriteTerm("d", instance(db), layout)).run(
        exit_when_idle_seconds=1.5
    )
    assert summary.error is None, summary


def assert_replay_equals_source(db: MariaDBDatabase, uri: str, tables: list[str]) -> None:
    result = replay(uri)
    assert result.duplicates == []
    assert result.seq_gaps == []
    # result.problems is not checked: a log that starts after the table had rows holds
    # updates and deletes of rows whose `r` comes later or never (deleted before their chunk
    # was read); replay and mirrors apply them as upserts / no-ops, which is what makes the
    # final state exact (docs/snapshot.md).
    for table in tables:
        expected = source_rows(db.server, db.name, table)
        got = result.tables.get(f"{db.name}.{table}", {})
        assert got == expected, f"{table}: {len(got)} replayed rows vs {len(expected)} in source"


def fill(workload: Workload, rows: int) -> None:
    workload.create_schema()
    while (
        workload.server.query("SELECT COUNT(*) FROM customers", workload.database)[0][0]
        + workload.server.query("SELECT COUNT(*) FROM orders", workload.database)[0][0]
        < rows
    ):
        workload.run_transactions(200)


@pytest.mark.usefixtures("env_password")
def test_snapshot_rows_equal_binlog_rows_for_every_type(
    mariadb: MariaDBDatabase, lake_root: Path
) -> None:
    """Same values, same JSON text: the snapshot's `r` rows equal the binlog's `c` rows."""
    server, db = mariadb.server, mariadb.name
    server.execute(
        """CREATE TABLE t (
            id INT PRIMARY KEY, i8 TINYINT, u64 BIGINT UNSIGNED, d DECIMAL(12,4), f FLOAT,
            g DOUBLE, b BIT(10), dt DATE, dtm DATETIME(3), ts TIMESTAMP(6) NULL, tm TIME(2),
            y YEAR, c CHAR(5), vc VARCHAR(20), tx TEXT, bn BINARY(4), vb VARBINARY(8), bl BLOB,
            e ENUM('a','b','c'), s SET('x','y','z'), j JSON, u UUID, i4 INET4, i6 INET6,
            p POINT, l1 VARCHAR(10) CHARACTER SET latin1
        ) CHARACTER SET utf8mb4""",
        database=db,
    )
    layout = DestinationLake.at(lake_root, "d")
    uri = layout.change_log
    DestinationRuntime(WriteTerm("d", instance(mariadb), layout)).run(exit_when_idle_seconds=0.5)
    server.execute(
        "SET time_zone = '+02:00'",
        """INSERT INTO t VALUES
        (1, -128, 18446744073709551615, -12.5000, 1.1, 3.141592653589793, b'0000000101',
         '2024-02-29', '2024-02-29 13:14:15.123', '2024-06-01 08:30:00.250000', '-01:00:00.25',
         2024, 'ab  ', 'héllo 😀', REPEAT('t', 300), X'00FF0000', X'DEADBEEF', X'',
         'c', 'x,z', '{"a": [1, 2.5, null, true]}', '123e4567-e89b-12d3-a456-426614174000',
         '10.0.0.1', '::ffff:1.2.3.4', ST_GeomFromText('POINT(1 2)', 4326), 'é'),
        (2, NULL, 0, 0, -0.000123, 1e300, b'0', '1000-01-01', '9999-12-31 23:59:59.999',
         NULL, '838:59:59', 1901, '', '', '', X'00000000', NULL, NULL, NULL, '', '"str"',
         NULL, NULL, '2001:db8::ff00:42:8329', NULL, NULL),
        (3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
         NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)""",
        database=db,
    )
    catch_up(mariadb, layout)
    runner = SnapshotRunner(
        WriteTerm("d", instance(mariadb), layout),
        DestinationLake.at(lake_root, "d").snapshot_state,
        tables=[f"{db}.t"],
        settings=SnapshotSettings(chunk_size=2),
    )
    result = runner.run()
    assert result.rows_written == 3
    assert result.chunks == 2
    rows = DeltaTable(uri).to_pyarrow_table().sort_by("seq").to_pylist()
    inserts = {r["pk"]: r for r in rows if r["op"] == "c"}
    snapshots = {r["pk"]: r for r in rows if r["op"] == "r"}
    assert sorted(inserts) == sorted(snapshots)
    for pk, row in snapshots.items():
        assert row["after"] == inserts[pk]["after"], pk
        assert json.loads(row["columns"]) == json.loads(inserts[pk]["columns"])
    assert not DestinationLake.at(lake_root, "d").snapshot_state.exists()


@pytest.mark.usefixtures("env_password")
def test_snapshot_under_workload_replays_to_source(
    mariadb: MariaDBDatabase, lake_root: Path
) -> None:
    """A new destination snapshots while the workload keeps writing; replay == source."""
    workload = Workload(mariadb.server, mariadb.name, seed=7)
    fill(workload, 3000)
    layout = DestinationLake.at(lake_root, "d")
    uri = layout.change_log
    progress: list[SnapshotProgress] = []
    workload.start(rate_per_second=150)
    try:
        result = SnapshotRunner(
            WriteTerm("d", instance(mariadb), layout),
            DestinationLake.at(lake_root, "d").snapshot_state,
            settings=SnapshotSettings(chunk_size=250),
            observers=SnapshotObservers(on_progress=progress.append),
        ).run()
    finally:
        workload.stop()
    assert workload.stats.committed > 0
    assert result.tables == [f"{mariadb.name}.customers", f"{mariadb.name}.orders"]
    assert result.chunks >= 10
    assert result.streamed_events > 0, "the workload's changes were streamed in between chunks"
    assert progress
    assert progress[-1].rows_read >= progress[-1].rows_written
    catch_up(mariadb, layout)
    assert_replay_equals_source(mariadb, uri, ["customers", "orders"])


@pytest.mark.usefixtures("env_password")
def test_snapshot_resumes_after_kill_9(mariadb: MariaDBDatabase, lake_root: Path) -> None:
    """kill -9 mid-snapshot; the rerun continues from the last committed chunk, exactly."""
    workload = Workload(mariadb.server, mariadb.name, seed=11)
    fill(workload, 3000)
    conf = lake_root.parent / "conf"
    write_conf(
        conf,
        destination="d",
        server=mariadb.server,
        user=mariadb.user,
        database=mariadb.name,
        lake_root=lake_root,
    )
    layout = DestinationLake.at(lake_root, "d")
    uri = layout.change_log
    state = DestinationLake.at(lake_root, "d").snapshot_state
    command = [
        sys.executable,
        "-m",
        "cdc_platform.cli",
        "snapshot",
        "--conf",
        str(conf),
        "--destination",
        "d",
        "--chunk-size",
        "100",
    ]
    env = {**os.environ, PASSWORD_ENV: mariadb.user.password}
    workload.start(rate_per_second=100)
    try:
        proc = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)

        def six_commits() -> bool:
            if has_commits(uri) and len(DeltaTable(uri).history()) >= 6:
                return True
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            return False

        wait_for(six_commits, "six commits of the snapshot")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        assert state.exists(), "progress was kept"
        killed_rows = _snapshot_rows(uri)
        assert 0 < killed_rows < 3000
        second = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=300, check=False
        )
    finally:
        workload.stop()
    assert second.returncode == 0, second.stderr
    assert "resumed and finished" in second.stdout
    assert "rows/s" in second.stderr, "the progress lines"
    assert not state.exists()
    catch_up(mariadb, layout)
    assert_replay_equals_source(mariadb, uri, ["customers", "orders"])
    # Resumed, not restarted: no key was snapshotted twice (a chunk whose commit landed
    # before the progress file said so counts as done, one that did not is read again).
    rows = DeltaTable(uri).to_pyarrow_table(columns=["op", "table", "pk"]).to_pylist()
    keys = [(r["table"], r["pk"]) for r in rows if r["op"] == "r"]
    assert len(keys) == len(set(keys))


def _snapshot_rows(uri: str) -> int:
    table = DeltaTable(uri).to_pyarrow_table(columns=["op"])
    return sum(1 for op in table.column("op").to_pylist() if op == "r")


@pytest.mark.usefixtures("env_password")
def test_table_without_primary_key_is_copied_whole(
    mariadb: MariaDBDatabase, lake_root: Path
) -> None:
    """No key to page by: one consistent read, after a truncate row that replaces what the
    change log said of the table before (duplicates are rows of their own)."""
    mariadb.server.execute(
        "CREATE TABLE nokey (a INT, b TEXT)",
        "INSERT INTO nokey VALUES (1, 'x'), (1, 'x'), (2, NULL)",
        database=mariadb.name,
    )
    layout = DestinationLake.at(lake_root, "d")
    uri = layout.change_log
    runner = SnapshotRunner(
        WriteTerm("d", instance(mariadb), layout), DestinationLake.at(lake_root, "d").snapshot_state
    )
    result = runner.run()
    assert result.per_table == {f"{mariadb.name}.nokey": 3}
    rows = sorted(DeltaTable(uri).to_pyarrow_table().to_pylist(), key=lambda r: r["seq"])
    mine = [r for r in rows if r["table"] == "nokey"]
    assert [r["op"] for r in mine] == ["ddl", "r", "r", "r"]
    assert mine[0]["ddl"].startswith("TRUNCATE TABLE")
    assert sorted(r["after"] for r in mine[1:]) == [
        '{"a":1,"b":"x"}',
        '{"a":1,"b":"x"}',
        '{"a":2,"b":null}',
    ]


@pytest.mark.usefixtures("env_password")
def test_composite_key_chunks_cover_every_row_once(
    mariadb: MariaDBDatabase, lake_root: Path
) -> None:
    """Keyset paging on (text, int, binary) keys: every row exactly once, in key order."""
    server, db = mariadb.server, mariadb.name
    server.execute(
        "CREATE TABLE ck (a VARCHAR(8), b INT, c VARBINARY(4), v INT, PRIMARY KEY (a, b, c)) "
        "CHARACTER SET utf8mb4",
        "INSERT INTO ck SELECT CONCAT('k', seq % 7), seq % 5, UNHEX(LPAD(HEX(seq), 4, '0')), seq "
        "FROM seq_1_to_500",
        database=db,
    )
    layout = DestinationLake.at(lake_root, "d")
    uri = layout.change_log
    result = SnapshotRunner(
        WriteTerm("d", instance(mariadb), layout),
        DestinationLake.at(lake_root, "d").snapshot_state,
        tables=[f"{db}.ck"],
        settings=SnapshotSettings(chunk_size=37),
    ).run()
    assert result.rows_written == 500
    assert result.chunks == 14
    rows = DeltaTable(uri).to_pyarrow_table(columns=["op", "after"]).to_pylist()
    values = sorted(json.loads(r["after"])["v"] for r in rows if r["op"] == "r")
    assert values == list(range(1, 501))


@pytest.mark.usefixtures("env_password")
def test_ddl_during_snapshot_rereads_the_chunk(mariadb: MariaDBDatabase, lake_root: Path) -> None:
    """A DDL on the table inside a chunk's segment: the chunk is read again, new shape.

    The DDL runs when the first chunk is committed. The second chunk's read runs ahead of that
    commit: when it read the table before the DDL, it lands before the DDL in the old shape and
    the third chunk's segment holds the DDL; otherwise the second chunk's does. Either way that
    chunk is read again, and every row is in the log once, in the shape of its place."""
    server, db = mariadb.server, mariadb.name
    server.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, v INT)",
        "INSERT INTO t SELECT seq, seq FROM seq_1_to_300",
        database=db,
    )
    layout = DestinationLake.at(lake_root, "d")
    uri = layout.change_log

    def alter_once(progress: SnapshotProgress) -> None:
        if progress.chunks == 1:
            server.execute("ALTER TABLE t ADD COLUMN w INT NOT NULL DEFAULT 7", database=db)

    result = SnapshotRunner(
        WriteTerm("d", instance(mariadb), layout),
        DestinationLake.at(lake_root, "d").snapshot_state,
        tables=[f"{db}.t"],
        settings=SnapshotSettings(chunk_size=100),
        observers=SnapshotObservers(on_progress=alter_once),
    ).run()
    assert result.rows_written == 300
    assert result.chunks == 5, "4 chunks plus the one read again"
    rows = DeltaTable(uri).to_pyarrow_table().sort_by("seq").to_pylist()
    ddl_seq = next(r["seq"] for r in rows if r["op"] == "ddl")
    after_ddl = [json.loads(r["after"]) for r in rows if r["op"] == "r" and r["seq"] > ddl_seq]
    before_ddl = [json.loads(r["after"]) for r in rows if r["op"] == "r" and r["seq"] < ddl_seq]
    split = len(before_ddl)
    assert split in (100, 200), split
    assert [r["id"] for r in before_ddl] == list(range(1, split + 1))
    assert all("w" not in r for r in before_ddl)
    assert [r["id"] for r in after_ddl] == list(range(split + 1, 301))
    assert all(r["w"] == 7 for r in after_ddl)


def test_destination_run_snapshots_new_tables_itself(
    mariadb: MariaDBDatabase, lake_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`snapshot.new_tables`: the lease holder copies existing rows at its first start while
    the workload writes, and later a table the filters start to match; nothing twice."""
    from cdc_platform.config import load_config  # noqa: PLC0415 (this test's subject, imported where it is used)
    from cdc_platform.runtime.supervised import supervised_destination  # noqa: PLC0415 (this test's subject, imported where it is used)

    monkeypatch.setenv(PASSWORD_ENV, mariadb.user.password)
    workload = Workload(mariadb.server, mariadb.name, seed=11)
    fill(workload, 2500)
    conf = tmp_path / "conf"
    write_conf(
        conf,
        destination="d",
        server=mariadb.server,
        user=mariadb.user,
        database=mariadb.name,
        lake_root=lake_root,
        server_id=2111,
        extra_platform=sqlite_lease(tmp_path),
    )
    instance_file = conf / "destinations" / "d" / "instance.yaml"
    text = instance_file.read_text()
    only_customers = text.replace(
        f"include_tables: ['{mariadb.name}\\..*']",
        f"include_tables: ['{mariadb.name}\\.customers']",
    )
    assert only_customers != text
    instance_file.write_text(only_customers + "snapshot:\n  new_tables: true\n  chunk_size: 150\n")

    def run_once(with_workload: bool) -> list[str]:
        config = load_config(conf)
        assert not config.errors, config.errors
        seen: list[str] = []
        with supervised_destination(
            config, config.destinations["d"], on_snapshot_progress=lambda p: seen.append(p.table)
        ) as supervisor:
            if with_workload:
                workload.start(rate_per_second=100)
            try:
                summary = supervisor.run(exit_when_idle_seconds=1.5) if not with_workload else None
                if with_workload:
                    done = threading.Thread(
                        target=lambda: supervisor.run(exit_when_idle_seconds=1.5), daemon=True
                    )
                    done.start()
                    wait_for(lambda: len(seen) >= 3, "three progress reports")
                    workload.stop()
                    done.join(timeout=120)
                    assert not done.is_alive()
                else:
                    assert summary is not None
                    assert summary.error is None, summary
            finally:
                workload.stop()
        return seen

    first = run_once(with_workload=True)
    assert set(first) == {f"{mariadb.name}.customers"}
    assert len(first) >= 3  # several chunks, the workload writing in between
    assert workload.stats.committed > 0
    uri = str(lake_root / "d" / "changes")
    assert_replay_equals_source(mariadb, uri, ["customers"])
    assert f"{mariadb.name}.orders" not in replay(uri).tables
    recorded = DestinationLake.at(lake_root, "d").captured_tables.read_json()["tables"]
    assert recorded == [f"{mariadb.name}.customers"]

    # the filters now match orders too: only orders is snapshotted at the next start
    instance_file.write_text(instance_file.read_text().replace("\\.customers']", "\\..*']"))
    second = run_once(with_workload=False)
    assert set(second) == {f"{mariadb.name}.orders"}
    assert_replay_equals_source(mariadb, uri, ["customers", "orders"])
    third = run_once(with_workload=False)
    assert third == []  # nothing new: nothing copied again


@pytest.mark.usefixtures("env_password")
def test_chunks_sized_by_time_grow_while_they_are_fast(
    mariadb: MariaDBDatabase, lake_root: Path
) -> None:
    """Without a fixed chunk size each chunk's rows follow the time the last one took (a
    fake clock: every chunk seems to take 1 ms, so each is twice the one before)."""
    server, db = mariadb.server, mariadb.name
    server.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, v INT)",
        "INSERT INTO t SELECT seq, seq * 7 FROM seq_1_to_13000",
        database=db,
    )
    ticks = iter(range(10**6))
    progress: list[SnapshotProgress] = []
    layout = DestinationLake.at(lake_root, "d")
    uri = layout.change_log
    result = SnapshotRunner(
        WriteTerm("d", instance(mariadb), layout),
        DestinationLake.at(lake_root, "d").snapshot_state,
        tables=[f"{db}.t"],
        observers=SnapshotObservers(on_progress=progress.append, clock=lambda: next(ticks) / 1000),
    ).run()
    assert [p.chunk_rows for p in progress] == [2000, 4000, 7000]
    assert result.rows_written == 13000
    catch_up(mariadb, layout)
    assert_replay_equals_source(mariadb, uri, ["t"])
