"""BinlogSource against a real MariaDB: transactions, DDL, rotation, restarts, resume, gaps.

Every test reads through ``collect_events``, which stops the source after a timeout, so a broken
source fails a test instead of hanging it.
"""

from __future__ import annotations

import itertools
import json
import logging
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pymysql
import pytest

from cdc_platform.config.source import SourceConfig
from cdc_platform.errors import (
    BinlogGapError,
    SourceConnectionError,
    SourceSettingsError,
)
from cdc_platform.events import ChangeEvent, EventKind, Op, ResumePosition
from cdc_platform.source import BinlogSource
from cdc_platform.testing.binlog import collect_events
from cdc_platform.testing.mariadb import MariaDBServer
from cdc_platform.testing.processes import free_port, wait_for
from cdc_platform.testing.server_names import unique_name

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

_SERVER_IDS = itertools.count(6100)


def _config(mariadb: Any, *, include: list[str] | None = None, **overrides: Any) -> SourceConfig:
    values: dict[str, Any] = {
        "host": mariadb.server.host,
        "port": mariadb.server.port,
        "user": mariadb.user.name,
        "password_env": "CDC_TEST_PASSWORD",
        "server_id": next(_SERVER_IDS),
        "include_tables": include if include is not None else [rf"{mariadb.name}\..*"],
        "heartbeat_seconds": 1.0,
        "connect_timeout_seconds": 5.0,
        "reconnect_initial_seconds": 0.1,
        "reconnect_max_seconds": 1.0,
    }
    values.update(overrides)
    return SourceConfig(**values)


def _source(mariadb: Any, config: SourceConfig, resume: ResumePosition | None) -> BinlogSource:
    return BinlogSource(config, resume=resume, password=mariadb.user.password)


def _start(mariadb: Any, config: SourceConfig) -> ResumePosition:
    return _source(mariadb, config, None).current_position()


def _rows(events: list[ChangeEvent]) -> list[ChangeEvent]:
    return [e for e in events if e.kind is EventKind.ROW]


def _count(kind: EventKind, n: int) -> Callable[[list[ChangeEvent]], bool]:
    return lambda events: sum(e.kind is kind for e in events) >= n


def _at_least(n: int) -> Callable[[list[ChangeEvent]], bool]:
    return lambda events: len(events) >= n


def _after(event: ChangeEvent) -> dict[str, Any]:
    assert event.after is not None
    return json.loads(event.after)


def _key(event: ChangeEvent) -> tuple[Any, ...]:
    """Everything that must be identical when the same event is read twice."""
    return (
        event.kind,
        event.position,
        event.index,
        event.db,
        event.table,
        event.op,
        event.pk,
        event.before,
        event.after,
        event.ddl,
        event.txn.start,
        event.txn.gtid,
        event.txn.gtid_set_before,
    )


# -- settings and grants --------------------------------------------------------------------------


def test_check_reports_the_server(mariadb: Any) -> None:
    config = _config(mariadb)
    info = _source(mariadb, config, None).check()
    assert info.is_mariadb
    assert "MariaDB" in info.version
    assert info.server_id == 1
    assert info.position.file.startswith("mysql-bin.")
    assert info.gtid_binlog_pos
    assert info.gtid_binlog_pos.startswith("0-1-")
    current = _source(mariadb, config, None).current_position()
    assert current.file == info.position.file
    assert current.pos >= info.position.pos
    assert current.gtid_set
    assert current.gtid_set.startswith("0-1-")


def test_check_names_every_wrong_binlog_setting(tmp_path: Path) -> None:
    server = MariaDBServer(
        tmp_path,
        binlog_args=[
            "--log-bin=mysql-bin",
            "--binlog-format=STATEMENT",
            "--binlog-row-image=MINIMAL",
            "--binlog-row-metadata=MINIMAL",
        ],
    )
    with server:
        user = server.create_replication_user("cdc", "pw")
        config = SourceConfig(
            host=server.host, port=server.port, user=user.name, password_env="X", server_id=77
        )
        with pytest.raises(SourceSettingsError) as caught:
            BinlogSource(config, password=user.password).check()
    message = str(caught.value)
    assert "binlog_row_image is MINIMAL; set binlog_row_image=FULL in the server config" in message
    assert "binlog_format is STATEMENT; set binlog_format=ROW" in message
    assert "binlog_row_metadata is MINIMAL; set binlog_row_metadata=FULL" in message
    assert "log_bin" not in message.split("cannot be used for lossless CDC:")[1]


def test_check_with_binlog_off(tmp_path: Path) -> None:
    server = MariaDBServer(tmp_path, binlog_args=[])
    with server:
        user = server.create_replication_user("cdc", "pw")
        config = SourceConfig(
            host=server.host, port=server.port, user=user.name, password_env="X", server_id=77
        )
        source = BinlogSource(config, password=user.password)
        with pytest.raises(SourceSettingsError, match=r"binary logging is off \(log_bin=OFF\)"):
            source.check()
        with pytest.raises(SourceSettingsError, match="log_bin"):
            source.current_position()


def test_user_without_replication_slave_gets_a_clear_error(mariadb: Any) -> None:
    server = mariadb.server
    user = unique_name("noslave")
    server.execute(
        f"CREATE OR REPLACE USER '{user}'@'%' IDENTIFIED BY 'pw1'",
        f"GRANT SELECT, REPLICATION CLIENT ON *.* TO '{user}'@'%'",
    )
    try:
        config = _config(mariadb, user=user)
        source = BinlogSource(config, password="pw1")
        with pytest.raises(SourceSettingsError) as caught:
            source.check()
        assert "lacks REPLICATION SLAVE;" in str(caught.value)
        assert f"GRANT REPLICATION SLAVE ON *.* TO '{user}'@'%'" in str(caught.value)
        assert "PASSWORD" not in str(caught.value)  # SHOW GRANTS lines carry the hash
        # Streaming anyway fails with the same kind of error, not a retry loop.
        with pytest.raises(SourceSettingsError, match="lacks a privilege"):
            collect_events(BinlogSource(config, password="pw1"), lambda _: True, timeout=10)
    finally:
        server.execute(f"DROP USER '{user}'@'%'")


def test_grant_advice_names_the_account_the_server_matched(mariadb: Any) -> None:
    server = mariadb.server
    user = unique_name("localslave")
    server.execute(
        f"CREATE OR REPLACE USER '{user}'@'127.0.0.1' IDENTIFIED BY 'pw3'",
        f"GRANT SELECT, REPLICATION CLIENT ON *.* TO '{user}'@'127.0.0.1'",
    )
    try:
        source = BinlogSource(_config(mariadb, user=user), password="pw3")
        with pytest.raises(SourceSettingsError) as caught:
            source.check()
        assert f"user '{user}'@'127.0.0.1' lacks REPLICATION SLAVE" in str(caught.value)
        assert f"ON *.* TO '{user}'@'127.0.0.1'" in str(caught.value)
    finally:
        server.execute(f"DROP USER '{user}'@'127.0.0.1'")


def test_user_with_only_replication_slave_is_told_every_missing_grant(mariadb: Any) -> None:
    server = mariadb.server
    user = unique_name("onlyslave")
    server.execute(
        f"CREATE OR REPLACE USER '{user}'@'%' IDENTIFIED BY 'pw2'",
        f"GRANT REPLICATION SLAVE ON *.* TO '{user}'@'%'",
    )
    try:
        source = BinlogSource(_config(mariadb, user=user), password="pw2")
        with pytest.raises(SourceSettingsError) as caught:
            source.check()
        assert "lacks REPLICATION CLIENT, SELECT;" in str(caught.value)
    finally:
        server.execute(f"DROP USER '{user}'@'%'")


def test_wrong_password_is_not_retried_and_not_echoed(mariadb: Any) -> None:
    source = BinlogSource(_config(mariadb), password="not-the-Secret-123")
    with pytest.raises(SourceConnectionError) as caught:
        source.check()
    assert "access denied" in str(caught.value)
    assert "not-the-Secret-123" not in str(caught.value)
    assert caught.value.transient is False


def test_unreachable_server_is_a_transient_connection_error(mariadb: Any) -> None:
    source = BinlogSource(_config(mariadb, port=free_port()), password="pw")
    with pytest.raises(SourceConnectionError) as caught:
        source.current_position()
    assert caught.value.transient is True


# -- rows and transactions -----------------------------------------------------------------------


def test_insert_update_delete_carry_before_and_after(mariadb: Any) -> None:
    config = _config(mariadb)
    start = _start(mariadb, config)
    mariadb.server.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))",
        "INSERT INTO t VALUES (1, 'a'), (2, 'b')",
        "UPDATE t SET v = 'c' WHERE id = 1",
        "UPDATE t SET id = 3 WHERE id = 2",
        "DELETE FROM t WHERE id = 1",
        database=mariadb.name,
    )
    events = collect_events(_source(mariadb, config, start), _count(EventKind.ROW, 5))
    rows = _rows(events)
    assert [(e.op, e.pk, e.before, e.after) for e in rows] == [
        (Op.INSERT, '{"id":1}', None, '{"id":1,"v":"a"}'),
        (Op.INSERT, '{"id":2}', None, '{"id":2,"v":"b"}'),
        (Op.UPDATE, '{"id":1}', '{"id":1,"v":"a"}', '{"id":1,"v":"c"}'),
        (Op.UPDATE, '{"id":3}', '{"id":2,"v":"b"}', '{"id":3,"v":"b"}'),
        (Op.DELETE, '{"id":1}', '{"id":1,"v":"c"}', None),
    ]
    assert all(e.db == mariadb.name and e.table == "t" for e in rows)
    ddl = events[0]
    assert ddl.kind is EventKind.DDL
    assert ddl.op is Op.DDL
    assert ddl.table == "t"
    assert ddl.ddl is not None
    assert ddl.ddl.startswith("CREATE TABLE t")
    kinds = [e.kind for e in events]
    assert kinds[:4] == [EventKind.DDL, EventKind.ROW, EventKind.ROW, EventKind.COMMIT]
    # Every event's position moves forward; the transactions follow one another.
    assert [e.sort_key() for e in events] == sorted(e.sort_key() for e in events)
    commits = [e for e in events if e.kind is EventKind.COMMIT]
    for before, after in itertools.pairwise([ddl, *commits]):
        assert after.txn.start == before.position
        assert after.txn.gtid_set_before == before.txn.gtid_set_after
    assert all(e.txn.server_id == 1 and e.txn.timestamp > time.time() - 120 for e in events)


def test_table_without_primary_key_uses_all_columns_as_pk(mariadb: Any) -> None:
    config = _config(mariadb)
    start = _start(mariadb, config)
    mariadb.server.execute(
        "CREATE TABLE nopk (a INT, b VARCHAR(5))",
        "INSERT INTO nopk VALUES (1, 'x')",
        "CREATE TABLE cpk (a INT, b INT, c INT, PRIMARY KEY (b, a))",
        "INSERT INTO cpk VALUES (1, 2, 3)",
        database=mariadb.name,
    )
    rows = _rows(collect_events(_source(mariadb, config, start), _count(EventKind.ROW, 2)))
    assert rows[0].pk == '{"a":1,"b":"x"}' == rows[0].after
    assert rows[1].pk == '{"b":2,"a":1}'


def test_multi_statement_transaction_is_one_transaction_with_one_commit(mariadb: Any) -> None:
    config = _config(mariadb)
    mariadb.server.execute(
        "CREATE TABLE a (id INT PRIMARY KEY)",
        "CREATE TABLE b (id INT PRIMARY KEY)",
        database=mariadb.name,
    )
    start = _start(mariadb, config)
    with mariadb.server.connect(mariadb.name) as conn, conn.cursor() as cur:
        cur.execute("BEGIN")
        cur.execute("INSERT INTO a VALUES (1), (2)")
        cur.execute("INSERT INTO b VALUES (10)")
        cur.execute("UPDATE a SET id = 3 WHERE id = 2")
        cur.execute("DELETE FROM b WHERE id = 10")
        cur.execute("COMMIT")
    events = collect_events(_source(mariadb, config, start), _count(EventKind.COMMIT, 1))
    assert [e.kind for e in events] == [EventKind.ROW] * 5 + [EventKind.COMMIT]
    assert [e.index for e in events] == list(range(6))
    assert len({id(e.txn) for e in events}) == 1
    assert [(e.table, e.op) for e in events[:5]] == [
        ("a", Op.INSERT), ("a", Op.INSERT), ("b", Op.INSERT), ("a", Op.UPDATE), ("b", Op.DELETE),
    ]  # fmt: skip
    assert events[0].txn.start == start.binlog_position
    assert events[-1].resume_after().skip_events == 0


def test_rolled_back_transactions_never_appear(mariadb: Any) -> None:
    config = _config(mariadb)
    mariadb.server.execute("CREATE TABLE t (id INT PRIMARY KEY)", database=mariadb.name)
    start = _start(mariadb, config)
    with mariadb.server.connect(mariadb.name) as conn, conn.cursor() as cur:
        cur.execute("BEGIN")
        cur.execute("INSERT INTO t VALUES (1)")
        cur.execute("ROLLBACK")
        cur.execute("BEGIN")
        cur.execute("INSERT INTO t VALUES (2)")
        cur.execute("SAVEPOINT s1")
        cur.execute("INSERT INTO t VALUES (3)")
        cur.execute("ROLLBACK TO SAVEPOINT s1")
        cur.execute("COMMIT")
        cur.execute("INSERT INTO t VALUES (4)")
    events = collect_events(_source(mariadb, config, start), _count(EventKind.COMMIT, 2))
    assert [_after(e)["id"] for e in _rows(events)] == [2, 4]
    assert [e.kind for e in events] == [EventKind.ROW, EventKind.COMMIT] * 2


def test_non_transactional_tables_end_with_a_commit_query(mariadb: Any) -> None:
    config = _config(mariadb)
    mariadb.server.execute(
        "CREATE TABLE m (id INT PRIMARY KEY) ENGINE=MyISAM", database=mariadb.name
    )
    start = _start(mariadb, config)
    mariadb.server.execute("INSERT INTO m VALUES (1), (2)", database=mariadb.name)
    events = collect_events(_source(mariadb, config, start), _count(EventKind.COMMIT, 1))
    assert [e.kind for e in events] == [EventKind.ROW, EventKind.ROW, EventKind.COMMIT]
    assert events[-1].index == 2


def test_ddl_mid_stream_is_its_own_event_and_later_rows_use_new_names(mariadb: Any) -> None:
    config = _config(mariadb)
    mariadb.server.execute("CREATE TABLE t (id INT PRIMARY KEY, a INT)", database=mariadb.name)
    start = _start(mariadb, config)
    mariadb.server.execute(
        "INSERT INTO t VALUES (1, 10)",
        "ALTER TABLE t ADD COLUMN b VARCHAR(5) DEFAULT 'x'",
        "INSERT INTO t VALUES (2, 20, 'y')",
        "ALTER TABLE t RENAME COLUMN a TO a2",
        "INSERT INTO t VALUES (3, 30, 'z')",
        "UPDATE t SET a2 = 11 WHERE id = 1",
        database=mariadb.name,
    )
    events = collect_events(_source(mariadb, config, start), _count(EventKind.ROW, 4))
    ddls = [e for e in events if e.kind is EventKind.DDL]
    assert [d.ddl for d in ddls] == [
        "ALTER TABLE t ADD COLUMN b VARCHAR(5) DEFAULT 'x'",
        "ALTER TABLE t RENAME COLUMN a TO a2",
    ]
    assert all(d.db == mariadb.name and d.table == "t" and d.index == 0 for d in ddls)
    assert all(d.resume_after().skip_events == 0 for d in ddls)
    rows = _rows(events)
    assert [_after(e) for e in rows] == [
        {"id": 1, "a": 10},
        {"id": 2, "a": 20, "b": "y"},
        {"id": 3, "a2": 30, "b": "z"},
        {"id": 1, "a2": 11, "b": "x"},
    ]
    assert rows[3].before == '{"id":1,"a2":10,"b":"x"}'


def test_create_table_select_emits_the_ddl_after_its_rows(mariadb: Any) -> None:
    """MariaDB logs CREATE ... SELECT as one transaction: DDL, rows, Xid. A DDL event ends a
    transaction, so it comes last and the transaction still resumes as a whole."""
    config = _config(mariadb)
    mariadb.server.execute(
        "CREATE TABLE src (id INT PRIMARY KEY)", "INSERT INTO src VALUES (1), (2)",
        database=mariadb.name,
    )  # fmt: skip
    start = _start(mariadb, config)
    mariadb.server.execute("CREATE TABLE dst SELECT * FROM src", database=mariadb.name)
    events = collect_events(_source(mariadb, config, start), _count(EventKind.DDL, 1))
    assert [(e.kind, e.table) for e in events] == [
        (EventKind.ROW, "dst"), (EventKind.ROW, "dst"), (EventKind.DDL, "dst"),
    ]  # fmt: skip
    assert events[2].ddl is not None
    assert events[2].ddl.startswith("CREATE TABLE `")
    assert events[2].index == 2
    assert len({id(e.txn) for e in events}) == 1


def test_statement_based_dml_is_refused(mariadb: Any) -> None:
    config = _config(mariadb)
    mariadb.server.execute("CREATE TABLE t (id INT PRIMARY KEY)", database=mariadb.name)
    start = _start(mariadb, config)
    with mariadb.server.connect(mariadb.name) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION binlog_format = 'STATEMENT'")
        cur.execute("INSERT INTO t VALUES (1)")
    with pytest.raises(SourceSettingsError, match="statement-based DML"):
        collect_events(_source(mariadb, config, start), lambda _: False, timeout=10)


def test_a_session_with_a_minimal_row_image_is_refused(mariadb: Any) -> None:
    config = _config(mariadb)
    mariadb.server.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, a INT, b INT)", "INSERT INTO t VALUES (1, 2, 3)",
        database=mariadb.name,
    )  # fmt: skip
    start = _start(mariadb, config)
    with mariadb.server.connect(mariadb.name) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION binlog_row_image = 'MINIMAL'")
        cur.execute("UPDATE t SET a = 5 WHERE id = 1")
    with pytest.raises(SourceSettingsError, match="binlog_row_image=FULL"):
        collect_events(_source(mariadb, config, start), lambda _: False, timeout=10)


# -- filters ---------------------------------------------------------------------------------


def test_ddl_in_an_executable_comment_names_its_table(mariadb: Any) -> None:
    """The server runs the code of ``/*!...*/`` and ``/*M!...*/``: so does the stream."""
    config = _config(mariadb)
    mariadb.server.execute("CREATE TABLE t (id INT PRIMARY KEY, a INT)", database=mariadb.name)
    start = _start(mariadb, config)
    mariadb.server.execute(
        "/*!100100 ALTER TABLE t ADD COLUMN b INT DEFAULT 7 */",
        "/*M!100100 ALTER TABLE t RENAME COLUMN a TO a2 */",
        "INSERT INTO t VALUES (1, 10, 8)",
        database=mariadb.name,
    )
    events = collect_events(_source(mariadb, config, start), _count(EventKind.ROW, 1))
    ddls = [e for e in events if e.kind is EventKind.DDL]
    assert [(d.db, d.table) for d in ddls] == [(mariadb.name, "t")] * 2
    assert [_after(e) for e in _rows(events)] == [{"id": 1, "a2": 10, "b": 8}]


def test_include_and_exclude_filters_rows_and_ddl(mariadb: Any) -> None:
    db = mariadb.name
    config = _config(mariadb, include=[rf"{db}\.(keep|drop_me)", rf"{db}\.other_.*"],
                     exclude_tables=[rf"{db}\.drop_me"])  # fmt: skip
    start = _start(mariadb, config)
    mariadb.server.execute(
        "CREATE TABLE keep (id INT PRIMARY KEY)",
        "CREATE TABLE drop_me (id INT PRIMARY KEY)",
        "CREATE TABLE ignored (id INT PRIMARY KEY)",
        "CREATE TABLE other_1 (id INT PRIMARY KEY)",
        "INSERT INTO ignored VALUES (1)",
        "INSERT INTO drop_me VALUES (1)",
        "INSERT INTO keep VALUES (1)",
        "INSERT INTO other_1 VALUES (1)",
        "DROP TABLE ignored",
        "INSERT INTO keep VALUES (2)",
        database=db,
    )
    events = collect_events(_source(mariadb, config, start), _count(EventKind.ROW, 3))
    assert [(e.table, _after(e)["id"]) for e in _rows(events)] == [
        ("keep", 1), ("other_1", 1), ("keep", 2),
    ]  # fmt: skip
    assert [e.table for e in events if e.kind is EventKind.DDL] == ["keep", "other_1"]


def test_multi_table_ddl_is_recorded_once_per_captured_table(mariadb: Any) -> None:
    """DROP TABLE a, b and RENAME TABLE c TO d reach every captured table they name (before,
    only the first one), and a resume inside the statement's group skips what landed."""
    db = mariadb.name
    config = _config(mariadb, include=[rf"{db}\.[a-d]"])
    mariadb.server.execute(
        *[f"CREATE TABLE {t} (id INT PRIMARY KEY)" for t in ("a", "b", "c", "n")], database=db
    )
    start = _start(mariadb, config)
    mariadb.server.execute("DROP TABLE a, n, `b`", "RENAME TABLE c TO d", database=db)
    events = collect_events(_source(mariadb, config, start), _count(EventKind.DDL, 2))
    ddl = [(e.kind, e.table, e.index, e.ddl) for e in events if e.op is Op.DDL]
    assert ddl == [
        (EventKind.ROW, "a", 0, "DROP TABLE `a`,`n`,`b` /* generated by server */"),
        (EventKind.DDL, "b", 1, "DROP TABLE `a`,`n`,`b` /* generated by server */"),
        (EventKind.ROW, "c", 0, "RENAME TABLE c TO d"),
        (EventKind.DDL, "d", 1, "RENAME TABLE c TO d"),
    ]
    first = next(e for e in events if e.op is Op.DDL)
    resumed = collect_events(
        _source(mariadb, config, first.resume_after()), _count(EventKind.DDL, 2)
    )
    assert [(e.table, e.index) for e in resumed if e.op is Op.DDL] == [("b", 1), ("c", 0), ("d", 1)]


def test_filtered_transactions_emit_their_commit_at_most_once_per_second(mariadb: Any) -> None:
    db = mariadb.name
    config = _config(mariadb, include=[rf"{db}\.captured"])
    mariadb.server.execute(
        "CREATE TABLE captured (id INT PRIMARY KEY)", "CREATE TABLE noise (id INT PRIMARY KEY)",
        database=db,
    )  # fmt: skip
    start = _start(mariadb, config)
    began = time.monotonic()
    with mariadb.server.connect(db) as conn, conn.cursor() as cur:
        for i in range(200):
            cur.execute(f"INSERT INTO noise VALUES ({i})")
    elapsed = time.monotonic() - began
    end = _start(mariadb, config)
    # After the burst the server goes idle: the held-back COMMIT comes with the heartbeat.
    events = collect_events(
        _source(mariadb, config, start),
        lambda evs: evs[-1].position == end.binlog_position,
        timeout=15,
    )
    assert events
    assert all(e.kind is EventKind.COMMIT and e.index == 0 for e in events)
    assert len(events) <= elapsed + 2, (len(events), elapsed)
    assert events[-1].resume_after() == ResumePosition(end.file, end.pos, end.gtid_set)


# -- rotation, restart, stop -----------------------------------------------------------------


def test_rotation_mid_stream_loses_nothing(mariadb: Any) -> None:
    config = _config(mariadb)
    mariadb.server.execute("CREATE TABLE t (id INT PRIMARY KEY)", database=mariadb.name)
    start = _start(mariadb, config)
    for i in range(1, 31):
        mariadb.server.execute(f"INSERT INTO t VALUES ({i})", database=mariadb.name)
        if i in (10, 20):
            mariadb.server.execute("FLUSH BINARY LOGS")
    events = collect_events(_source(mariadb, config, start), _count(EventKind.ROW, 30))
    assert [_after(e)["id"] for e in _rows(events)] == list(range(1, 31))
    files = sorted({e.position.file for e in events})
    assert len(files) == 3
    # Transactions follow one another (a new file may start with a binlog checkpoint event).
    for before, after in itertools.pairwise([e for e in events if e.kind is EventKind.COMMIT]):
        assert after.txn.start >= before.position


def test_restart_during_streaming_loses_and_duplicates_nothing(mariadb: Any) -> None:
    server = mariadb.server
    config = _config(mariadb)
    server.execute("CREATE TABLE t (id INT PRIMARY KEY)", database=mariadb.name)
    start = _start(mariadb, config)
    source = _source(mariadb, config, start)
    seen: list[ChangeEvent] = []
    reader = threading.Thread(
        target=lambda: seen.extend(collect_events(source, _count(EventKind.ROW, 100), timeout=90))
    )
    reader.start()
    for i in range(1, 51):
        server.execute(f"INSERT INTO t VALUES ({i})", database=mariadb.name)
    restart = threading.Thread(target=server.restart)
    restart.start()
    restart.join(timeout=60)
    for i in range(51, 101):
        server.execute(f"INSERT INTO t VALUES ({i})", database=mariadb.name)
    reader.join(timeout=90)
    assert not reader.is_alive()
    assert [_after(e)["id"] for e in _rows(seen)] == list(range(1, 101))
    assert source.reconnects >= 1
    keys = [(e.position, e.index) for e in seen]
    assert len(keys) == len(set(keys))


@pytest.mark.parametrize("resume_by", ["file", "gtid"])
def test_connection_killed_mid_transaction_resumes_inside_it(
    mariadb: Any, caplog: pytest.LogCaptureFixture, resume_by: str
) -> None:
    """A big transaction; the dump connection is killed after some of its rows were
    consumed: the source re-reads the transaction and skips what it already emitted."""
    server = mariadb.server
    config = _config(mariadb, resume_by=resume_by)
    server.execute(
        "CREATE TABLE big (id INT PRIMARY KEY, pad CHAR(200) NOT NULL DEFAULT '')",
        database=mariadb.name,
    )
    start = _start(mariadb, config)
    server.execute(
        "INSERT INTO big (id, pad) SELECT seq, REPEAT('p', 200) FROM seq_1_to_100000",
        database=mariadb.name,
    )
    source = _source(mariadb, config, start)
    events: list[ChangeEvent] = []
    stream = source.events()
    timer = threading.Timer(60, source.stop)
    timer.start()
    killed = False
    with caplog.at_level(logging.WARNING, logger="cdc_platform.source"):
        try:
            for event in stream:
                events.append(event)
                if len(events) == 500 and not killed:
                    killed = True
                    for row in server.query("SHOW PROCESSLIST"):
                        if row[4] == "Binlog Dump" and row[1] == mariadb.user.name:
                            server.execute(f"KILL CONNECTION {row[0]}")
                if event.kind is EventKind.COMMIT:
                    break
        finally:
            timer.cancel()
            source.stop()
            stream.close()
    assert killed
    assert source.reconnects >= 1
    assert re.search(r"reconnect 1 in .* from mysql-bin\.\d+:\d+ \+\d+ events", caplog.text)
    if resume_by == "gtid":
        assert "Start binlog_dump" in server.error_log(200)
        assert "using_gtid(1)" in server.error_log(200)
    assert [e.index for e in events] == list(range(100001))
    assert [_after(e)["id"] for e in _rows(events)] == list(range(1, 100001))
    assert len({e.txn for e in events}) == 1


def test_stop_ends_the_stream_promptly_while_blocked_and_while_backing_off(
    tmp_path: Path,
) -> None:
    server = MariaDBServer(tmp_path)
    with server:
        user = server.create_replication_user("cdc", "pw")
        config = SourceConfig(
            host=server.host, port=server.port, user=user.name, password_env="X",
            server_id=78, heartbeat_seconds=30.0, reconnect_initial_seconds=30.0,
            reconnect_max_seconds=60.0,
        )  # fmt: skip
        # Blocked in recv (no traffic, heartbeat far away):
        source = BinlogSource(config, password=user.password)
        threading.Timer(1.0, source.stop).start()
        began = time.monotonic()
        assert list(source.events()) == []
        assert time.monotonic() - began < 3.0
        # Backing off after the server died:
        source = BinlogSource(config, password=user.password)
        threading.Timer(1.0, server.kill).start()
        threading.Timer(2.5, source.stop).start()
        began = time.monotonic()
        assert list(source.events()) == []
        assert time.monotonic() - began < 4.0
        assert source.reconnects == 1


# -- resume ------------------------------------------------------------------------------------


def _workload(mariadb: Any) -> None:
    with mariadb.server.connect(mariadb.name) as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c')")
        cur.execute("BEGIN")
        cur.execute("INSERT INTO t VALUES (4, 'd')")
        cur.execute("UPDATE t SET v = 'x' WHERE id <= 2")
        cur.execute("DELETE FROM t WHERE id = 3")
        cur.execute("COMMIT")
        cur.execute("ALTER TABLE t ADD COLUMN w INT")
        cur.execute("INSERT INTO t VALUES (5, 'e', 50)")


@pytest.mark.parametrize("resume_by", ["file", "gtid"])
def test_resume_after_any_event_continues_with_the_next_one(mariadb: Any, resume_by: str) -> None:
    config = _config(mariadb, resume_by=resume_by)
    mariadb.server.execute("CREATE TABLE t (id INT PRIMARY KEY, v CHAR(1))", database=mariadb.name)
    start = _start(mariadb, config)
    _workload(mariadb)
    reference = collect_events(_source(mariadb, config, start), _count(EventKind.COMMIT, 3))
    kinds = [e.kind for e in reference]
    assert kinds == [EventKind.ROW] * 3 + [EventKind.COMMIT] + [EventKind.ROW] * 4 + [
        EventKind.COMMIT, EventKind.DDL, EventKind.ROW, EventKind.COMMIT,
    ]  # fmt: skip
    # After a COMMIT, rows in the middle and at the end of a transaction, the DDL, and the
    # row of a single-row transaction:
    for i in (3, 5, 7, 9, 10):
        resume = reference[i].resume_after()
        if i in (5, 7, 10):
            assert resume.skip_events == reference[i].index + 1
        if resume_by == "gtid":
            assert resume.gtid_set is not None
        expected = reference[i + 1 :]
        got = collect_events(_source(mariadb, config, resume), _at_least(len(expected)))
        assert [_key(e) for e in got] == [_key(e) for e in expected], i


def test_resume_with_skip_events_mid_transaction(mariadb: Any) -> None:
    config = _config(mariadb)
    mariadb.server.execute("CREATE TABLE t (id INT PRIMARY KEY)", database=mariadb.name)
    start = _start(mariadb, config)
    with mariadb.server.connect(mariadb.name) as conn, conn.cursor() as cur:
        cur.execute("BEGIN")
        for i in range(1, 6):
            cur.execute(f"INSERT INTO t VALUES ({i})")
        cur.execute("COMMIT")
    resume = ResumePosition(start.file, start.pos, start.gtid_set, skip_events=3)
    events = collect_events(_source(mariadb, config, resume), _count(EventKind.COMMIT, 1))
    assert [(e.kind, e.index) for e in events] == [
        (EventKind.ROW, 3), (EventKind.ROW, 4), (EventKind.COMMIT, 5),
    ]  # fmt: skip
    assert [_after(e)["id"] for e in _rows(events)] == [4, 5]
    assert events[0].txn.start == start.binlog_position


def test_resume_from_a_purged_binlog_is_a_gap(mariadb: Any) -> None:
    server = mariadb.server
    mariadb.server.execute("CREATE TABLE t (id INT PRIMARY KEY)", database=mariadb.name)
    file_config = _config(mariadb)
    gtid_config = _config(mariadb, resume_by="gtid")
    old = _start(mariadb, file_config)
    server.execute("INSERT INTO t VALUES (1)", database=mariadb.name)
    server.execute("FLUSH BINARY LOGS")
    server.execute("INSERT INTO t VALUES (2)", database=mariadb.name)
    newest = _start(mariadb, file_config).file
    server.execute(f"PURGE BINARY LOGS TO '{newest}'")
    with pytest.raises(BinlogGapError) as caught:
        collect_events(_source(mariadb, file_config, old), lambda _: True, timeout=10)
    assert str(caught.value).startswith(
        f"binlog {old.file} was purged; the change log cannot be continued without loss; "
        "take a new snapshot (cdc-platform snapshot) or reset the checkpoint"
    )
    with pytest.raises(BinlogGapError, match="transactions were purged"):
        collect_events(_source(mariadb, gtid_config, old), lambda _: True, timeout=10)
    # A position past the end of an existing file is refused too, not silently skipped.
    current = _start(mariadb, file_config)
    beyond = ResumePosition(current.file, current.pos + 10_000, current.gtid_set)
    with pytest.raises(BinlogGapError, match="beyond the end"):
        collect_events(_source(mariadb, file_config, beyond), lambda _: True, timeout=10)


def test_gtid_resume_ahead_of_the_server_is_refused(mariadb: Any) -> None:
    config = _config(mariadb, resume_by="gtid")
    current = _start(mariadb, config)
    assert current.gtid_set
    domain, server_id, seq = current.gtid_set.split(",")[0].split("-")
    ahead = ResumePosition(current.file, current.pos, f"{domain}-{server_id}-{int(seq) + 100}")
    with pytest.raises(BinlogGapError, match="ahead of the server's binlog"):
        collect_events(_source(mariadb, config, ahead), lambda _: True, timeout=10)


def test_charsets_without_a_python_codec_are_decoded(mariadb: Any) -> None:
    """swe7 has no Python codec; the source decodes it with MySQL's own table (charsets.py)."""
    config = _config(mariadb)
    start = _start(mariadb, config)
    mariadb.server.execute(
        "CREATE TABLE odd (id INT PRIMARY KEY, s VARCHAR(5) CHARACTER SET swe7)",
        "INSERT INTO odd VALUES (1, X'615B')",
        database=mariadb.name,
    )
    events = collect_events(_source(mariadb, config, start), _count(EventKind.ROW, 1))
    row = next(e for e in events if e.kind is EventKind.ROW)
    assert row.after == '{"id":1,"s":"aÄ"}'


def test_stop_ends_the_servers_dump_thread_at_once(mariadb: Any) -> None:
    """A dump thread left behind would pin its binlog file against PURGE until it noticed
    the closed connection at its next heartbeat."""
    config = _config(mariadb, heartbeat_seconds=30.0)
    start = _start(mariadb, config)
    mariadb.server.execute("CREATE TABLE t (id INT PRIMARY KEY)", database=mariadb.name)
    collect_events(_source(mariadb, config, start), _count(EventKind.DDL, 1))

    def dumps() -> list[Any]:
        return [r for r in mariadb.server.query("SHOW PROCESSLIST") if r[4] == "Binlog Dump"]

    # well before the next heartbeat (30 s) would have shown the dump its closed connection
    wait_for(
        lambda: not dumps(), "the dump thread to end", timeout=10, diagnose=lambda: str(dumps())
    )


def test_server_errors_are_translated(mariadb: Any) -> None:
    source = _source(mariadb, _config(mariadb), None)
    refused = pymysql.err.OperationalError(1236, "could not find GTID")
    error = source.binlog_server.mysql.error(refused, "x")
    assert isinstance(error, BinlogGapError)
