"""Catalog facts read at decode time during a catch-up across an ALTER.

The binlog's table map cannot say that a MariaDB column is UUID (it says BINARY(16)) or JSON
(LONGTEXT); the reader asks information_schema, which describes the table as it is now, and
takes each column's facts by name. A column the catalog no longer has (renamed or dropped
since the event) cannot be decoded from it: the reader refuses, naming the table and why.
Columns added or dropped beside it leave its facts usable: the catch-up goes on.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from cdc_platform.config.source import SourceConfig
from cdc_platform.errors import SourceError
from cdc_platform.events import EventKind
from cdc_platform.source import BinlogSource
from cdc_platform.testing.binlog import collect_events
from tests.conftest import MariaDBDatabase

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _config(mariadb: MariaDBDatabase, server_id: int) -> SourceConfig:
    return SourceConfig(
        host=mariadb.server.host,
        port=mariadb.server.port,
        user=mariadb.user.name,
        password_env="CDC_TEST_PASSWORD",
        server_id=server_id,
        include_tables=[rf"{mariadb.name}\..*"],
        reconnect_initial_seconds=0.1,
        reconnect_max_seconds=1.0,
    )


def test_a_catch_up_across_a_rename_refuses_todays_catalog(mariadb: MariaDBDatabase) -> None:
    server, db = mariadb.server, mariadb.name
    server.execute("CREATE TABLE t (id INT PRIMARY KEY, c BINARY(16))", database=db)
    start = server.binlog_position()
    server.execute(
        "INSERT INTO t VALUES (1, UNHEX('00112233445566778899AABBCCDDEEFF'))", database=db
    )
    server.execute("ALTER TABLE t CHANGE c c2 UUID, ADD COLUMN n INT", database=db)
    config = _config(mariadb, 2491)
    source = BinlogSource(config, resume=start, password=mariadb.user.password)
    with pytest.raises(SourceError, match=rf"{db}\.t: .*another definition") as caught:
        collect_events(source, lambda events: any(e.kind is EventKind.ROW for e in events))
    assert "its column(s) c are not in information_schema" in str(caught.value)


def test_a_catch_up_across_an_added_column_goes_on(
    mariadb: MariaDBDatabase, caplog: pytest.LogCaptureFixture
) -> None:
    """A JSON column, then ADD COLUMN: old rows decode with the JSON column's facts."""
    server, db = mariadb.server, mariadb.name
    server.execute("CREATE TABLE j (id INT PRIMARY KEY, doc JSON)", database=db)
    start = server.binlog_position()
    server.execute("""INSERT INTO j VALUES (1, '{"a": 1}')""", database=db)
    server.execute("ALTER TABLE j ADD COLUMN w INT", database=db)
    server.execute("""INSERT INTO j VALUES (2, '[true]', 7)""", database=db)
    source = BinlogSource(_config(mariadb, 2493), resume=start, password=mariadb.user.password)
    events = collect_events(
        source, lambda events: sum(e.kind is EventKind.ROW for e in events) >= 2
    )
    rows = [json.loads(e.after or "{}") for e in events if e.kind is EventKind.ROW]
    assert [row["id"] for row in rows] == [1, 2]
    assert "definition changed" in caplog.text


def test_the_same_definition_decodes_as_before(mariadb: MariaDBDatabase) -> None:
    """No ALTER: the UUID column comes out as its text, as always."""
    server, db = mariadb.server, mariadb.name
    server.execute("CREATE TABLE u (id INT PRIMARY KEY, c UUID)", database=db)
    start = server.binlog_position()
    server.execute("INSERT INTO u VALUES (1, '00112233-4455-6677-8899-aabbccddeeff')", database=db)
    source = BinlogSource(_config(mariadb, 2492), resume=start, password=mariadb.user.password)
    events = collect_events(source, lambda events: any(e.kind is EventKind.ROW for e in events))
    rows = [json.loads(e.after or "{}") for e in events if e.kind is EventKind.ROW]
    assert rows == [{"id": 1, "c": "00112233-4455-6677-8899-aabbccddeeff"}]


def test_a_catch_up_across_a_type_change_the_binlog_cannot_see_refuses(
    mariadb: MariaDBDatabase,
) -> None:
    """BINARY(16), then UUID: the table map of the old row says BINARY(16) either way and
    information_schema says UUID today, so the old row would come out as UUID text. The
    reader finds the ALTER after the event in the binlog and stops, saying what to do."""
    server, db = mariadb.server, mariadb.name
    server.execute("CREATE TABLE b (id INT PRIMARY KEY, c BINARY(16))", database=db)
    start = server.binlog_position()
    server.execute(
        "INSERT INTO b VALUES (1, UNHEX('00112233445566778899AABBCCDDEEFF'))", database=db
    )
    server.execute("ALTER TABLE b MODIFY c UUID", database=db)
    source = BinlogSource(_config(mariadb, 2494), resume=start, password=mariadb.user.password)
    with pytest.raises(SourceError, match=rf"{db}\.b: column\(s\) c may have changed type"):
        collect_events(source, lambda events: any(e.kind is EventKind.ROW for e in events))


def test_a_catch_up_across_char_to_uuid_decodes_old_rows_by_the_event(
    mariadb: MariaDBDatabase,
) -> None:
    """CHAR(36), then UUID, beside a UUID key that needs the catalog: the old row's table map
    says CHAR (a charset, 144 bytes), which cannot carry a UUID, so the event's own type
    wins: the value and the column's type in the change log are the old ones, exactly."""
    server, db = mariadb.server, mariadb.name
    server.execute("CREATE TABLE c (id UUID PRIMARY KEY, c CHAR(36))", database=db)
    start = server.binlog_position()
    old = "0A1B2C3D-4E5F-6071-8293-A4B5C6D7E8F9"  # as CHAR, not the UUID's lowercase text
    server.execute(
        f"INSERT INTO c VALUES ('00112233-4455-6677-8899-aabbccddeeff', '{old}')", database=db
    )
    server.execute("ALTER TABLE c MODIFY c UUID", database=db)
    server.execute(
        "INSERT INTO c VALUES ('00000000-0000-0000-0000-000000000001', "
        "'12345678-9abc-4def-8123-456789abcdef')",
        database=db,
    )
    source = BinlogSource(_config(mariadb, 2495), resume=start, password=mariadb.user.password)
    events = collect_events(
        source, lambda events: sum(e.kind is EventKind.ROW for e in events) >= 2
    )
    rows = [e for e in events if e.kind is EventKind.ROW]
    images = [json.loads(e.after or "{}") for e in rows]
    assert images == [
        {"id": "00112233-4455-6677-8899-aabbccddeeff", "c": old},
        {"id": "00000000-0000-0000-0000-000000000001", "c": "12345678-9abc-4def-8123-456789abcdef"},
    ]
    types = [{col["name"]: col["type"] for col in json.loads(e.columns or "[]")} for e in rows]
    assert types == [{"id": "uuid", "c": "char"}, {"id": "uuid", "c": "uuid"}]


def test_a_catch_up_across_changed_enum_labels_outside_utf8_refuses(
    mariadb: MariaDBDatabase,
) -> None:
    """latin1 ENUM('é','b'), then ENUM('b','é'): the table map's label 'é' is not UTF-8 and
    comes out lost, today's labels have the same count but another order, so the old row
    (index 1, 'é') would read 'b'. The reader finds the ALTER naming the column and stops."""
    server, db = mariadb.server, mariadb.name
    server.execute(
        "CREATE TABLE e (id INT PRIMARY KEY, e ENUM('é','b') CHARACTER SET latin1)", database=db
    )
    start = server.binlog_position()
    server.execute("INSERT INTO e VALUES (1, 'é')", database=db)
    server.execute("ALTER TABLE e MODIFY e ENUM('b','é') CHARACTER SET latin1", database=db)
    source = BinlogSource(_config(mariadb, 2496), resume=start, password=mariadb.user.password)
    with pytest.raises(SourceError, match=rf"{db}\.e: column\(s\) e may have changed type"):
        collect_events(source, lambda events: any(e.kind is EventKind.ROW for e in events))


def test_the_same_table_name_in_another_database_does_not_stop_a_catch_up(
    mariadb: MariaDBDatabase,
) -> None:
    """A UUID column (BINARY(16) in the table map), then ADD COLUMN (so the reader asks the
    binlog's history), then ``CREATE TABLE other.orders`` from the same session: that
    statement names another database's table, so the catch-up of this one goes on, its UUID
    values decoded (issue 42.7: it stopped the reader, naming the CREATE TABLE)."""
    server, db = mariadb.server, mariadb.name
    other = f"{db}_other"
    server.execute("CREATE TABLE orders (id INT PRIMARY KEY, u UUID)", database=db)
    start = server.binlog_position()
    server.execute(
        "INSERT INTO orders VALUES (1, '00112233-4455-6677-8899-aabbccddeeff')", database=db
    )
    server.execute("ALTER TABLE orders ADD COLUMN w INT", database=db)
    server.execute(f"CREATE DATABASE `{other}`")
    try:
        server.execute(
            f"CREATE TABLE `{other}`.orders (id INT PRIMARY KEY, u BINARY(16))",
            "CREATE USER IF NOT EXISTS 'orders'@'%'",
            "DROP USER 'orders'@'%'",
            "CREATE TABLE order_lines (id INT PRIMARY KEY, FOREIGN KEY (id) REFERENCES orders(id))",
            "ALTER  TABLE orders ADD COLUMN v INT",
            database=db,
        )
        server.execute(
            "INSERT INTO orders VALUES (2, '00000000-0000-0000-0000-000000000002', 7, 8)",
            database=db,
        )
        source = BinlogSource(_config(mariadb, 2497), resume=start, password=mariadb.user.password)
        events = collect_events(
            source, lambda events: sum(e.kind is EventKind.ROW for e in events) >= 2
        )
    finally:
        server.execute(f"DROP DATABASE `{other}`")
    rows = [json.loads(e.after or "{}") for e in events if e.kind is EventKind.ROW]
    assert rows == [
        {"id": 1, "u": "00112233-4455-6677-8899-aabbccddeeff"},
        {"id": 2, "u": "00000000-0000-0000-0000-000000000002", "w": 7, "v": 8},
    ]


def test_an_executable_comment_changing_a_type_stops_a_catch_up(mariadb: MariaDBDatabase) -> None:
    """``/*!100100 ALTER TABLE b MODIFY c UUID */``: MariaDB runs the comment's body, so the
    BINARY(16) row before it must not be decoded as a UUID (issue 42.7: the comment counted
    as touching nothing and the old row came out as UUID text)."""
    server, db = mariadb.server, mariadb.name
    server.execute("CREATE TABLE b (id INT PRIMARY KEY, c BINARY(16))", database=db)
    start = server.binlog_position()
    server.execute(
        "INSERT INTO b VALUES (1, UNHEX('00112233445566778899AABBCCDDEEFF'))", database=db
    )
    server.execute("/*!100100 ALTER TABLE b MODIFY c UUID */", database=db)
    assert server.query(
        "SELECT DATA_TYPE FROM information_schema.COLUMNS "
        f"WHERE TABLE_SCHEMA = '{db}' AND TABLE_NAME = 'b' AND COLUMN_NAME = 'c'"
    ) == [("uuid",)]
    source = BinlogSource(_config(mariadb, 2498), resume=start, password=mariadb.user.password)
    with pytest.raises(SourceError, match=rf"{db}\.b: column\(s\) c may have changed type"):
        collect_events(source, lambda events: any(e.kind is EventKind.ROW for e in events))


class _Counting:
    """The source's control connection, counting the binlog events ``SHOW BINLOG EVENTS``
    returns to it (what a history scan reads) and how often it is asked."""

    def __init__(self, conn: Any, counts: dict[str, int]) -> None:
        self._conn, self._counts = conn, counts

    def cursor(self, *args: Any) -> _CountingCursor:
        return _CountingCursor(self._conn.cursor(*args), self._counts)

    def __enter__(self) -> _Counting:
        return self

    def __exit__(self, *exc: object) -> None:
        self._conn.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


class _CountingCursor:
    def __init__(self, cur: Any, counts: dict[str, int]) -> None:
        self._cur, self._counts, self._scan = cur, counts, False

    def __enter__(self) -> _CountingCursor:
        return self

    def __exit__(self, *exc: object) -> None:
        self._cur.close()

    def execute(self, sql: str, args: Any = None) -> Any:
        self._scan = sql.startswith("SHOW BINLOG EVENTS")
        self._counts["scans"] += self._scan
        return self._cur.execute(sql, args)

    def __iter__(self) -> Iterator[Any]:
        for row in self._cur:
            self._counts["events"] += self._scan
            yield row

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cur, name)


def test_a_catch_up_across_many_ddl_reads_the_history_once(
    mariadb: MariaDBDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A BINARY(16) table, a CREATE TABLE of another table after every few rows, ADD COLUMN
    at the end: every DDL makes the reader ask the history again for the next table map.
    Each binlog event of the backlog is read by ``SHOW BINLOG EVENTS`` at most once over
    the catch-up (issue 42.8: each question scanned to the binlog's end again, so a backlog
    with DDL every few thousand events was read once per DDL, in the reader thread)."""
    server, db = mariadb.server, mariadb.name
    server.execute("CREATE TABLE h (id INT PRIMARY KEY, c BINARY(16))", database=db)
    start = server.binlog_position()
    ddl = 8
    statements = []
    for i in range(ddl * 3):
        statements.append(f"INSERT INTO h VALUES ({i}, UNHEX(MD5({i})))")
        if i % 3 == 2:
            statements.append(f"CREATE TABLE side_{i} (id INT PRIMARY KEY)")
    server.execute(*statements, "ALTER TABLE h ADD COLUMN w INT", database=db)
    end = server.binlog_position()
    assert end.file == start.file  # one file: the backlog's events counted below
    backlog = len(server.query(f"SHOW BINLOG EVENTS IN '{start.file}' FROM {start.pos}"))
    counts = {"scans": 0, "events": 0}
    source = BinlogSource(_config(mariadb, 2499), resume=start, password=mariadb.user.password)
    connect = source.binlog_server.connect
    monkeypatch.setattr(source.binlog_server, "connect", lambda: _Counting(connect(), counts))
    events = collect_events(
        source, lambda events: sum(e.kind is EventKind.ROW for e in events) >= ddl * 3
    )
    assert [json.loads(e.after or "{}")["id"] for e in events if e.kind is EventKind.ROW] == list(
        range(ddl * 3)
    )
    assert counts["scans"] >= ddl  # asked again after each DDL: the test shows the repeat
    assert counts["events"] <= backlog
