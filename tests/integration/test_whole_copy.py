"""Whole-table copies of keyless tables: exact as a multiset, atomic for readers, and a read
that is not held across change-log commits."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest
from deltalake import DeltaTable

from cdc_platform.backfill import table_copy
from cdc_platform.backfill.snapshot import SnapshotRunner
from cdc_platform.config.instance import InstanceConfig, SnapshotSettings
from cdc_platform.runtime import DestinationRuntime
from cdc_platform.sink import DeltaChangeLog
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.sink.term import WriteTerm
from cdc_platform.testing.destinations import PASSWORD_ENV, instance_config, write_conf
from cdc_platform.testing.mariadb import MariaDBServer
from cdc_platform.testing.processes import wait_until
from tests.conftest import MariaDBDatabase

pytestmark = pytest.mark.integration

Bag = Counter[str]
"""Row images (canonical JSON) and how many times each is in the table."""


def _instance(db: MariaDBDatabase, table: str, server_id: int) -> InstanceConfig:
    return instance_config(db.server, db.user.name, [rf"{db.name}\.{table}"], server_id=server_id)


def _catch_up(config: InstanceConfig, layout: DestinationLake) -> None:
    """The destination's normal run until it is idle."""
    summary = DestinationRuntime(WriteTerm("d", config, layout)).run(exit_when_idle_seconds=1.5)
    assert summary.error is None, summary


def change_log_bag(uri: str, db: str, table: str) -> Bag:
    """The table as a multiset mirror applies the change log: in seq order, a TRUNCATE (the
    copy's) empties it, ``c``/``r`` add the image, ``d`` removes one, ``u`` both."""
    data = DeltaTable(uri).to_pyarrow_table(
        columns=["op", "db", "table", "before", "after", "ddl", "seq"]
    )
    bag: Bag = Counter()
    for row in data.sort_by("seq").to_pylist():
        if row["db"] != db or row["table"] != table:
            continue
        op = row["op"]
        if op == "ddl":
            if str(row["ddl"]).upper().startswith("TRUNCATE"):
                bag.clear()
            continue
        if op in ("d", "u"):
            bag[_canonical(json.loads(row["before"]))] -= 1
        if op in ("c", "r", "u"):
            bag[_canonical(json.loads(row["after"]))] += 1
    return +bag


def _canonical(image: dict[str, Any]) -> str:
    return json.dumps(image, sort_keys=True)


def source_bag(db: MariaDBDatabase, table: str) -> Bag:
    """The source table's rows as the change log writes them (compact JSON)."""
    with db.server.connect(db.name) as conn, conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute(f"SELECT * FROM `{table}`")
        rows: list[dict[str, Any]] = list(cur.fetchall())
    return Counter(_canonical(r) for r in rows)


def _capture_only(conf: Path, db: str, table: str) -> None:
    """Narrow a conf written by write_conf to one table of the database."""
    instance = conf / "destinations" / "d" / "instance.yaml"
    text = instance.read_text()
    everything = f"include_tables: ['{db}\\..*']"
    assert everything in text, text
    instance.write_text(text.replace(everything, f"include_tables: ['{db}\\.{table}']"))


class _Writer:
    """Commits one statement after another on its own connection until stopped."""

    def __init__(self, db: MariaDBDatabase, statement: str, pause: float) -> None:
        self._db, self._statement, self._pause = db, statement, pause
        self._stop = threading.Event()
        self.commits = 0
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with self._db.server.connect(self._db.name) as conn, conn.cursor() as cur:
            while not self._stop.is_set():
                cur.execute(self._statement)
                self.commits += 1
                self._stop.wait(self._pause)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


@pytest.fixture
def env_password(mariadb: MariaDBDatabase, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PASSWORD_ENV, mariadb.user.password)


@pytest.fixture
def own_user(mariadb: MariaDBDatabase, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A replication user of this test alone (user names are server-wide), so that its
    binlog dump can be told from other tests' on the shared server; its password is in
    ``_OWN_PASSWORD_ENV``."""
    name = f"wc_{uuid.uuid4().hex[:8]}"
    mariadb.server.create_replication_user(name, "own-secret")
    monkeypatch.setenv(_OWN_PASSWORD_ENV, "own-secret")
    try:
        yield name
    finally:
        mariadb.server.execute(f"DROP USER IF EXISTS '{name}'@'%'")


_OWN_PASSWORD_ENV = "CDC_TEST_WHOLE_COPY_PASSWORD"


def _dumps_of(db: MariaDBDatabase, user: str) -> list[int]:
    """Connection ids of ``user``'s binlog dumps."""
    rows = db.server.query(
        "SELECT ID FROM information_schema.PROCESSLIST "
        f"WHERE USER = '{user}' AND COMMAND LIKE 'Binlog Dump%'"
    )
    return [int(r[0]) for r in rows]


def _reading(server: MariaDBServer, table: str) -> bool:
    """Whether a query reading ``table`` runs on ``server``."""
    rows = server.query(
        "SELECT COUNT(*) FROM information_schema.PROCESSLIST "
        f"WHERE INFO LIKE 'SELECT %`{table}`%' AND ID <> CONNECTION_ID()"
    )
    return int(rows[0][0]) > 0


def test_a_keyless_copy_reads_the_stream_up_to_its_place(
    mariadb: MariaDBDatabase, lake_root: Path, own_user: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The snapshot's stream falls behind for longer than a second (its dump connection is
    cut: it reconnects after 2 s) while rows go into the keyless table just before the copy's
    consistent read, and an uncaptured table commits all the time beside it (its commits
    reach the stream at most once a second). The copy must place its rows where its read
    is consistent, not at the point the stream had reached when it went quiet: every row
    counted once, row by row."""
    server, db = mariadb.server, mariadb.name
    server.execute(
        "CREATE TABLE bag (a INT, b VARCHAR(10))",
        "CREATE TABLE busy (id INT AUTO_INCREMENT PRIMARY KEY, v INT)",
        "INSERT INTO bag VALUES " + ", ".join(f"({i % 5}, 'v{i % 3}')" for i in range(200)),
        database=db,
    )
    config = instance_config(
        server, own_user, [rf"{db}\.bag"], server_id=3661, password_env=_OWN_PASSWORD_ENV
    )
    config = config.model_copy(
        update={"source": config.source.model_copy(update={"reconnect_initial_seconds": 2.0})}
    )
    layout = DestinationLake.at(lake_root, "d")
    uri = layout.change_log
    _catch_up(config, layout)
    real_copy = table_copy.copy_whole_table
    cut: list[int] = []

    def copy_behind(connect: Any, *args: Any, **kwargs: Any) -> Any:
        @contextlib.contextmanager
        def lagging() -> Iterator[Any]:
            with connect() as conn:
                if not cut:
                    wait_until(
                        lambda: bool(_dumps_of(mariadb, own_user)),
                        timeout=60,
                        what="the snapshot's stream",
                    )
                    for dump in _dumps_of(mariadb, own_user):
                        server.execute(f"KILL CONNECTION {dump}")
                        cut.append(dump)
                    server.execute("INSERT INTO bag VALUES (7, 'late'), (7, 'late')", database=db)
                yield conn

        return real_copy(lagging, *args, **kwargs)

    monkeypatch.setattr(table_copy, "copy_whole_table", copy_behind)
    busy = _Writer(mariadb, "INSERT INTO busy (v) VALUES (1)", 0.0)
    try:
        result = SnapshotRunner(
            WriteTerm("d", config, layout),
            DestinationLake.at(lake_root, "d").snapshot_state,
            tables=[f"{db}.bag"],
        ).run()
    finally:
        busy.stop()
    assert cut, "the stream's dump connection was cut"
    assert result.per_table == {f"{db}.bag": 202}
    assert busy.commits > 10
    server.execute(
        "INSERT INTO bag VALUES (8, 'after')", "DELETE FROM bag WHERE a = 0 LIMIT 1", database=db
    )
    _catch_up(config, layout)
    got, expected = change_log_bag(uri, db, "bag"), source_bag(mariadb, "bag")
    assert got == expected, f"extra {got - expected}, missing {expected - got}"


@pytest.mark.usefixtures("env_password")
def test_a_keyless_copy_whose_place_follows_a_binlog_rotation_ends(
    mariadb: MariaDBDatabase, lake_root: Path
) -> None:
    """A quiet source whose binlog was just rotated: the copy's place is the new file's
    header, which no transaction ends at; the server's heartbeat there says it is reached."""
    server, db = mariadb.server, mariadb.name
    server.execute("CREATE TABLE bag (a INT)", "INSERT INTO bag VALUES (1), (1), (2)", database=db)
    config = _instance(mariadb, "bag", 3665)
    layout = DestinationLake.at(lake_root, "d")
    uri = layout.change_log
    _catch_up(config, layout)
    server.execute("FLUSH BINARY LOGS")
    runner = SnapshotRunner(
        WriteTerm("d", config, layout),
        DestinationLake.at(lake_root, "d").snapshot_state,
        tables=[f"{db}.bag"],
    )
    done: list[Any] = []
    thread = threading.Thread(target=lambda: done.append(runner.run()), daemon=True)
    thread.start()
    thread.join(timeout=120)
    if thread.is_alive():
        runner.interrupt("the copy never reached its place")
        thread.join(timeout=30)
    assert done, "the copy ended"
    assert done[0].per_table == {f"{db}.bag": 3}
    assert change_log_bag(uri, db, "bag") == source_bag(mariadb, "bag")


@pytest.mark.usefixtures("env_password")
def test_a_keyless_copy_lands_in_one_commit(mariadb: MariaDBDatabase, lake_root: Path) -> None:
    """Readers (a mirror's apply between two commits) never see the table half copied: the
    truncate and every row of the copy are one Delta commit, however small the chunks."""
    server, db = mariadb.server, mariadb.name
    server.execute(
        "CREATE TABLE bag (a INT, b VARCHAR(10))",
        "INSERT INTO bag VALUES " + ", ".join(f"({i % 4}, 'v')" for i in range(50)),
        database=db,
    )
    config = _instance(mariadb, "bag", 3662)
    layout = DestinationLake.at(lake_root, "d")
    uri = layout.change_log
    _catch_up(config, layout)
    result = SnapshotRunner(
        WriteTerm("d", config, layout),
        DestinationLake.at(lake_root, "d").snapshot_state,
        tables=[f"{db}.bag"],
        settings=SnapshotSettings(chunk_size=10),
    ).run()
    assert result.per_table == {f"{db}.bag": 50}
    rows = DeltaTable(uri).to_pyarrow_table(columns=["op", "table", "ddl", "batch_seq"]).to_pylist()
    copy = [r for r in rows if r["table"] == "bag" and r["op"] in ("ddl", "r")]
    [truncate] = [r["ddl"] for r in copy if r["op"] == "ddl"]
    assert truncate.startswith("TRUNCATE TABLE")
    assert len(copy) == 51
    assert {r["batch_seq"] for r in copy} == {result.last_batch_seq}, "one commit"
    assert change_log_bag(uri, db, "bag") == source_bag(mariadb, "bag")


@pytest.mark.usefixtures("env_password")
def test_a_keyless_copy_killed_midway_leaves_the_old_table(
    mariadb: MariaDBDatabase, lake_root: Path, tmp_path: Path
) -> None:
    """`cdc-platform snapshot --table` of a large keyless table, kill -9 in the middle of the
    copy: the change log still says what it said before (the streamed rows), not a truncate
    and part of the rows; the rerun copies it whole."""
    server, db = mariadb.server, mariadb.name
    server.execute("CREATE TABLE bag (a INT, b VARCHAR(40))", database=db)
    config = _instance(mariadb, "bag", 3663)
    layout = DestinationLake.at(lake_root, "d")
    uri = layout.change_log
    _catch_up(config, layout)
    server.execute(
        "INSERT INTO bag SELECT seq % 97, REPEAT('x', seq % 40) FROM seq_1_to_100000",
        database=db,
    )
    _catch_up(config, layout)  # the rows are in the change log, streamed
    expected = source_bag(mariadb, "bag")
    assert change_log_bag(uri, db, "bag") == expected
    conf = tmp_path / "conf"
    write_conf(
        conf,
        destination="d",
        server=server,
        user=mariadb.user,
        database=db,
        lake_root=lake_root,
        server_id=3663,
    )
    _capture_only(conf, db, "bag")
    spill = tmp_path / "spill"
    spill.mkdir()
    command = [
        *(sys.executable, "-m", "cdc_platform.cli", "snapshot", "--conf", str(conf)),
        *("--destination", "d", "--table", f"{db}.bag", "--chunk-size", "1000"),
    ]
    env = {**os.environ, PASSWORD_ENV: mariadb.user.password, "TMPDIR": str(spill)}
    before = DeltaTable(uri).version()
    proc = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    try:
        # In the middle of the copy: its rows are being read (into a local spill), or a
        # commit of it has landed.
        wait_until(
            lambda: any(spill.glob("cdc-copy-*")) or DeltaTable(uri).version() > before,
            timeout=120,
            what="the copy to begin",
        )
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    got = change_log_bag(uri, db, "bag")
    assert got == expected, f"after kill -9: {sum(got.values())} rows of {sum(expected.values())}"
    rerun = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert rerun.returncode == 0, rerun.stderr
    assert not DestinationLake.at(lake_root, "d").snapshot_state.exists()
    assert change_log_bag(uri, db, "bag") == expected


def test_a_keyless_copy_outlasts_a_commit_slower_than_net_write_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A private server that drops a client it cannot write to for 2 s (`net_write_timeout`),
    a keyless table larger than the socket buffers, and a change-log commit slower than that
    (a slow lake: it lasts until the server has no read of the table open any more): the
    copy's read must not wait on the commit, or the server ends it."""
    server = MariaDBServer(tmp_path / "mariadb", server_id=21, extra_args=["--net-write-timeout=2"])
    server.start()
    try:
        user = server.create_replication_user("cdc", "slow-secret")
        monkeypatch.setenv(PASSWORD_ENV, user.password)
        server.execute(
            "CREATE DATABASE shop",
            "CREATE TABLE shop.big (n INT, pad TEXT)",
        )
        server.execute(
            "INSERT INTO big SELECT seq % 10, REPEAT('p', 10000) FROM seq_1_to_4000",
            database="shop",
        )
        config = instance_config(server, user.name, [r"shop\.big"], server_id=3664)
        layout = DestinationLake.at(tmp_path / "lake", "d")
        uri = layout.change_log
        _catch_up(config, layout)
        real_commit = DeltaChangeLog.commit
        slowed: list[int] = []

        def slow_commit(self: DeltaChangeLog, *args: Any, **kwargs: Any) -> Any:
            """The lake's first commit of the copy lasts until the server has given up on any
            read of the table it was sending (it cannot write to a client for 2 s)."""
            if kwargs.get("snapshot") is not None and not slowed:
                slowed.append(len(kwargs["snapshot"]))
                wait_until(lambda: not _reading(server, "big"), timeout=120, what="the read")
            return real_commit(self, *args, **kwargs)

        monkeypatch.setattr(DeltaChangeLog, "commit", slow_commit)
        result = SnapshotRunner(
            WriteTerm("d", config, layout),
            DestinationLake.at(tmp_path / "lake", "d").snapshot_state,
            tables=["shop.big"],
            settings=SnapshotSettings(chunk_size=50),
        ).run()
        assert slowed, "a commit of the copy was slowed"
        assert result.per_table == {"shop.big": 4000}
        bag = change_log_bag(uri, "shop", "big")
        assert sum(bag.values()) == 4000
        assert len(bag) == 10
    finally:
        server.stop()
