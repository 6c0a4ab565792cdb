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
