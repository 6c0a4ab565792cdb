"""Transaction assembly against a real MariaDB: chunked transactions re-read after losses,
XA transactions, and groups the server never ended.

Every test reads through ``collect_events`` (or stops the source on a timer), so a broken
source fails a test instead of hanging it.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from cdc_platform.config.source import SourceConfig
from cdc_platform.errors import ResumeMismatchError
from cdc_platform.events import ChangeEvent, EventKind, ResumePosition
from cdc_platform.source import BinlogSource
from cdc_platform.testing.binlog import collect_events
from cdc_platform.testing.crash import start_run, wait_for_change_log, while_running
from cdc_platform.testing.destinations import PASSWORD_ENV, write_conf
from cdc_platform.testing.processes import wait_for
from cdc_platform.testing.replay import replay
from cdc_platform.testing.server_names import (
    global_variable,
    unique_xid,
    wait_until_disconnected,
    xid_text,
)
from cdc_platform.testing.workload import source_rows
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
    """Until the n-th COMMIT (looking at the newest event only: streams are long)."""
    seen = [0]

    def until(events: list[ChangeEvent]) -> bool:
        seen[0] += events[-1].kind is EventKind.COMMIT
        return seen[0] >= n

    return until


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
    stale = set(_dump_threads(db))  # of readers already stopped
    done = threading.Event()

    def run() -> None:
        while len(killed) < kills and not done.is_set():
            fresh = [t for t in _dump_threads(db) if t not in killed and t not in stale]
            if not fresh:
                done.wait(0.01)
                continue
            done.wait(delay)
            for thread in fresh:
                with contextlib.suppress(Exception):  # it may have gone already
                    db.server.execute(f"KILL CONNECTION {thread}")
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
        "CREATE TABLE big (id INT PRIMARY KEY, pad VARCHAR(3000) NOT NULL DEFAULT '')",
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
    with _killer(db, kills=3, delay=0.1) as killed:
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
    total = 20_000  # x 3 KB: far more than the socket buffers hold, so a KILL cuts the read
    config = _config(mariadb, include=[rf"{mariadb.name}\.big"])
    _tables(mariadb)
    start = _position(mariadb, config)
    mariadb.server.execute(
        f"INSERT INTO big (id, pad) SELECT seq, REPEAT('p', 3000) FROM seq_1_to_{total}",
        database=mariadb.name,
    )
    return mariadb, config, start, total


# -- XA ----------------------------------------------------------------------------------------


def _xa(db: MariaDBDatabase, xid: str, *statements: str, end: str) -> None:
    """XIDs are server-wide: tests pass :func:`unique_xid`'s. A prepared one is returned once
    the server has ended the preparing connection (only then can another commit it)."""
    with db.server.connect(db.name) as conn, conn.cursor() as cur:
        cur.execute("SELECT CONNECTION_ID()")
        (thread,) = cur.fetchone()
        cur.execute(f"XA START '{xid}'")
        for statement in statements:
            cur.execute(statement)
        cur.execute(f"XA END '{xid}'")
        if end == "prepare":
            cur.execute(f"XA PREPARE '{xid}'")
        else:
            cur.execute(f"XA {end}")
    if end == "prepare":
        wait_until_disconnected(db.server, thread)


def test_xa_transactions_are_captured_as_the_server_commits_them(
    mariadb: MariaDBDatabase,
) -> None:
    db = mariadb
    db.server.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)", database=db.name)
    config = _config(db)
    start = _position(db, config)
    a, b, c, d = (unique_xid(label) for label in "abcd")
    _xa(db, a, "INSERT INTO t VALUES (1, 1)", "INSERT INTO t VALUES (2, 2)", end="prepare")
    _xa(db, b, "INSERT INTO t VALUES (3, 3)", end="prepare")
    db.server.execute("INSERT INTO t VALUES (10, 10)", database=db.name)
    _xa(db, c, "INSERT INTO t VALUES (4, 4)", end=f"COMMIT '{c}' ONE PHASE")
    _xa(db, d, "INSERT INTO t VALUES (5, 5)", end=f"ROLLBACK '{d}'")
    db.server.execute(f"XA ROLLBACK '{b}'", database=db.name)
    db.server.execute(f"XA COMMIT '{a}'", database=db.name)
    db.server.execute("INSERT INTO t VALUES (11, 11)", database=db.name)
    events = collect_events(_source(db, config, start), _commits(5))
    assert _ids(events) == [10, 4, 1, 2, 11]
    by_txn = [[e.kind for e in group] for _, group in itertools.groupby(events, lambda e: e.txn)]
    assert by_txn == [
        [EventKind.ROW, EventKind.COMMIT],
        [EventKind.ROW, EventKind.COMMIT],
        [EventKind.COMMIT],  # XA ROLLBACK of b: nothing, but the checkpoint moves past it
        [EventKind.ROW, EventKind.ROW, EventKind.COMMIT],
        [EventKind.ROW, EventKind.COMMIT],
    ]
    committed = events[5:8]
    assert [e.index for e in committed] == [0, 1, 2]
    # The XA rows belong to the XA COMMIT's group, in the order the server committed.
    assert committed[0].txn.xa_resolves == xid_text(a)
    assert events[4].txn.xa_resolves == xid_text(b)
    assert committed[-1].resume_after().xa_prepared == ()
    assert all(b.position >= a.position for a, b in itertools.pairwise(events))


def test_a_checkpoint_between_xa_prepare_and_commit_still_gets_the_rows(
    mariadb: MariaDBDatabase,
) -> None:
    db = mariadb
    db.server.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)", database=db.name)
    config = _config(db)
    start = _position(db, config)
    p = unique_xid("p")
    _xa(db, p, "INSERT INTO t VALUES (1, 1)", "UPDATE t SET v = 9 WHERE id = 1", end="prepare")
    db.server.execute("INSERT INTO t VALUES (10, 10)", database=db.name)
    db.server.execute(f"XA COMMIT '{p}'", database=db.name)
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


def test_a_prepared_xa_in_the_oldest_retained_binlog_is_said_loudly(
    mariadb: MariaDBDatabase, caplog: pytest.LogCaptureFixture
) -> None:
    """A prepared XA transaction is read again from its group at every restart: once the
    server purges that binlog the destination cannot restart, so a restart whose prepared
    group is in the oldest retained binlog warns (and one after its commit does not)."""
    db = mariadb
    db.server.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)", database=db.name)
    config = _config(db)
    start = _position(db, config)
    old = unique_xid("old")
    _xa(db, old, "INSERT INTO t VALUES (1, 1)", end="prepare")
    try:
        db.server.execute("INSERT INTO t VALUES (10, 10)", database=db.name)
        checkpoint = collect_events(_source(db, config, start), _commits(1))[-1].resume_after()
        assert [xa.file for xa in checkpoint.xa_prepared] == [start.file]
        db.server.execute("FLUSH BINARY LOGS", f"PURGE BINARY LOGS TO '{start.file}'")
        db.server.execute("INSERT INTO t VALUES (11, 11)", database=db.name)
        with caplog.at_level(logging.WARNING):
            again = collect_events(_source(db, config, checkpoint), _commits(1))
        assert _ids(again) == [11]
        warned = [r.getMessage() for r in caplog.records if "oldest binlog" in r.getMessage()]
        assert len(warned) == 1
        assert xid_text(old).split(",")[0] in warned[0]
        assert "XA RECOVER" in warned[0]
    finally:
        db.server.execute(f"XA COMMIT '{old}'", database=db.name)
    resolved = collect_events(_source(db, config, again[-1].resume_after()), _commits(1))
    assert _ids(resolved) == [1]  # the XA COMMIT's rows
    assert resolved[-1].resume_after().xa_prepared == ()
    db.server.execute("INSERT INTO t VALUES (12, 12)", database=db.name)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        later = collect_events(_source(db, config, resolved[-1].resume_after()), _commits(1))
    assert _ids(later) == [12]
    assert "oldest binlog" not in caplog.text


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
    assert last[2] == "Xid"
    assert last[4] == end.pos
    server.kill()
    binlog = server.datadir / end.file
    with binlog.open("r+b") as handle:
        handle.truncate(int(last[1]))  # cut the Xid event off
    server.start()
    server.execute("INSERT INTO t VALUES (4)", database=db.name)
    events = collect_events(_source(db, config, start), lambda ev: 4 in _ids(ev), timeout=30)
    assert _ids(events) == [1, 4]
    assert [e.kind for e in events] == [EventKind.ROW, EventKind.COMMIT, EventKind.ROW]


# -- the whole pipeline: kill -9 inside a chunked transaction ------------------------------------


def _checkpoint(uri: str) -> ResumePosition | None:
    """The resume position of the change log's newest commit (None before the first)."""
    try:
        history = DeltaTable(uri).history(5)
    except Exception:  # not created yet, or a commit file being written
        return None
    for info in history:
        text = info.get("cdc.resume_position")
        if text is not None:
            return ResumePosition.from_json(str(text))
    return None


@pytest.mark.timeout(400)
def test_kill_nine_inside_a_chunked_transaction_then_losses_while_re_reading(
    mariadb: MariaDBDatabase, tmp_path: Path
) -> None:
    """A transaction many times the store's size is committed in chunks; the pipeline is
    killed -9 after a chunk, restarted, and its binlog connection is killed repeatedly while
    it re-reads the committed prefix: every row is in the change log exactly once."""
    db = mariadb
    total = 20_000
    db.server.execute(
        "CREATE TABLE big (id INT PRIMARY KEY, pad VARCHAR(3000) NOT NULL)", database=db.name
    )
    conf, lake, destination = tmp_path / "conf", tmp_path / "lake", "chunked"
    write_conf(
        conf, destination=destination, server=db.server, user=db.user, database=db.name,
        lake_root=lake, server_id=next(_SERVER_IDS),
    )  # fmt: skip
    instance = conf / "destinations" / destination / "instance.yaml"
    # A 4 MB store, 1 MB batches: the ~60 MB transaction goes in ~60 chunks.
    text = instance.read_text().replace("buffer_size: 1024", "buffer_size: 4096")
    instance.write_text(text.replace("batch_size: 64", "batch_size: 1024"))
    uri = str(lake / destination / "changes")
    env = {**os.environ, PASSWORD_ENV: db.user.password}
    log = tmp_path / "run.log"
    proc = start_run(conf, destination, env, log)
    try:
        wait_for_change_log(uri, proc)
        db.server.execute(
            f"INSERT INTO big SELECT seq, REPEAT('q', 3000) FROM seq_1_to_{total}",
            database=db.name,
        )

        def deep_inside() -> bool:
            resume = _checkpoint(uri)
            return resume is not None and resume.skip_events >= total // 2

        what = "a checkpoint half-way into the transaction"
        wait_for(while_running(proc, deep_inside, what), what, timeout=180)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        inside = _checkpoint(uri)
        assert inside is not None
        assert inside.skip_events >= total // 2
        with _killer(db, kills=3, delay=0.1) as killed:
            proc = start_run(conf, destination, env, log)
            what = "three kills of the dump thread"
            wait_for(while_running(proc, lambda: len(killed) == 3, what), what, timeout=180)

        def past() -> bool:
            resume = _checkpoint(uri)
            return resume is not None and resume.skip_events == 0 and resume.pos > inside.pos

        what = "the end of the transaction in the change log"
        wait_for(while_running(proc, past, what), what, timeout=180)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    logged = log.read_text(errors="replace")
    assert "reconnect 1 in" in logged, logged[-3000:]
    result = replay(uri)
    assert not result.duplicates, (
        f"{len(result.duplicates)} rows twice, e.g. {result.duplicates[:3]}"
    )
    assert not result.seq_gaps
    assert not result.problems
    assert result.tables[f"{db.name}.big"] == source_rows(db.server, db.name, "big")


def _spill_files() -> list[str]:
    """This process's open spill files (anonymous: removed from the directory at once)."""
    out = []
    for fd in Path("/proc/self/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if "cdc-xa-" in target:
                out.append(target)
    return out


def test_a_prepared_xa_beyond_the_memory_budget_is_spilled_and_comes_out_exact(
    mariadb: MariaDBDatabase,
) -> None:
    """A prepared XA transaction's rows beyond ``xa_memory_bytes`` wait in a local file, while
    the source says how long it has waited; at its XA COMMIT, and after a restart that reads
    it again, every row comes out exactly, in order."""
    db = mariadb
    db.server.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(300))", database=db.name)
    config = _config(db, xa_memory_bytes=2000)
    start = _position(db, config)
    values = {i: f"{i:03d}-" + "é" * 150 for i in range(1, 41)}
    big = unique_xid("big")
    _xa(db, big, *(f"INSERT INTO t VALUES ({i}, '{v}')" for i, v in values.items()), end="prepare")
    committed = False
    try:
        db.server.execute("INSERT INTO t VALUES (100, 'plain')", database=db.name)
        source = _source(db, config, start)
        seen: dict[str, Any] = {}

        def until(events: list[ChangeEvent]) -> bool:
            nonlocal committed
            if events[-1].kind is EventKind.COMMIT and not seen:
                seen.update(
                    age=source.oldest_prepared_xa_age(),
                    memory=source.xa_memory_bytes,
                    spills=_spill_files(),
                    checkpoint=events[-1].resume_after(),
                )
                db.server.execute(f"XA COMMIT '{big}'", database=db.name)
                committed = True
                db.server.execute("INSERT INTO t VALUES (101, 'after')", database=db.name)
            return sum(e.kind is EventKind.COMMIT for e in events) >= 3

        events = collect_events(source, until)
    finally:
        if not committed:
            db.server.execute(f"XA ROLLBACK '{big}'", database=db.name)
    assert seen["age"] is not None
    assert seen["age"] >= 0
    assert 0 < seen["memory"] <= 2000, "the held rows beyond the budget are not in memory"
    assert len(seen["spills"]) == 1
    assert source.oldest_prepared_xa_age() is None  # resolved
    expected = [100, *values, 101]
    assert _ids(events) == expected
    images = [json.loads(e.after or "{}") for e in events if e.kind is EventKind.ROW]
    assert {row["id"]: row["v"] for row in images[1:-1]} == values
    # A restart from the checkpoint that lists the prepared transaction reads it again,
    # spilled the same way, and emits it at its XA COMMIT.
    checkpoint = seen["checkpoint"]
    assert [xa.xid for xa in checkpoint.xa_prepared] == [xid_text(big)]
    again = collect_events(_source(db, config, checkpoint), _commits(2))
    assert _ids(again) == expected[1:]
    images = [json.loads(e.after or "{}") for e in again if e.kind is EventKind.ROW]
    assert {row["id"]: row["v"] for row in images[:-1]} == values


def test_the_binlog_retention_is_read_from_the_server(mariadb: MariaDBDatabase) -> None:
    """What the prepared-XA age is compared with: binlog_expire_logs_seconds, else
    expire_logs_days (a whole day here, far above this test's binlogs' age)."""
    server = mariadb.server
    before = server.query("SELECT @@GLOBAL.binlog_expire_logs_seconds")[0][0]
    source = _source(mariadb, _config(mariadb), ResumePosition("x", 4))
    try:
        server.execute("SET GLOBAL binlog_expire_logs_seconds = 86400")
        assert source.binlog_server.retention_seconds() == 86400
        server.execute("SET GLOBAL binlog_expire_logs_seconds = 0")
        assert source.binlog_server.retention_seconds() == 0  # kept for ever
    finally:
        server.execute(f"SET GLOBAL binlog_expire_logs_seconds = {int(before)}")


def test_the_retention_headroom_is_the_retention_minus_the_lag(mariadb: MariaDBDatabase) -> None:
    """The gauge before a binlog gap (``cdc_binlog_retention_headroom_seconds``): a checkpoint
    committed at a source time 100 s ago has a day's retention less those 100 s left."""
    source = _source(mariadb, _config(mariadb), ResumePosition("x", 4))
    with global_variable(mariadb.server, "binlog_expire_logs_seconds", "86400"):
        left = source.binlog_retention_headroom(time.time() - 100)
    assert left is not None
    assert 86290 <= left <= 86300, left
    assert source.binlog_retention_headroom(None) is None  # nothing committed yet
