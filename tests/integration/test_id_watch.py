"""The id-watch source against a real MariaDB and real Delta change logs (docs/id_watch.md)."""

from __future__ import annotations

import json
import os
import threading
import tracemalloc
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import pytest
from deltalake import DeltaTable

from cdc_platform.cli import main
from cdc_platform.config.id_watch import IdWatchConfig, IdWatchExpireConfig, IdWatchTableConfig
from cdc_platform.config.instance import InstanceConfig, StoreConfig
from cdc_platform.config.lake import LakeLocation
from cdc_platform.config.source import SourceConfig
from cdc_platform.errors import ConfigError, SourceError
from cdc_platform.events import Op
from cdc_platform.runtime import DestinationRuntime, RunSummary
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.sink.report import CommitReport
from cdc_platform.sink.term import WriteTerm
from cdc_platform.source.id_watch.state import load_known_state
from cdc_platform.source.id_watch.watch import IdWatchSource
from cdc_platform.testing.destinations import PASSWORD_ENV
from cdc_platform.testing.processes import wait_for
from cdc_platform.testing.replay import RowKey, has_commits, replay
from tests.conftest import MariaDBDatabase, S3Lake

pytestmark = pytest.mark.integration

TABLE = """CREATE TABLE items (
    id BIGINT AUTO_INCREMENT PRIMARY KEY,
    name VARCHAR(40) NOT NULL,
    qty INT NOT NULL DEFAULT 0,
    deleted TINYINT NOT NULL DEFAULT 0,
    created DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    modified DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6)
)"""


OLD = "NOW(6) - INTERVAL 2 HOUR"


@pytest.fixture
def env_password(mariadb: MariaDBDatabase, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PASSWORD_ENV, mariadb.user.password)


def config(
    db: MariaDBDatabase,
    *,
    user: str | None = None,
    delay: float = 0.5,
    page_size: int = 50,
    list_minutes: tuple[float, float] = (60.0, 60.0),
    expire: IdWatchExpireConfig | None = None,
    **store: Any,
) -> InstanceConfig:
    return InstanceConfig(
        source=SourceConfig(
            host=db.server.host,
            port=db.server.port,
            user=user or db.user.name,
            password_env=PASSWORD_ENV,
            server_id=3101,
            reconnect_initial_seconds=0.1,
            reconnect_max_seconds=1.0,
            mode="id_watch",
            id_watch=IdWatchConfig(
                tables=[
                    IdWatchTableConfig(
                        table=f"{db.name}.items",
                        id_column="id",
                        created_column="created",
                        stability_delay_seconds=delay,
                        page_size=page_size,
                        expire=expire,
                    )
                ],
                poll_interval_seconds=0.05,
                list_interval_minutes=list_minutes,
            ),
        ),
        store=StoreConfig(**{"batch_timeout_seconds": 0.2, **store}),
    )


def source_rows(db: MariaDBDatabase) -> dict[RowKey, dict[str, Any]]:
    """The table as the change log represents it, read independently of the source's code."""
    rows = db.server.query(
        "SELECT id, name, qty, deleted, CAST(created AS CHAR), CAST(modified AS CHAR) FROM items",
        db.name,
    )
    names = ("id", "name", "qty", "deleted", "created", "modified")
    return {(("id", r[0]),): dict(zip(names, r, strict=True)) for r in rows}


def changes(uri: str) -> list[dict[str, Any]]:
    """The change log's rows in seq order; none before its first commit on a local disk
    (the tests poll this from the moment the runtime starts)."""
    if "://" not in uri and not has_commits(uri):
        return []
    return cast(
        "list[dict[str, Any]]",
        DeltaTable(uri).to_pyarrow_table().sort_by("seq").to_pylist(),
    )


def assert_replay_equals_source(db: MariaDBDatabase, uri: str) -> None:
    result = replay(uri)
    assert result.duplicates == []
    assert result.seq_gaps == []
    assert result.problems == []
    got = result.tables.get(f"{db.name}.items", {})
    expected = source_rows(db)
    assert got == expected, f"{len(got)} replayed rows vs {len(expected)} in the source"


@contextmanager
def running(runtime: DestinationRuntime) -> Iterator[list[RunSummary]]:
    """The runtime in a thread; stopped and joined on exit (its summary in the list)."""
    out: list[RunSummary] = []
    thread = threading.Thread(target=lambda: out.append(runtime.run()), daemon=True)
    thread.start()
    try:
        wait_for(lambda: runtime.source is not None or bool(out), "the source to open")
        yield out
    finally:
        runtime.request_stop()
        thread.join(timeout=60)
    assert out, "the runtime did not stop"
    assert out[0].error is None, out[0]


def source_of(runtime: DestinationRuntime) -> IdWatchSource:
    assert isinstance(runtime.source, IdWatchSource)
    return runtime.source


def rows_of(uri: str, op: str) -> list[dict[str, Any]]:
    return [r for r in changes(uri) if r["op"] == op]


def ids_in(uri: str, op: str) -> list[int]:
    return [json.loads(r["pk"])["id"] for r in rows_of(uri, op)]


@pytest.mark.usefixtures("env_password")
def test_out_of_order_commit_within_the_delay_is_not_missed(
    mariadb: MariaDBDatabase, lake_root: Path
) -> None:
    """A lower id committed after a higher one, within the delay, still comes from the watch."""
    server, db = mariadb.server, mariadb.name
    server.execute(TABLE, database=db)
    layout = DestinationLake.at(lake_root, "d")
    uri = layout.change_log
    runtime = DestinationRuntime(WriteTerm("d", config(mariadb, delay=5.0), layout))
    with running(runtime):
        wait_for(lambda: source_of(runtime).lists >= 1, "the initial list")
        a = server.connect(db, autocommit=False)
        b = server.connect(db, autocommit=False)
        try:
            with a.cursor() as cur:
                cur.execute("INSERT INTO items (name) VALUES ('a')")
                low = cur.lastrowid
            with b.cursor() as cur:
                cur.execute("INSERT INTO items (name) VALUES ('b')")
                high = cur.lastrowid
            b.commit()
            assert low < high
            rounds = source_of(runtime).rounds
            wait_for(lambda: source_of(runtime).rounds >= rounds + 3, "watch rounds after B")
            assert ids_in(uri, "c") == [], "B is younger than the delay: the watch must wait"
            a.commit()
        finally:
            a.close()
            b.close()
        wait_for(lambda: sorted(ids_in(uri, "c")) == [low, high], "both inserts")
        assert source_of(runtime).lists == 1, "the watch caught them, not a list"
    assert ids_in(uri, "c") == [low, high], "emitted in id order"
    assert_replay_equals_source(mariadb, uri)


@pytest.mark.usefixtures("env_password")
def test_updates_and_deletes_come_from_the_list(mariadb: MariaDBDatabase, lake_root: Path) -> None:
    server, db = mariadb.server, mariadb.name
    server.execute(TABLE, database=db)
    server.execute(
        "INSERT INTO items (name, qty) VALUES " + ", ".join(f"('n{i}', {i})" for i in range(30)),
        database=db,
    )
    layout = DestinationLake.at(lake_root, "d")
    uri = layout.change_log
    runtime = DestinationRuntime(
        WriteTerm("d", config(mariadb, delay=0.2, list_minutes=(0.01, 0.02)), layout)
    )
    with running(runtime):
        wait_for(lambda: len(ids_in(uri, "c")) == 30, "the 30 inserts")
        server.execute(
            "UPDATE items SET qty = qty + 100 WHERE id <= 5",
            "DELETE FROM items WHERE id BETWEEN 6 AND 8",
            "SET sql_log_bin = 0",
            "UPDATE items SET name = 'hidden' WHERE id = 9",
            "DELETE FROM items WHERE id = 10",
            database=db,
        )
        lists = source_of(runtime).lists
        wait_for(lambda: source_of(runtime).lists >= lists + 2, "two more lists")
    assert sorted(ids_in(uri, "r")) == [1, 2, 3, 4, 5, 9]
    assert sorted(ids_in(uri, "d")) == [6, 7, 8, 10]
    for row in rows_of(uri, "d"):
        assert json.loads(row["before"]) == json.loads(row["pk"]), "before holds the key"
        assert row["after"] is None
    assert_replay_equals_source(mariadb, uri)


def workload(db: MariaDBDatabase, stop: threading.Event, seed: int) -> None:
    """Inserts (some in multi-row transactions), updates and deletes until ``stop``."""
    import random  # noqa: PLC0415 - only this helper needs it

    rng = random.Random(seed)
    with db.server.connect(db.name) as conn, conn.cursor() as cur:
        while not stop.is_set():
            action = rng.random()
            if action < 0.6:
                values = ", ".join(
                    f"('w{rng.randrange(10**6)}', {rng.randrange(100)})"
                    for _ in range(rng.randrange(1, 4))
                )
                cur.execute(f"INSERT INTO items (name, qty) VALUES {values}")
            elif action < 0.85:
                cur.execute("UPDATE items SET qty = qty + 1 ORDER BY RAND() LIMIT 2")
            else:
                cur.execute("DELETE FROM items ORDER BY RAND() LIMIT 1")
            stop.wait(0.005)  # a steady pace, ending at once when stopped


@pytest.mark.usefixtures("env_password")
def test_pipeline_under_workload_replays_to_source(
    mariadb: MariaDBDatabase, lake_root: Path
) -> None:
    """Concurrent inserts, updates and deletes; once quiet, a list makes the log exact."""
    server, db = mariadb.server, mariadb.name
    server.execute(TABLE, database=db)
    layout = DestinationLake.at(lake_root, "d")
    uri = layout.change_log
    runtime = DestinationRuntime(
        WriteTerm("d", config(mariadb, delay=0.3, page_size=20, list_minutes=(0.02, 0.04)), layout)
    )
    stop = threading.Event()
    writer = threading.Thread(target=workload, args=(mariadb, stop, 7), daemon=True)
    with running(runtime):
        writer.start()
        wait_for(lambda: source_of(runtime).lists >= 3, "three lists under load", timeout=120)
        stop.set()
        writer.join(timeout=30)
        lists = source_of(runtime).lists
        wait_for(lambda: source_of(runtime).lists >= lists + 2, "two lists after the load")
    assert_replay_equals_source(mariadb, uri)
    inserts = Counter(ids_in(uri, "c"))
    assert inserts, "the watch emitted inserts"
    assert max(inserts.values()) == 1, "no row inserted twice"
    # And a fresh run that exits when idle leaves it exact too.
    summary = DestinationRuntime(WriteTerm("d", config(mariadb), layout)).run(
        exit_when_idle_seconds=1.5
    )
    assert summary.error is None, summary
    assert_replay_equals_source(mariadb, uri)


@pytest.mark.usefixtures("env_password")
def test_restart_resumes_without_loss_or_duplicate_inserts(
    mariadb: MariaDBDatabase, lake_root: Path
) -> None:
    """Stopped inside chunked transactions (a store smaller than a page), then changed while
    down: the restart emits every row once and the log replays to the source."""
    server, db = mariadb.server, mariadb.name
    server.execute(TABLE, database=db)
    server.execute(
        "INSERT INTO items (name, qty) VALUES " + ", ".join(f"('n{i}', {i})" for i in range(200)),
        database=db,
    )
    server.execute("UPDATE items SET created = created - INTERVAL 1 HOUR", database=db)
    layout = DestinationLake.at(lake_root, "d")
    uri = layout.change_log
    partial: list[CommitReport] = []
    first: DestinationRuntime

    def on_commit(report: CommitReport) -> None:
        if report.partial:
            partial.append(report)
            if len(partial) == 3:
                first.request_stop("test: stop inside a transaction")

    small_store = {"buffer_size": 8, "batch_mode": "ITEMSIZE", "batch_size": 4}
    first = DestinationRuntime(
        WriteTerm("d", config(mariadb, page_size=50, **small_store), layout, on_commit=on_commit)
    )
    summary = first.run(exit_when_idle_seconds=30)
    assert summary.error is None, summary
    assert summary.resume is not None
    assert summary.resume.skip_events > 0, "stopped inside a transaction"
    committed = len(ids_in(uri, "c"))
    assert 0 < committed < 200
    server.execute(
        "INSERT INTO items (name, created) VALUES ('while down 1', NOW(6) - INTERVAL 1 HOUR), "
        "('while down 2', NOW(6) - INTERVAL 1 HOUR)",
        "UPDATE items SET qty = -1 WHERE id = 1",
        "DELETE FROM items WHERE id = 2",
        database=db,
    )
    second = DestinationRuntime(WriteTerm("d", config(mariadb, page_size=50), layout))
    summary = second.run(exit_when_idle_seconds=2.0)
    assert summary.error is None, summary
    inserts = Counter(ids_in(uri, "c"))
    assert max(inserts.values()) == 1, "no row inserted twice"
    assert sorted(inserts) == sorted(set(range(1, 203))), "every id inserted once"
    assert ids_in(uri, "d") == [2]
    assert 1 in ids_in(uri, "r")
    assert_replay_equals_source(mariadb, uri)


@pytest.mark.usefixtures("env_password")
def test_expired_rows_are_deleted_in_bounded_batches(
    mariadb: MariaDBDatabase, lake_root: Path
) -> None:
    server, db = mariadb.server, mariadb.name
    server.execute(TABLE, database=db)
    user = f"cdcx_{db[-6:]}"
    server.execute(
        f"CREATE USER '{user}'@'%' IDENTIFIED BY '{mariadb.user.password}'",
        f"GRANT SELECT, DELETE ON `{db}`.* TO '{user}'@'%'",
    )
    try:
        server.execute(
            "INSERT INTO items (name, deleted, created, modified) VALUES "
            + ", ".join(f"('old{i}', 1, {OLD}, {OLD})" for i in range(25))
            + f", ('recently deleted', 1, {OLD}, NOW(6)), ('live', 0, {OLD}, {OLD})",
            database=db,
        )
        layout = DestinationLake.at(lake_root, "d")
        uri = layout.change_log
        expire = IdWatchExpireConfig(
            deleted_column="deleted",
            modified_column="modified",
            after_seconds=3600,
            batch_size=10,
            max_batches_per_round=2,
        )
        runtime = DestinationRuntime(
            WriteTerm("d", config(mariadb, user=user, expire=expire), layout)
        )
        with running(runtime):
            wait_for(lambda: len(ids_in(uri, "d")) == 20, "20 deletes")
            assert source_of(runtime).expired_deleted == 20
        assert server.query("SELECT COUNT(*) FROM items", db)[0][0] == 7
        assert_replay_equals_source(mariadb, uri)
        # The next round (here: the restart's list) deletes the rest.
        summary = DestinationRuntime(
            WriteTerm("d", config(mariadb, user=user, expire=expire), layout)
        ).run(exit_when_idle_seconds=1.5)
        assert summary.error is None, summary
        names = {r[0] for r in server.query("SELECT name FROM items", db)}
        assert names == {"recently deleted", "live"}
        assert len(ids_in(uri, "d")) == 25
        assert_replay_equals_source(mariadb, uri)
    finally:
        server.execute(f"DROP USER '{user}'@'%'")


@pytest.mark.usefixtures("env_password")
def test_check_names_the_table_and_problem(mariadb: MariaDBDatabase) -> None:
    server, db = mariadb.server, mariadb.name
    server.execute(
        TABLE,
        "CREATE TABLE nokey (id INT, created DATETIME)",
        "CREATE TABLE textid (id VARCHAR(10) PRIMARY KEY, created DATETIME)",
        database=db,
    )
    good = config(mariadb).source

    def with_table(**changes: Any) -> IdWatchSource:
        assert good.id_watch is not None
        table = good.id_watch.tables[0].model_copy(update=changes)
        watch = good.id_watch.model_copy(update={"tables": [table]})
        return IdWatchSource(good.model_copy(update={"id_watch": watch}))

    assert with_table().check().tables == (f"{db}.items",)
    with pytest.raises(SourceError, match="does not exist"):
        with_table(table=f"{db}.missing").check()
    with pytest.raises(SourceError, match="no primary key"):
        with_table(table=f"{db}.nokey").check()
    with pytest.raises(ConfigError, match="created_column 'made' does not exist"):
        with_table(created_column="made").check()
    with pytest.raises(ConfigError, match="not an integer"):
        with_table(table=f"{db}.textid").check()
    with pytest.raises(ConfigError, match="is int, not DATETIME"):
        with_table(created_column="qty").check()


def test_unreachable_server_is_a_connection_error(mariadb: MariaDBDatabase) -> None:
    source = config(mariadb).source.model_copy(update={"port": 1, "connect_timeout_seconds": 1.0})
    with pytest.raises(SourceError, match="cannot reach"):
        IdWatchSource(source, password="x").check()


@pytest.mark.usefixtures("env_password")
def test_cli_run_drives_an_id_watch_destination(
    mariadb: MariaDBDatabase, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`cdc-platform run` (lease supervisor, default SQLite lease) with mode: id_watch."""
    server, db = mariadb.server, mariadb.name
    server.execute(TABLE, database=db)
    server.execute(
        f"INSERT INTO items (name, created) VALUES ('a', {OLD}), ('b', {OLD}), ('c', {OLD})",
        database=db,
    )
    conf = tmp_path / "conf"
    (conf / "destinations" / "reg").mkdir(parents=True)
    lake = tmp_path / "lake"
    (conf / "platform.yaml").write_text(f"lake_root: {lake}\n")
    (conf / "destinations" / "reg" / "instance.yaml").write_text(
        f"""\
source:
  host: {server.host}
  port: {server.port}
  user: {mariadb.user.name}
  password_env: {PASSWORD_ENV}
  server_id: 1001
  mode: id_watch
  id_watch:
    poll_interval_seconds: 0.05
    tables:
      - {{table: {db}.items, id_column: id, created_column: created}}
store: {{batch_timeout_seconds: 0.2}}
"""
    )
    assert main(["run", "--conf", str(conf), "--destination", "reg", "--exit-when-idle", "2"]) == 0
    assert "reg: idle" in capsys.readouterr().out
    uri = str(lake / "reg" / "changes")
    assert sorted(ids_in(uri, "c")) == [1, 2, 3]
    assert_replay_equals_source(mariadb, uri)


@pytest.mark.usefixtures("env_password")
def test_lost_connection_is_survived(mariadb: MariaDBDatabase, lake_root: Path) -> None:
    """The server kills the source's connection; it reconnects and loses nothing. (Killing
    the connection, not restarting the shared server: a restart starts a new binlog file,
    which disturbs binlog tests later in the session.)"""
    server, db = mariadb.server, mariadb.name
    server.execute(TABLE, database=db)
    layout = DestinationLake.at(lake_root, "d")
    uri = layout.change_log
    runtime = DestinationRuntime(WriteTerm("d", config(mariadb, delay=0.2), layout))
    with running(runtime):
        server.execute(f"INSERT INTO items (name, created) VALUES ('a', {OLD})", database=db)
        wait_for(lambda: ids_in(uri, "c") == [1], "the first insert")
        for (thread,) in server.query(
            "SELECT id FROM information_schema.processlist "
            f"WHERE user = '{mariadb.user.name}' AND command NOT LIKE 'Binlog Dump%'"
        ):
            server.execute(f"KILL CONNECTION {int(thread)}")
        server.execute(f"INSERT INTO items (name, created) VALUES ('b', {OLD})", database=db)
        wait_for(
            lambda: ids_in(uri, "c") == [1, 2],
            "the insert after the reconnect",
            diagnose=lambda: (
                f"log has {ids_in(uri, 'c')}, source {server.query('SELECT id FROM items', db)}"
            ),
        )
        assert source_of(runtime).reconnects >= 1
    assert_replay_equals_source(mariadb, uri)


@pytest.mark.usefixtures("env_password")
def test_a_start_over_a_large_table_does_not_hold_its_images(
    mariadb: MariaDBDatabase, lake_root: Path
) -> None:
    """The known state is rebuilt from the change log at start: a digest per key is held,
    never the table's images (Python-side memory stays far below their size)."""
    server, db = mariadb.server, mariadb.name
    server.execute(TABLE, "ALTER TABLE items ADD body MEDIUMTEXT", database=db)
    rows = 1500
    for start in range(0, rows, 250):
        server.execute(
            "INSERT INTO items (name, body, created) VALUES "
            + ", ".join(
                f"('n{i}', REPEAT('{i % 10}', 8000), {OLD})" for i in range(start, start + 250)
            ),
            database=db,
        )
    layout = DestinationLake.at(lake_root, "d")
    uri = layout.change_log
    summary = DestinationRuntime(WriteTerm("d", config(mariadb, page_size=500), layout)).run(
        exit_when_idle_seconds=1.0
    )
    assert summary.error is None, summary
    image_bytes = sum(len(r["after"]) for r in rows_of(uri, "c"))
    assert image_bytes > rows * 8000

    tracemalloc.start()
    try:
        state = load_known_state(uri, [f"{db}.items"])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert state.size(f"{db}.items") == rows
    assert peak < image_bytes / 8, f"{peak} bytes held to load {image_bytes} bytes of images"
    # the state still tells a known image from a changed one
    known = {r["pk"]: r["after"] for r in rows_of(uri, "c")}
    pk, image = next(iter(known.items()))
    assert state.diff(f"{db}.items", [(pk, image)], new_op=Op.INSERT) == []
    assert len(state.diff(f"{db}.items", [(pk, image + " ")], new_op=Op.INSERT)) == 1

    second = DestinationRuntime(WriteTerm("d", config(mariadb, page_size=500), layout))
    assert second.run(exit_when_idle_seconds=1.0).error is None
    assert Counter(ids_in(uri, "c")) == Counter(range(1, rows + 1)), "a restart repeats nothing"


@pytest.mark.usefixtures("env_password")
def test_id_watch_on_s3_restarts_from_the_state_in_the_lake(
    mariadb: MariaDBDatabase, s3_lake: S3Lake, tmp_path: Path
) -> None:
    """With the lake on S3 the id-watch state (position, known rows) is read back from the
    change log in the bucket: a second run with a new working directory emits only what
    changed while it was down, and the log replays to the source."""
    server, db = mariadb.server, mariadb.name
    server.execute(TABLE, database=db)
    server.execute(
        "INSERT INTO items (name, qty) VALUES " + ", ".join(f"('n{i}', {i})" for i in range(60)),
        database=db,
    )
    server.execute("UPDATE items SET created = created - INTERVAL 1 HOUR", database=db)
    lake = LakeLocation.resolve(s3_lake.uri, tmp_path / "one", environ=os.environ)
    first = DestinationRuntime(WriteTerm.in_lake("d", config(mariadb), lake))
    summary = first.run(exit_when_idle_seconds=2.0)
    assert summary.error is None, summary
    uri = lake.join("d", "changes")
    assert uri.startswith("s3://")
    server.execute(
        "INSERT INTO items (name, created) VALUES ('while down', NOW(6) - INTERVAL 1 HOUR)",
        "UPDATE items SET qty = -1 WHERE id = 1",
        "DELETE FROM items WHERE id = 2",
        database=db,
    )
    again = LakeLocation.resolve(s3_lake.uri, tmp_path / "two", environ=os.environ)
    second = DestinationRuntime(WriteTerm.in_lake("d", config(mariadb), again))
    summary = second.run(exit_when_idle_seconds=2.0)
    assert summary.error is None, summary
    inserts = Counter(ids_in(uri, "c"))
    assert sorted(inserts) == list(range(1, 62))
    assert max(inserts.values()) == 1, "no row inserted twice"
    assert ids_in(uri, "d") == [2]
    assert_replay_equals_source(mariadb, uri)
    assert not (tmp_path / "one").exists()
    assert not (tmp_path / "two").exists()
