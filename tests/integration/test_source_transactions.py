"""Transaction assembly against a real MariaDB: chunked transactions re-read after losses,
XA transactions, and groups the server never ended.

Every test reads through ``collect_events`` (or stops the source on a timer), so a broken
source fails a test instead of hanging it.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import pytest

from cdc_platform.config.models import SourceConfig
from cdc_platform.errors import ResumeMismatchError
from cdc_platform.events import ChangeEvent, EventKind, ResumePosition
from cdc_platform.source import BinlogSource
from cdc_platform.testing.binlog import collect_events
from tests.conftest import MariaDBDatabase

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

_SERVER_IDS = itertools.count(6600)


def _config(db: MariaDBDatabase, *, include: list[str] | None = None, **extra: Any) -> SourceConfig:
    return SourceConfig(
        host=db.server.host,
        port=db.server.port,
        user=db.user.name,
        password_env="CDC_TEST_PASSWORD",
        server_id=next(_SERVER_IDS),
        include_tables=include if include is not None else [rf"{db.name}\..*"],
        heartbeat_seconds=1.0,
        connect_timeout_seconds=5.0,
        reconnect_initial_seconds=0.1,
        reconnect_max_seconds=0.5,
        **extra,
    )


def _source(db: MariaDBDatabase, config: SourceConfig, resume: ResumePosition) -> BinlogSource:
    return BinlogSource(config, resume=resume, password=db.user.password)


def _ids(events: list[ChangeEvent]) -> list[int]:
    out = []
    for event in events:
        if event.kind is EventKind.ROW:
            image = event.after if event.after is not None else event.before
            assert image is not None
            out.append(int(json.loads(image)["id"]))
    return out


def _commits(n: int) -> Callable[[list[ChangeEvent]], bool]:
    return lambda events: sum(e.kind is EventKind.COMMIT for e in events) >= n


def _dump_threads(db: MariaDBDatabase) -> list[int]:
    return [
        int(row[0])
        for row in db.server.query("SHOW PROCESSLIST")
        if row[4] == "Binlog Dump" and row[1] == db.user.name
    ]


@contextmanager
def _killer(db: MariaDBDatabase, kills: int, delay: float) -> Iterator[list[int]]:
    """KILL each new binlog dump thread of the CDC user ``delay`` s after it appears, ``kills``
    times; yields the list of killed thread ids."""
    killed: list[int] = []
    done = threading.Event()

    def run() -> None:
        while len(killed) < kills and not done.is_set():
            fresh = [t for t in _dump_threads(db) if t not in killed]
            if not fresh:
                done.wait(0.01)
                continue
            done.wait(delay)
            for thread in fresh:
                try:
                    db.server.execute(f"KILL CONNECTION {thread}")
                except Exception:  # it may have gone already
                    pass
                killed.append(thread)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    try:
        yield killed
    finally:
        done.set()
        worker.join(timeout=10)


# -- chunked transactions ----------------------------------------------------------------------


def _tables(db: MariaDBDatabase) -> None:
    db.server.execute(
        "CREATE TABLE big (id INT PRIMARY KEY, pad CHAR(100) NOT NULL DEFAULT '')",
        "CREATE TABLE other (id INT PRIMARY KEY)",
        database=db.name,
    )


def _position(db: MariaDBDatabase, config: SourceConfig) -> ResumePosition:
    return BinlogSource(config, password=db.user.password).current_position()


def test_losses_while_re_reading_a_committed_prefix_emit_it_once(db_big: Any) -> None:
    """A checkpoint inside a big transaction (its first rows committed in chunks); the dump
    connection is killed several times while the source re-reads that committed prefix: no row
    of the prefix comes out again, every later row exactly once."""
    db, config, start, total = db_big
    prefix = total * 3 // 4
    first = collect_events(_source(db, config, start), lambda ev: len(ev) >= prefix, timeout=60)
    checkpoint = first[prefix - 1].resume_after()
    assert checkpoint.skip_events == prefix
    source = _source(db, config, checkpoint)
    with _killer(db, kills=3, delay=0.15) as killed:
        events = collect_events(source, _commits(1), timeout=120)
    assert _ids(events) == list(range(prefix + 1, total + 1))
    assert [e.index for e in events] == list(range(prefix, total + 1))
    assert len(killed) == 3
    assert source.reconnects >= 3


def test_a_resume_inside_another_transaction_is_refused(db_big: Any) -> None:
    db, config, start, _total = db_big
    first = collect_events(_source(db, config, start), lambda ev: len(ev) >= 10, timeout=60)
    checkpoint = first[9].resume_after()
    db.server.execute("INSERT INTO other VALUES (1), (2), (3)", database=db.name)
    after = _position(db, config)
    db.server.execute("INSERT INTO other VALUES (4), (5), (6)", database=db.name)
    # The same skip, but at the start of another transaction (a checkpoint that does not fit
    # the binlog, e.g. a rewritten binlog or an edited checkpoint):
    moved = replace(checkpoint, file=after.file, pos=after.pos, gtid_set=after.gtid_set)
    with pytest.raises(ResumeMismatchError, match="is not the transaction"):
        collect_events(_source(db, config, moved), _commits(1), timeout=30)


def test_a_filter_change_under_a_chunked_checkpoint_is_refused(db_big: Any) -> None:
    db, config, start, _total = db_big
    first = collect_events(_source(db, config, start), lambda ev: len(ev) >= 10, timeout=60)
    checkpoint = first[9].resume_after()
    wider = _config(db, include=[*config.include_tables, rf"{db.name}\.other"])
    with pytest.raises(ResumeMismatchError, match="table filters changed"):
        collect_events(_source(db, wider, checkpoint), _commits(1), timeout=30)
    # Without a partial transaction, a filter change is fine.
    boundary = collect_events(_source(db, config, start), _commits(1), timeout=60)[-1]
    assert boundary.resume_after().skip_events == 0
    db.server.execute("INSERT INTO other VALUES (7)", database=db.name)
    events = collect_events(_source(db, wider, boundary.resume_after()), _commits(1))
    assert _ids(events) == [7]


@pytest.fixture
def db_big(mariadb: MariaDBDatabase) -> tuple[MariaDBDatabase, SourceConfig, ResumePosition, int]:
    total = 60_000
    config = _config(mariadb, include=[rf"{mariadb.name}\.big"])
    _tables(mariadb)
    start = _position(mariadb, config)
    mariadb.server.execute(
        f"INSERT INTO big (id, pad) SELECT seq, REPEAT('p', 100) FROM seq_1_to_{total}",
        database=mariadb.name,
    )
    return mariadb, config, start, total


# -- XA ----------------------------------------------------------------------------------------


def _xa(db: MariaDBDatabase, xid: str, *statements: str, end: str) -> None:
    with db.server.connect(db.name) as conn, conn.cursor() as cur:
        cur.execute(f"XA START '{xid}'")
        for statement in statements:
            cur.execute(statement)
        cur.execute(f"XA END '{xid}'")
        if end == "prepare":
            cur.execute(f"XA PREPARE '{xid}'")
        else:
            cur.execute(f"XA {end}")


def test_xa_transactions_are_captured_as_the_server_commits_them(
    mariadb: MariaDBDatabase,
) -> None:
    db = mariadb
    db.server.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)", database=db.name)
    config = _config(db)
    start = _position(db, config)
    _xa(db, "a", "INSERT INTO t VALUES (1, 1)", "INSERT INTO t VALUES (2, 2)", end="prepare")
    _xa(db, "b", "INSERT INTO t VALUES (3, 3)", end="prepare")
    db.server.execute("INSERT INTO t VALUES (10, 10)", database=db.name)
    _xa(db, "c", "INSERT INTO t VALUES (4, 4)", end="COMMIT 'c' ONE PHASE")
    _xa(db, "d", "INSERT INTO t VALUES (5, 5)", end="ROLLBACK 'd'")
    db.server.execute("XA ROLLBACK 'b'", database=db.name)
    db.server.execute("XA COMMIT 'a'", database=db.name)
    db.server.execute("INSERT INTO t VALUES (11, 11)", database=db.name)
    events = collect_events(_source(db, config, start), lambda ev: 11 in _ids(ev))
    assert _ids(events) == [10, 4, 1, 2, 11]
    by_txn = [[e.kind for e in group] for _, group in itertools.groupby(events, lambda e: e.txn)]
    assert by_txn == [
        [EventKind.ROW, EventKind.COMMIT],
        [EventKind.ROW, EventKind.COMMIT],
        [EventKind.ROW, EventKind.ROW, EventKind.COMMIT],
        [EventKind.ROW, EventKind.COMMIT],
    ]
    committed = events[4:7]
    assert [e.index for e in committed] == [0, 1, 2]
    # The XA rows belong to the XA COMMIT's group, in the order the server committed.
    assert committed[0].txn.gtid != events[0].txn.gtid
    assert all(b.position >= a.position for a, b in itertools.pairwise(events))


def test_a_checkpoint_between_xa_prepare_and_commit_still_gets_the_rows(
    mariadb: MariaDBDatabase,
) -> None:
    db = mariadb
    db.server.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)", database=db.name)
    config = _config(db)
    start = _position(db, config)
    _xa(db, "p", "INSERT INTO t VALUES (1, 1)", "UPDATE t SET v = 9 WHERE id = 1", end="prepare")
    db.server.execute("INSERT INTO t VALUES (10, 10)", database=db.name)
    db.server.execute("XA COMMIT 'p'", database=db.name)
    db.server.execute("INSERT INTO t VALUES (11, 11)", database=db.name)
    before = collect_events(_source(db, config, start), _commits(1))
    assert _ids(before) == [10]
    checkpoint = before[-1].resume_after()
    after = collect_events(_source(db, config, checkpoint), _commits(2))
    assert _ids(after) == [1, 1, 11]
    assert [e.kind for e in after] == [
        EventKind.ROW, EventKind.ROW, EventKind.COMMIT, EventKind.ROW, EventKind.COMMIT,
    ]  # fmt: skip
    # And a checkpoint inside the XA COMMIT's rows resumes inside them.
    middle = after[0].resume_after()
    assert middle.skip_events == 1
    again = collect_events(_source(db, config, middle), _commits(1))
    assert [(e.kind, e.index) for e in again] == [(EventKind.ROW, 1), (EventKind.COMMIT, 2)]


# -- groups without an end -----------------------------------------------------------------------


def test_a_group_cut_off_by_the_end_of_its_binlog_is_not_emitted(
    mariadb: MariaDBDatabase,
) -> None:
    """The server dies and the last group of its binlog lost its COMMIT (Xid) event: the
    rows of that group were never committed in the binlog and must not be captured."""
    db = mariadb
    server = db.server
    server.execute("CREATE TABLE t (id INT PRIMARY KEY)", database=db.name)
    config = _config(db)
    start = _position(db, config)
    server.execute("INSERT INTO t VALUES (1)", database=db.name)
    server.execute("INSERT INTO t VALUES (2), (3)", database=db.name)
    end = _position(db, config)
    last = server.query(f"SHOW BINLOG EVENTS IN '{end.file}'")[-1]
    assert last[2] == "Xid" and last[4] == end.pos
    server.kill()
    binlog = server.datadir / end.file
    with binlog.open("r+b") as handle:
        handle.truncate(int(last[1]))  # cut the Xid event off
    server.start()
    server.execute("INSERT INTO t VALUES (4)", database=db.name)
    events = collect_events(_source(db, config, start), lambda ev: 4 in _ids(ev), timeout=30)
    assert _ids(events) == [1, 4]
    assert [e.kind for e in events] == [EventKind.ROW, EventKind.COMMIT, EventKind.ROW]
