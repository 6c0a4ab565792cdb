"""Snapshot faults: vanished tables, tables created while streaming, a large binlog backlog,
identifiers that need quoting, a lease lost while a chunk read hangs on the source."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pymysql
import pytest
from deltalake import DeltaTable

from cdc_platform.backfill.new_tables import snapshot_new_tables
from cdc_platform.backfill.progress import SnapshotObservers
from cdc_platform.backfill.snapshot import (
    SnapshotProgress,
    SnapshotResult,
    SnapshotRunner,
)
from cdc_platform.backfill.stop import SideWorkStop
from cdc_platform.config import load_config
from cdc_platform.config.instance import InstanceConfig, SnapshotSettings
from cdc_platform.coordination.factory import open_lease
from cdc_platform.coordination.lease import take_lease
from cdc_platform.errors import LeaseLostError
from cdc_platform.runtime import DestinationRuntime
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.sink.report import CommitReport
from cdc_platform.sink.term import WriteTerm
from cdc_platform.testing.destinations import (
    PASSWORD_ENV,
    instance_config,
    sqlite_lease,
    write_conf,
)
from cdc_platform.testing.processes import wait_for
from cdc_platform.testing.replay import RowKey, replay
from tests.conftest import MariaDBDatabase

pytestmark = pytest.mark.integration


def instance(db: MariaDBDatabase, *, chunk_size: int = 100) -> InstanceConfig:
    config = instance_config(db.server, db.user.name, [rf"{db.name}\..*"], server_id=2131)
    return config.model_copy(
        update={"snapshot": SnapshotSettings(new_tables=True, chunk_size=chunk_size)}
    )


@pytest.fixture(autouse=True)
def env_password(mariadb: MariaDBDatabase, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PASSWORD_ENV, mariadb.user.password)


def waiting_on_a_lock(db: MariaDBDatabase) -> bool:
    """Whether a statement on the test's database is blocked on a table lock (the server says;
    the reader's session has no default database, its statement names it)."""
    rows = db.server.query(
        "SELECT COUNT(*) FROM information_schema.PROCESSLIST "
        f"WHERE STATE LIKE 'Waiting for table%lock' AND INFO LIKE '%`{db.name}`%'"
    )
    return int(rows[0][0]) > 0


def stream(db: MariaDBDatabase, layout: DestinationLake) -> None:
    """The destination's normal run until it is idle."""
    summary = DestinationRuntime(WriteTerm("d", instance(db), layout)).run(
        exit_when_idle_seconds=1.5
    )
    assert summary.error is None, summary


def new_tables(
    db: MariaDBDatabase,
    lake_root: Path,
    *,
    stop_after_chunks: int | None = None,
    on_progress: Callable[[SnapshotProgress], None] | None = None,
) -> SnapshotResult | None:
    """One term's automatic snapshot (what the supervisor runs before it streams)."""
    runners: list[SnapshotRunner | None] = []

    def progress(p: SnapshotProgress) -> None:
        if on_progress is not None:
            on_progress(p)
        if stop_after_chunks is not None and p.chunks >= stop_after_chunks:
            runner = runners[-1]
            assert runner is not None
            runner.request_stop()

    return snapshot_new_tables(
        WriteTerm("d", instance(db), DestinationLake.at(lake_root, "d"), epoch=0),
        on_progress=progress,
        on_runner=runners.append,
    )


def table_rows(db: MariaDBDatabase, table: str, key: list[str]) -> dict[RowKey, dict[str, Any]]:
    """A table's rows keyed like replay (any identifiers)."""
    quoted = "`" + table.replace("`", "``") + "`"
    with db.server.connect(db.name) as conn, conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute(f"SELECT * FROM {quoted}")
        rows = cur.fetchall()
    return {tuple((k, row[k]) for k in key): dict(row) for row in rows}


def r_keys(uri: str, table: str) -> list[str]:
    rows = DeltaTable(uri).to_pyarrow_table(columns=["op", "table", "pk"]).to_pylist()
    return [r["pk"] for r in rows if r["op"] == "r" and r["table"] == table]


def assert_exact(db: MariaDBDatabase, uri: str, tables: dict[str, list[str]]) -> None:
    result = replay(uri)
    assert result.duplicates == []
    assert result.seq_gaps == []
    for table, key in tables.items():
        expected = table_rows(db, table, key)
        got = result.tables.get(f"{db.name}.{table}", {})
        assert got == expected, f"{table}: {len(got)} replayed rows vs {len(expected)} in source"


def two_tables(db: MariaDBDatabase) -> None:
    db.server.execute(
        "CREATE TABLE t1 (id INT PRIMARY KEY, v INT)",
        "INSERT INTO t1 SELECT seq, seq FROM seq_1_to_350",
        "CREATE TABLE t2 (id INT PRIMARY KEY, v INT)",
        "INSERT INTO t2 SELECT seq, seq FROM seq_1_to_250",
        database=db.name,
    )


# -- a table that vanishes while its snapshot is pending -------------------------------------

_FAULTS = {
    "dropped": ("DROP TABLE t1", "does not exist"),
    "renamed": ("RENAME TABLE t1 TO t1_renamed", "does not exist"),
    "key_dropped": ("ALTER TABLE t1 DROP PRIMARY KEY", None),  # then copied whole
}


@pytest.mark.parametrize("fault", sorted(_FAULTS))
def test_interrupted_snapshot_of_a_vanished_table_ends_and_the_stream_goes_on(
    mariadb: MariaDBDatabase, lake_root: Path, fault: str
) -> None:
    """Stopped after one chunk of t1; t1 is then dropped / renamed / loses its key. The next
    start ends t1's snapshot with a reason, copies t2 (and the renamed table), and streams."""
    db = mariadb
    two_tables(db)
    layout = DestinationLake.at(lake_root, "d")
    uri = layout.change_log
    new_tables(db, lake_root, stop_after_chunks=1)
    assert DestinationLake.at(lake_root, "d").snapshot_state.exists(), (
        "the snapshot was interrupted"
    )
    statement, reason = _FAULTS[fault]
    db.server.execute(statement, database=db.name)

    result = new_tables(db, lake_root)  # wedged here before: SnapshotError at every start
    assert result is not None
    assert not DestinationLake.at(lake_root, "d").snapshot_state.exists()
    record = DestinationLake.at(lake_root, "d").captured_tables.read_json()
    if reason is None:  # without its key, t1 is copied in one consistent read instead
        assert f"{db.name}.t1" not in record["ended"]
        assert result.per_table[f"{db.name}.t1"] == 350
    else:
        assert reason in record["ended"][f"{db.name}.t1"]
    db.server.execute("INSERT INTO t2 VALUES (1000, 1)", database=db.name)
    stream(db, layout)
    expected = {"t2": ["id"]}
    if fault == "renamed":
        expected["t1_renamed"] = ["id"]
    assert_exact(db, uri, expected)
    assert new_tables(db, lake_root) is None, "nothing left to copy at the next start"


def test_table_dropped_between_chunks_ends_its_snapshot(
    mariadb: MariaDBDatabase, lake_root: Path
) -> None:
    """A table dropped while its snapshot runs: no raw driver error, the next table is copied."""
    db = mariadb
    two_tables(db)
    layout = DestinationLake.at(lake_root, "d")
    uri = layout.change_log

    def drop_t1(progress: SnapshotProgress) -> None:
        if progress.table == f"{db.name}.t1" and progress.chunks == 1:
            db.server.execute("DROP TABLE t1", database=db.name)

    result = new_tables(db, lake_root, on_progress=drop_t1)
    assert result is not None
    assert "does not exist" in result.ended[f"{db.name}.t1"]
    stream(db, layout)
    assert_exact(db, uri, {"t2": ["id"]})


# -- tables created while the destination streams ---------------------------------------------


def test_table_created_while_streaming_is_not_snapshotted_at_later_terms(
    mariadb: MariaDBDatabase, lake_root: Path
) -> None:
    """Its CREATE TABLE and every row are in the change log already: no `r` rows later."""
    db = mariadb
    two_tables(db)
    layout = DestinationLake.at(lake_root, "d")
    uri = layout.change_log
    new_tables(db, lake_root)  # term 1: copies t1, t2
    db.server.execute(
        "CREATE TABLE fresh (id INT PRIMARY KEY, v INT)",
        "INSERT INTO fresh SELECT seq, seq FROM seq_1_to_120",
        database=db.name,
    )
    stream(db, layout)  # term 1 streams: the CREATE and the rows are captured
    for _term in range(2):
        new_tables(db, lake_root)
        db.server.execute("UPDATE fresh SET v = v + 1 WHERE id < 10", database=db.name)
        stream(db, layout)
    assert r_keys(uri, "fresh") == []
    assert_exact(db, uri, {"t1": ["id"], "t2": ["id"], "fresh": ["id"]})


def test_tables_done_before_an_abandoned_snapshot_are_not_copied_again(
    mariadb: MariaDBDatabase, lake_root: Path
) -> None:
    """Each finished table is recorded when it finishes, not when the whole snapshot ends."""
    db = mariadb
    two_tables(db)
    layout = DestinationLake.at(lake_root, "d")
    uri = layout.change_log
    snapshot_state = DestinationLake.at(lake_root, "d").snapshot_state
    assert _run_until(db, lake_root, table=f"{db.name}.t2", chunks=1), "stopped inside t2"
    assert snapshot_state.exists()
    snapshot_state.delete()  # the operator abandons the snapshot (docs/snapshot.md)
    new_tables(db, lake_root)
    keys = r_keys(uri, "t1")
    assert len(keys) == len(set(keys)) == 350, "t1 was not copied a second time"
    stream(db, layout)
    assert_exact(db, uri, {"t1": ["id"], "t2": ["id"]})


def _run_until(db: MariaDBDatabase, lake_root: Path, *, table: str, chunks: int) -> bool:
    runners: list[SnapshotRunner | None] = []
    stopped: list[bool] = []

    def progress(p: SnapshotProgress) -> None:
        if p.table == table and p.chunks >= chunks:
            runner = runners[-1]
            assert runner is not None
            runner.request_stop()
            stopped.append(True)

    snapshot_new_tables(
        WriteTerm("d", instance(db), DestinationLake.at(lake_root, "d"), epoch=0),
        on_progress=progress,
        on_runner=runners.append,
    )
    return bool(stopped)


# -- a binlog backlog larger than the segment cap ----------------------------------------------


def test_backlog_larger_than_the_segment_cap_is_committed_in_bounded_parts(
    mariadb: MariaDBDatabase, lake_root: Path
) -> None:
    """3,000 transactions wait in the binlog when the snapshot starts; with a cap of 200
    events no commit holds more than the cap plus one transaction, and the log is exact."""
    db = mariadb
    db.server.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, v INT)",
        "INSERT INTO t SELECT seq, seq FROM seq_1_to_500",
        database=db.name,
    )
    layout = DestinationLake.at(lake_root, "d")
    uri = layout.change_log
    stream(db, layout)  # the checkpoint: the backlog below is after it
    statements = [f"UPDATE t SET v = v + 1 WHERE id = {1 + i % 500}" for i in range(3000)]
    statements += ["INSERT INTO t SELECT seq, seq FROM seq_501_to_700"]  # one 200-row txn
    db.server.execute(*statements, database=db.name)
    commits: list[CommitReport] = []
    result = SnapshotRunner(
        WriteTerm("d", instance(db), layout, on_commit=commits.append),
        DestinationLake.at(lake_root, "d").snapshot_state,
        tables=[f"{db.name}.t"],
        settings=SnapshotSettings(chunk_size=150, segment_events=200),
    ).run()
    assert result.streamed_events >= 3000
    largest_txn = 201  # 200 rows and a COMMIT, kept whole
    assert max(c.events for c in commits) <= 200 + largest_txn + 150
    assert len(commits) > 3000 * 2 // 400, "the backlog was committed in parts"
    stream(db, layout)
    keys = r_keys(uri, "t")
    assert len(keys) == len(set(keys))
    assert_exact(db, uri, {"t": ["id"]})


# -- identifiers that need quoting -------------------------------------------------------------


def test_identifiers_with_backticks_dots_and_spaces(
    mariadb: MariaDBDatabase, lake_root: Path
) -> None:
    """A table named we`ird.t ab with columns id`x, a.b, sp ace, 50%: snapshotted in several
    chunks, then streamed; replay equals the source."""
    db = mariadb
    db.server.execute(
        "CREATE TABLE `we``ird.t ab` "
        "(`id``x` INT PRIMARY KEY, `a.b` VARCHAR(10), `sp ace` INT, `50%` INT)",
        "INSERT INTO `we``ird.t ab` SELECT seq, CONCAT('v', seq), seq, -seq FROM seq_1_to_95",
        database=db.name,
    )
    layout = DestinationLake.at(lake_root, "d")
    uri = layout.change_log
    result = SnapshotRunner(
        WriteTerm("d", instance(db), layout),
        DestinationLake.at(lake_root, "d").snapshot_state,
        tables=[f"{db.name}.we`ird.t ab"],
        settings=SnapshotSettings(chunk_size=20),
    ).run()
    assert result.rows_written == 95
    assert result.chunks == 5
    db.server.execute(
        "UPDATE `we``ird.t ab` SET `sp ace` = -1 WHERE `id``x` < 5",
        "DELETE FROM `we``ird.t ab` WHERE `id``x` = 50",
        "INSERT INTO `we``ird.t ab` VALUES (1000, 'new', 0, 0)",
        database=db.name,
    )
    stream(db, layout)
    assert_exact(db, uri, {"we`ird.t ab": ["id`x"]})


# -- the lease lost while a chunk read hangs on the source -------------------------------------


def test_a_lost_lease_interrupts_a_snapshot_blocked_on_the_source(
    mariadb: MariaDBDatabase, lake_root: Path, tmp_path: Path
) -> None:
    """A chunk read that hangs on the source (a table lock held by another connection; a
    partition looks the same to the reader) ends as soon as the lease goes: LeaseLostError
    within the lease timeout, not at the read timeout, and no commit starts after the loss.

    A commit already past its gate when the loss is heard may still land (the chunk before
    the blocked read commits while that read runs ahead; on a slow machine that commit can
    outlast the lease's next renewal): its epoch was valid when it started, and a new
    holder's higher epoch fences it. What must never happen is a commit passing its gate
    once the loss is known, which is what this test records at the gate."""
    db = mariadb
    expiry = 3.0
    conf = tmp_path / "conf"
    write_conf(
        conf,
        destination="d",
        server=db.server,
        user=db.user,
        database=db.name,
        lake_root=lake_root,
        server_id=2133,
        extra_platform=sqlite_lease(tmp_path, renew_interval_seconds=0.2, expiry_seconds=expiry),
    )
    config = load_config(conf)
    assert not config.errors, config.errors
    db.server.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, v INT)",
        "INSERT INTO t SELECT seq, seq FROM seq_1_to_500",
        database=db.name,
    )
    layout = DestinationLake.of(config, "d")
    lease = open_lease(config.platform, config.conf_dir, "d")
    lease.start()
    locker = db.server.connect(db.name)
    locked = threading.Event()
    lost_at: list[float] = []
    commits: list[CommitReport] = []
    passed_after_loss: list[bool] = []  # per gate passed (twice a commit): loss heard?
    outcome: list[BaseException | object] = []
    try:
        term = take_lease(
            lease,
            WriteTerm("d", config.destinations["d"].config, layout, on_commit=commits.append),
            timeout=10,
            doing="the snapshot",
        )
        assert term is not None
        lease_gate = term.commit_gate
        assert lease_gate is not None

        def gate() -> None:
            heard = bool(lost_at)  # read before the lease's own check, which raises once lost
            lease_gate()
            passed_after_loss.append(heard)

        term = replace(term, commit_gate=gate)
        stop = SideWorkStop("d", term.epoch, work="snapshot")

        def on_lost(error: LeaseLostError) -> None:
            lost_at.append(time.monotonic())
            stop.request_stop(f"lease lost: {error.reason}")

        lease.on_lost(on_lost)

        def lock_after_the_first_chunk(p: SnapshotProgress) -> None:
            if p.chunks == 1:
                with locker.cursor() as cur:
                    cur.execute("LOCK TABLES t WRITE")
                locked.set()

        runner = SnapshotRunner(
            term,
            DestinationLake.at(lake_root, "d").snapshot_state,
            tables=[f"{db.name}.t"],
            settings=SnapshotSettings(chunk_size=100),
            observers=SnapshotObservers(on_progress=lock_after_the_first_chunk),
            stop=stop,
        )

        def run() -> None:
            try:
                outcome.append(runner.run())
            except BaseException as exc:  # handed to the test thread
                outcome.append(exc)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        assert locked.wait(30), "the first chunk was committed"
        wait_for(
            lambda: waiting_on_a_lock(db),
            "the next chunk's read to wait for the table lock",
            timeout=30,
        )
        operator = open_lease(config.platform, config.conf_dir, "d", address="operator")
        try:
            assert operator.request_release() is not None
        finally:
            operator.close()
        thread.join(timeout=30)
        ended_at = time.monotonic()
        assert not thread.is_alive(), "the snapshot still waits on the locked table"
    finally:
        locker.close()  # ends the lock
        lease.close()
    assert lost_at, "the lease was lost"
    assert ended_at - lost_at[0] < expiry, "ended within the lease timeout"
    assert len(outcome) == 1
    assert isinstance(outcome[0], LeaseLostError), outcome
    assert "snapshot interrupted: lease lost" in str(outcome[0])
    assert commits, "the first chunk was committed"
    assert len(passed_after_loss) >= len(commits), "every commit passed the gate"
    assert not any(passed_after_loss), "no commit passed its gate after the loss was heard"
    assert DestinationLake.at(lake_root, "d").snapshot_state.exists(), (
        "progress kept: a rerun continues"
    )
