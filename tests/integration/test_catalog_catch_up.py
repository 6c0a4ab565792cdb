"""Catalog facts read at decode time during a catch-up across an ALTER.

The binlog's table map cannot say that a MariaDB column is UUID (it says BINARY(16)) or JSON
(LONGTEXT); the reader asks information_schema, which describes the table as it is now, and
takes each column's facts by name. A column the catalog no longer has (renamed or dropped
since the event) cannot be decoded from it: the reader refuses, naming the table and why.
Columns added or dropped beside it leave its facts usable: the catch-up goes on.
"""

from __future__ import annotations

import json

import pytest

from cdc_platform.config.models import SourceConfig
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
