"""Whole-table copies of keyless tables: exact as a multiset, atomic for readers, and a read
that is not held across change-log commits."""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest
from deltalake import DeltaTable

from cdc_platform.backfill import table_copy
from cdc_platform.backfill.snapshot import SnapshotRunner, state_path
from cdc_platform.config.models import InstanceConfig
from cdc_platform.runtime import DestinationRuntime
from cdc_platform.sink.term import WriteTerm
from cdc_platform.testing.destinations import PASSWORD_ENV, instance_config
from tests.conftest import MariaDBDatabase

pytestmark = pytest.mark.integration

Bag = Counter[str]
"""Row images (canonical JSON) and how many times each is in the table."""


def _instance(db: MariaDBDatabase, table: str, server_id: int) -> InstanceConfig:
    return instance_config(db.server, db.user.name, [rf"{db.name}\.{table}"], server_id=server_id)


def _catch_up(config: InstanceConfig, uri: str) -> None:
    """The destination's normal run until it is idle."""
    summary = DestinationRuntime(WriteTerm("d", config, uri)).run(exit_when_idle_seconds=1.5)
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


def _wait(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


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
    uri = str(lake_root / "d" / "changes")
    _catch_up(config, uri)
    real_copy = table_copy.copy_whole_table
    cut: list[int] = []

    def copy_behind(connect: Any, *args: Any, **kwargs: Any) -> Any:
        @contextlib.contextmanager
        def lagging() -> Iterator[Any]:
            with connect() as conn:
                if not cut:
                    _wait(lambda: bool(_dumps_of(mariadb, own_user)), "the snapshot's stream")
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
            WriteTerm("d", config, uri), state_path(lake_root, "d"), tables=[f"{db}.bag"]
        ).run()
    finally:
        busy.stop()
    assert cut, "the stream's dump connection was cut"
    assert result.per_table == {f"{db}.bag": 202}
    assert busy.commits > 10
    server.execute(
        "INSERT INTO bag VALUES (8, 'after')", "DELETE FROM bag WHERE a = 0 LIMIT 1", database=db
    )
    _catch_up(config, uri)
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
    uri = str(lake_root / "d" / "changes")
    _catch_up(config, uri)
    server.execute("FLUSH BINARY LOGS")
    runner = SnapshotRunner(
        WriteTerm("d", config, uri), state_path(lake_root, "d"), tables=[f"{db}.bag"]
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
