"""`start:` of a destination without a checkpoint, on a private MariaDB whose binlogs the
tests may rotate and purge: every mode, every bad start, the default `initial` over a busy
database, and a changed start reported instead of applied."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdc_platform.backfill.snapshot import SnapshotProgress
from cdc_platform.cli import main
from cdc_platform.config.instance import InstanceConfig
from cdc_platform.config.start import StartConfig
from cdc_platform.errors import StartPositionError
from cdc_platform.runtime import DestinationRuntime
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.sink.lake_files import LakeFile
from cdc_platform.sink.snapshot_progress import TableProgress, read_snapshot_progress
from cdc_platform.sink.start_record import StartRecord, start_drift
from cdc_platform.sink.term import WriteTerm
from cdc_platform.source.binlog_server import BinlogServer
from cdc_platform.source.stream.start_position import find_time, resolve_start, server_binlog
from cdc_platform.testing.destinations import (
    PASSWORD_ENV,
    instance_config,
    sqlite_lease,
    write_conf,
)
from cdc_platform.testing.mariadb import MariaDBServer, ReplicationUser
from cdc_platform.testing.processes import wait_for
from cdc_platform.testing.replay import replay
from cdc_platform.testing.workload import Workload, source_rows
from tests.conftest import MariaDBDatabase

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def own_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MariaDBServer]:
    """A MariaDB of this module alone: its binlogs are rotated and purged here."""
    server = MariaDBServer(tmp_path_factory.mktemp("mariadb-start"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def db(
    own_server: MariaDBServer, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[MariaDBDatabase]:
    """A fresh database whose history starts in a fresh binlog (older binlogs purged)."""
    user = own_server.create_replication_user("cdc", "start-modes-pw")
    monkeypatch.setenv(PASSWORD_ENV, user.password)
    fresh_binlog(own_server)
    name = f"s_{request.node.name[5:30]}".replace("[", "_").replace("]", "_")
    with own_server.database(name):
        yield MariaDBDatabase(own_server, name, ReplicationUser(user.name, user.password))


def fresh_binlog(server: MariaDBServer) -> str:
    """Rotate and purge every older binlog. MariaDB keeps a file until InnoDB has
    checkpointed its transactions (a Binlog_checkpoint in the next file): poll until it went."""
    server.execute("FLUSH BINARY LOGS")
    newest = str(server.query("SHOW MASTER STATUS")[0][0])

    def purged() -> bool:
        server.execute(f"PURGE BINARY LOGS TO '{newest}'")
        return [str(row[0]) for row in server.query("SHOW BINARY LOGS")] == [newest]

    wait_for(
        purged,
        f"every binlog before {newest} purged",
        timeout=30,
        diagnose=lambda: str(server.query("SHOW BINARY LOGS")),
    )
    return newest


def config(db: MariaDBDatabase, start: StartConfig) -> InstanceConfig:
    return instance_config(
        db.server, db.user.name, [rf"{db.name}\..*"], server_id=3301, start=start
    )


def run(db: MariaDBDatabase, lake_root: Path, start: StartConfig) -> dict[object, object]:
    """One run until idle from a new change log; the replayed rows of table t."""
    layout = DestinationLake.at(lake_root, "d")
    uri = layout.change_log
    summary = DestinationRuntime(WriteTerm("d", config(db, start), layout)).run(
        exit_when_idle_seconds=1.0
    )
    assert summary.error is None, summary
    return dict(replay(uri).tables.get(f"{db.name}.t", {}))


def ids(rows: dict[object, object]) -> list[int]:
    return sorted(int(row["id"]) for row in rows.values())


def insert(db: MariaDBDatabase, *values: int, at: int | None = None) -> None:
    stamp = [f"SET timestamp = {at}"] if at is not None else []
    db.server.execute(*stamp, *(f"INSERT INTO t VALUES ({v})" for v in values), database=db.name)


def status(db: MariaDBDatabase) -> tuple[str, int]:
    file, pos, *_ = db.server.query("SHOW MASTER STATUS")[0]
    return str(file), int(pos)


def binlog_server(db: MariaDBDatabase) -> BinlogServer:
    return BinlogServer(config(db, StartConfig(mode="latest")).source, db.user.password)


def test_latest_starts_at_the_current_end(db: MariaDBDatabase, lake_root: Path) -> None:
    db.server.execute("CREATE TABLE t (id INT PRIMARY KEY)", database=db.name)
    insert(db, 1, 2)
    assert ids(run(db, lake_root, StartConfig(mode="latest"))) == []
    record = StartRecord.load(DestinationLake.at(lake_root, "d").start_record)
    assert record is not None
    assert record.start == StartConfig(mode="latest")


def test_earliest_reads_the_oldest_retained_binlog(db: MariaDBDatabase, lake_root: Path) -> None:
    db.server.execute("CREATE TABLE t (id INT PRIMARY KEY)", database=db.name)
    insert(db, 1)
    db.server.execute("FLUSH BINARY LOGS")
    insert(db, 2, 3)
    assert ids(run(db, lake_root, StartConfig(mode="earliest"))) == [1, 2, 3]


def test_position_starts_at_that_transaction(db: MariaDBDatabase, lake_root: Path) -> None:
    db.server.execute("CREATE TABLE t (id INT PRIMARY KEY)", database=db.name)
    insert(db, 1)
    file, pos = status(db)
    insert(db, 2, 3)
    start = StartConfig(mode="position", file=file, pos=pos)
    assert ids(run(db, lake_root, start)) == [2, 3]


def test_gtid_starts_after_that_state(db: MariaDBDatabase, lake_root: Path) -> None:
    db.server.execute("CREATE TABLE t (id INT PRIMARY KEY)", database=db.name)
    insert(db, 1)
    db.server.execute("FLUSH BINARY LOGS")  # the state's file is found by its Gtid_list
    insert(db, 2)
    gtid = str(db.server.query("SELECT @@gtid_binlog_pos")[0][0])
    db.server.execute("FLUSH BINARY LOGS")
    insert(db, 3, 4)
    assert ids(run(db, lake_root, StartConfig(mode="gtid", gtid=gtid))) == [3, 4]


def test_timestamp_starts_at_the_first_transaction_at_or_after_it(
    db: MariaDBDatabase, lake_root: Path
) -> None:
    # Event times from the past (as a replica applying its primary's transactions writes
    # them): one binlog file per second of event time.
    base = int(time.time()) - 100
    fresh_binlog(db.server)
    db.server.execute(
        f"SET timestamp = {base}", "CREATE TABLE t (id INT PRIMARY KEY)", database=db.name
    )
    insert(db, 1, at=base)
    for second in range(2, 6):
        db.server.execute("FLUSH BINARY LOGS")
        insert(db, second * 10, at=base + second)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(base + 3))
    assert ids(run(db, lake_root, StartConfig(mode="timestamp", timestamp=stamp))) == [30, 40, 50]


def test_timestamp_search_is_not_misled_by_a_long_statement_at_a_file_head(
    db: MariaDBDatabase, lake_root: Path
) -> None:
    """An event's time is its statement's start: a long statement committed after a rotation
    heads the new file with a time older than transactions of the file before it. Choosing
    the file by its first transaction's time skipped those; by the files' creation times the
    search starts early enough."""
    base = int(time.time()) - 100
    fresh_binlog(db.server)
    db.server.execute(
        f"SET timestamp = {base}", "CREATE TABLE t (id INT PRIMARY KEY)", database=db.name
    )
    insert(db, 10, at=base)
    db.server.execute("FLUSH BINARY LOGS")
    insert(db, 20, at=base + 10)
    insert(db, 30, at=base + 20)  # the first transaction at or after the start time
    db.server.execute("FLUSH BINARY LOGS")
    insert(db, 15, at=base + 5)  # the long statement, committed after the rotation
    insert(db, 40, at=base + 30)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(base + 15))
    assert ids(run(db, lake_root, StartConfig(mode="timestamp", timestamp=stamp))) == [15, 30, 40]


def test_a_binlog_with_events_but_no_recognised_head_is_an_error_never_now(
    db: MariaDBDatabase,
) -> None:
    """The search over this server's real binlog, its transaction heads withheld (as a reader
    that does not know the server's head event would see it: MySQL's anonymous GTID before
    it was recognised): the binlog holds events, so the search refuses instead of starting
    at the current end and silently skipping them. The same search with the heads finds
    the transaction."""
    base = int(time.time()) - 100
    fresh_binlog(db.server)
    db.server.execute(
        f"SET timestamp = {base}", "CREATE TABLE t (id INT PRIMARY KEY)", database=db.name
    )
    insert(db, 1, at=base + 10)
    insert(db, 2, at=base + 20)
    server = binlog_server(db)
    logs = [str(row[0]) for row in server.query("SHOW BINARY LOGS")]
    oldest = f"{logs[0]}:4"
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(base + 15))
    real = server_binlog(server)
    found = find_time(logs, stamp, oldest, real)
    assert found != server.current_position()
    blind = dataclasses.replace(real, heads=lambda file: iter(()))
    with pytest.raises(StartPositionError, match="no transaction start") as caught:
        find_time(logs, stamp, oldest, blind)
    assert caught.value.oldest == oldest


def test_bad_starts_are_refused_naming_the_oldest_position(
    db: MariaDBDatabase, lake_root: Path, tmp_path: Path
) -> None:
    db.server.execute("CREATE TABLE t (id INT PRIMARY KEY, v TEXT)", database=db.name)
    old_gtid = str(db.server.query("SELECT @@gtid_binlog_pos")[0][0])
    purged_file, _ = status(db)
    db.server.execute("INSERT INTO t VALUES (1, 'a')", database=db.name)
    oldest = fresh_binlog(db.server)
    file, pos = status(db)
    db.server.execute("BEGIN", "INSERT INTO t VALUES (2, 'b')", "COMMIT", database=db.name)
    inside = next(
        int(row[1])
        for row in db.server.query(f"SHOW BINLOG EVENTS IN '{file}' FROM {pos}")
        if row[2] in ("Write_rows_v1", "Write_rows", "Table_map")
    )
    server = binlog_server(db)
    bad = {
        "purged file": StartConfig(mode="position", file=purged_file, pos=4),
        "inside a transaction": StartConfig(mode="position", file=file, pos=inside),
        "not an event": StartConfig(mode="position", file=file, pos=pos + 3),
        "purged gtid": StartConfig(mode="gtid", gtid=old_gtid),
        "too old": StartConfig(mode="timestamp", timestamp="2001-01-01T00:00:00Z"),
    }
    for what, start in bad.items():
        with pytest.raises(StartPositionError) as caught:
            resolve_start(server, start)
        assert caught.value.oldest == f"{oldest}:4", what
        assert f"{oldest}:4" in str(caught.value), what
        assert "-?-" not in str(caught.value), what  # GTID states as a reader reads them
    # `config check --connect` finds it before a deploy
    conf = tmp_path / "conf"
    write_conf(
        conf, destination="d", server=db.server, user=db.user, database=db.name,
        lake_root=lake_root, server_id=3303, start=f"{{mode: gtid, gtid: '{old_gtid}'}}",
    )  # fmt: skip
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["config", "check", "--conf", str(conf), "--connect"])
    assert code == 1, out.getvalue()
    assert out.getvalue().startswith("d: ERROR"), out.getvalue()  # not "OK" then an error
    assert f"oldest position the server has is {oldest}:4" in out.getvalue()
    assert "up to sequence" in out.getvalue()
    # through a run: the error ends it, nothing is written
    layout = DestinationLake.at(lake_root, "d")
    summary = DestinationRuntime(WriteTerm("d", config(db, bad["purged gtid"]), layout)).run()
    assert isinstance(summary.error, StartPositionError)
    assert not (lake_root / "d" / "changes").exists()


def test_initial_default_over_a_busy_database_then_a_changed_start_is_reported(
    db: MariaDBDatabase, lake_root: Path, tmp_path: Path
) -> None:
    """No `start:` at all: every existing row is copied while the workload writes, and the
    change log replays to the source; editing `start:` later is reported, not applied."""
    from cdc_platform.config import load_config  # noqa: PLC0415 (this test's subject, imported where it is used)
    from cdc_platform.runtime.supervised import supervised_destination  # noqa: PLC0415 (this test's subject, imported where it is used)

    workload = Workload(db.server, db.name, seed=14)
    workload.create_schema()
    workload.run_transactions(600)
    conf = tmp_path / "conf"
    write_conf(
        conf, destination="d", server=db.server, user=db.user, database=db.name,
        lake_root=lake_root, server_id=3302,
        extra_platform=sqlite_lease(tmp_path),
    )  # fmt: skip
    instance_file = conf / "destinations" / "d" / "instance.yaml"
    text = instance_file.read_text().replace("start: {mode: latest}\n", "")
    instance_file.write_text(text + "snapshot: {chunk_size: 200}\n")
    loaded = load_config(conf)
    assert not loaded.errors, loaded.errors
    assert loaded.destinations["d"].config.start.mode == "initial"  # the default

    chunks: list[str] = []
    seen: list[TableProgress] = []
    state_file = LakeFile(str(lake_root / "d" / "_snapshot_state.json"))

    def on_progress(progress: SnapshotProgress) -> None:
        chunks.append(progress.table)
        seen.extend(read_snapshot_progress(state_file))  # what status and metrics read

    with supervised_destination(
        loaded, loaded.destinations["d"], on_snapshot_progress=on_progress
    ) as supervisor:
        workload.start(rate_per_second=100)
        runner = threading.Thread(
            target=lambda: supervisor.run(exit_when_idle_seconds=1.5), daemon=True
        )
        runner.start()
        wait_for(lambda: len(chunks) >= 4, "four snapshot chunks", diagnose=lambda: str(chunks))
        workload.stop()
        runner.join(timeout=120)
        assert not runner.is_alive()
    assert len(chunks) >= 4, chunks  # several chunks, the workload writing in between
    copying = [p for p in seen if p.state == "copying" and p.rows_read > 0]
    assert copying, seen
    assert all(p.estimated_rows > 0 and 0 < p.percent <= 99 for p in copying), copying
    assert {p.table for p in seen} == {f"{db.name}.customers", f"{db.name}.orders"}
    assert not state_file.exists()  # done: nothing in progress any more
    uri = str(lake_root / "d" / "changes")
    result = replay(uri)
    assert result.duplicates == []
    for table in ("customers", "orders"):
        expected = source_rows(db.server, db.name, table)
        assert result.tables.get(f"{db.name}.{table}", {}) == expected, table

    record = StartRecord.load(DestinationLake.at(lake_root, "d").start_record)
    assert record is not None
    assert record.start.mode == "initial"
    changed = StartConfig(mode="latest")
    drift = start_drift(changed, record)
    assert drift is not None
    assert "initial" in drift
    assert "not applied" in drift
    assert start_drift(StartConfig(), record) is None

    # `config check` and `status` report an edited start; the next run ignores it
    instance_file.write_text(instance_file.read_text() + "start: {mode: earliest}\n")
    for command in (["config", "check"], ["status"]):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            main([*command, "--conf", str(conf)])
        text = out.getvalue()
        assert "start: is now earliest, but the destination began with initial" in text, text
    assert "  start: initial" in text

    # the next run: the edited start is not applied (no re-read from the oldest binlog), and
    # a table that appeared meanwhile is copied by default (initial implies new tables)
    db.server.execute(
        "CREATE TABLE extra (id INT PRIMARY KEY)", "INSERT INTO extra VALUES (1), (2)",
        database=db.name,
    )  # fmt: skip
    orders_before = len(replay(uri).tables[f"{db.name}.orders"])
    again = load_config(conf)
    with supervised_destination(again, again.destinations["d"]) as supervisor:
        summary = supervisor.run(exit_when_idle_seconds=1.0)
    assert summary.error is None, summary
    result = replay(uri)
    assert result.duplicates == []
    assert result.tables[f"{db.name}.extra"] == source_rows(db.server, db.name, "extra")
    assert len(result.tables[f"{db.name}.orders"]) == orders_before
