"""Every MySQL/MariaDB column type round-trips through the binlog source exactly.

One table holds every column type; four rows hold typical values, extremes, the decode
defects of mysql-replication 1.0.17 listed in docs/types.md, and NULLs. The rows are inserted,
streamed once (module fixture) and checked per column against the values inserted, and,
where the server prints a canonical text form, against the server's own text.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from cdc_platform.config.source import SourceConfig
from cdc_platform.events import ChangeEvent, EventKind, Op
from cdc_platform.source import BinlogSource
from cdc_platform.testing.binlog import collect_events
from cdc_platform.testing.mariadb import MariaDBServer, ReplicationUser

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

_SERVER_IDS = itertools.count(5100)


def _b64(hex_text: str) -> str:
    return base64.b64encode(bytes.fromhex(hex_text)).decode()


@dataclass(frozen=True)
class Col:
    """One column: its definition, the SQL literal per row and the expected JSON value."""

    name: str
    definition: str
    values: tuple[str, str, str]
    """SQL literals for rows 1-3 (row 4 is all NULL)."""
    expected: tuple[Any, Any, Any]
    server_text: bool = False
    """The server's CAST(col AS CHAR) equals the JSON string (checked too)."""


COLUMNS = [
    # -- integers (extremes exact, BIGINT UNSIGNED max included) --
    Col("ti", "TINYINT", ("1", "-128", "127"), (1, -128, 127)),
    Col("tiu", "TINYINT UNSIGNED", ("1", "0", "255"), (1, 0, 255)),
    Col("si", "SMALLINT", ("-2", "-32768", "32767"), (-2, -32768, 32767)),
    Col("siu", "SMALLINT UNSIGNED", ("2", "0", "65535"), (2, 0, 65535)),
    Col("mi", "MEDIUMINT", ("-3", "-8388608", "8388607"), (-3, -8388608, 8388607)),
    Col("miu", "MEDIUMINT UNSIGNED", ("3", "0", "16777215"), (3, 0, 16777215)),
    Col("i", "INT", ("-4", "-2147483648", "2147483647"), (-4, -2147483648, 2147483647)),
    Col("iu", "INT UNSIGNED", ("4", "0", "4294967295"), (4, 0, 4294967295)),
    Col(
        "bi",
        "BIGINT",
        ("-5", "-9223372036854775808", "9223372036854775807"),
        (-5, -9223372036854775808, 9223372036854775807),
    ),
    Col(
        "biu",
        "BIGINT UNSIGNED",
        ("5", "0", "18446744073709551615"),
        (5, 0, 18446744073709551615),
    ),
    # -- exact and approximate numbers --
    Col(
        "dec65",
        "DECIMAL(65,30)",
        (
            "'12345678901234567890123456789012345.123456789012345678901234567890'",
            "'-99999999999999999999999999999999999.999999999999999999999999999999'",
            "'0'",
        ),
        (
            "12345678901234567890123456789012345.123456789012345678901234567890",
            "-99999999999999999999999999999999999.999999999999999999999999999999",
            "0.000000000000000000000000000000",
        ),
        server_text=True,
    ),
    Col(
        "dec10",
        "DECIMAL(10,2)",
        ("'-0.50'", "'-99999999.99'", "'0.01'"),
        ("-0.50", "-99999999.99", "0.01"),
        server_text=True,
    ),
    Col("dec5", "DECIMAL(5,0)", ("'-12345'", "'0'", "'99999'"), ("-12345", "0", "99999"), True),
    Col(
        "dec18",
        "DECIMAL(18,9)",
        ("'-123456789.000000001'", "'1.5'", "'-0.000000001'"),
        ("-123456789.000000001", "1.500000000", "-0.000000001"),
        server_text=True,
    ),
    Col(
        "dec10_10",
        "DECIMAL(10,10)",
        ("'0.1234567890'", "'-0.9999999999'", "'0'"),
        ("0.1234567890", "-0.9999999999", "0.0000000000"),
        server_text=True,
    ),
    Col("f", "FLOAT", ("1.1", "-3.40282e38", "1.17549e-38"), (1.1, -3.40282e38, 1.17549e-38)),
    Col(
        "d",
        "DOUBLE",
        ("3.141592653589793", "-1.7976931348623157e308", "2.2250738585072014e-308"),
        (3.141592653589793, -1.7976931348623157e308, 2.2250738585072014e-308),
    ),
    # -- dates and times (zero and partial dates kept literally) --
    Col(
        "dt",
        "DATE",
        ("'2024-02-29'", "'1000-01-01'", "'0000-00-00'"),
        ("2024-02-29", "1000-01-01", "0000-00-00"),
        server_text=True,
    ),
    Col(
        "dt_partial",
        "DATE",
        ("'2026-00-15'", "'9999-12-31'", "'2026-03-00'"),
        ("2026-00-15", "9999-12-31", "2026-03-00"),
        server_text=True,
    ),
    Col(
        "dtm",
        "DATETIME",
        ("'2024-02-29 13:14:15'", "'1000-01-01 00:00:00'", "'0000-00-00 00:00:00'"),
        ("2024-02-29 13:14:15", "1000-01-01 00:00:00", "0000-00-00 00:00:00"),
        server_text=True,
    ),
    Col(
        "dtm3",
        "DATETIME(3)",
        ("'2024-02-29 13:14:15.123'", "'2026-00-15 10:00:00.5'", "'0000-00-00 00:00:00'"),
        ("2024-02-29 13:14:15.123", "2026-00-15 10:00:00.500", "0000-00-00 00:00:00.000"),
        server_text=True,
    ),
    Col(
        "dtm6",
        "DATETIME(6)",
        (
            "'9999-12-31 23:59:59.999999'",
            "'1000-01-01 00:00:00.000001'",
            "'2026-01-01 00:00:00'",
        ),
        ("9999-12-31 23:59:59.999999", "1000-01-01 00:00:00.000001", "2026-01-01 00:00:00.000000"),
        server_text=True,
    ),
    Col(
        "ts",
        "TIMESTAMP NULL",
        ("'2024-02-29 13:14:15'", "'1970-01-01 00:00:01'", "'0000-00-00 00:00:00'"),
        ("2024-02-29T13:14:15Z", "1970-01-01T00:00:01Z", "0000-00-00 00:00:00"),
    ),
    Col(
        "ts6",
        "TIMESTAMP(6) NULL",
        ("'2038-01-19 03:14:07.999999'", "'2001-02-03 04:05:06.000001'", "'0000-00-00 00:00:00'"),
        (
            "2038-01-19T03:14:07.999999Z",
            "2001-02-03T04:05:06.000001Z",
            "0000-00-00 00:00:00.000000",
        ),
    ),
    Col(
        "tm",
        "TIME",
        ("'838:59:59'", "'-838:59:59'", "'-00:00:01'"),
        ("838:59:59", "-838:59:59", "-00:00:01"),
        server_text=True,
    ),
    Col(
        "tm1",
        "TIME(1)",
        ("'-00:00:00.1'", "'12:00:00.9'", "'-01:00:00.5'"),
        ("-00:00:00.1", "12:00:00.9", "-01:00:00.5"),
        server_text=True,
    ),
    Col(
        "tm3",
        "TIME(3)",
        ("'-01:00:00.250'", "'-838:59:59.999'", "'00:00:00.001'"),
        ("-01:00:00.250", "-838:59:59.999", "00:00:00.001"),
        server_text=True,
    ),
    Col(
        "tm6",
        "TIME(6)",
        ("'-12:34:56.000001'", "'-00:00:01.500000'", "'838:59:59.000000'"),
        ("-12:34:56.000001", "-00:00:01.500000", "838:59:59.000000"),
        server_text=True,
    ),
    Col("yr", "YEAR", ("2024", "1901", "'0000'"), (2024, 1901, 0)),
    # -- bits, enums, sets, JSON --
    Col("b1", "BIT(1)", ("b'1'", "b'0'", "b'1'"), ("1", "0", "1")),
    Col(
        "b10",
        "BIT(10)",
        ("b'0000000101'", "b'1111111111'", "b'1000000000'"),
        ("0000000101", "1111111111", "1000000000"),
    ),
    Col(
        "b64",
        "BIT(64)",
        ("b'1'", f"b'{'1' * 64}'", f"b'1{'0' * 63}'"),
        ("0" * 63 + "1", "1" * 64, "1" + "0" * 63),
    ),
    Col("e", "ENUM('a','b','c')", ("'c'", "'a'", "''"), ("c", "a", ""), server_text=True),
    Col("s", "SET('x','y','z')", ("'x,z'", "'y'", "''"), (["x", "z"], ["y"], [])),
    # Labels that are not UTF-8 in the table map (the library turns them into ''):
    Col(
        "e_lat1",
        "ENUM('é','it''s') CHARACTER SET latin1",
        ("'é'", "'it''s'", "''"),
        ("é", "it's", ""),
        server_text=True,
    ),
    Col(
        "s_lat1",
        "SET('ü','x') CHARACTER SET latin1",
        ("'ü,x'", "''", "'ü'"),
        (["ü", "x"], [], ["ü"]),
    ),
    Col(
        "j",
        "JSON",
        ('\'{"a": [1, 2.5, "x", null, true], "b": {"c": "é"}}\'', "'\"str\"'", "'[]'"),
        # the document's text, verbatim (docs/types.md)
        ('{"a": [1, 2.5, "x", null, true], "b": {"c": "é"}}', '"str"', "[]"),
        server_text=True,
    ),
    # -- binary strings (BINARY(n) padded back; empty values are '' base64) --
    Col(
        "bin4",
        "BINARY(4)",
        ("X'00FF0000'", "X'AB000000'", "X'00000000'"),
        (_b64("00FF0000"), _b64("AB000000"), _b64("00000000")),
    ),
    Col(
        "bin16",
        "BINARY(16)",
        ("X'0102030405060708090A0B0C0D0E0F00'", "X'FF'", "''"),
        (_b64("0102030405060708090A0B0C0D0E0F00"), _b64("FF" + "00" * 15), _b64("00" * 16)),
    ),
    Col(
        "vbin",
        "VARBINARY(10)",
        ("X'0000FF00'", "X''", "X'00'"),
        (_b64("0000FF00"), "", _b64("00")),
    ),
    Col("tblob", "TINYBLOB", ("X'DEADBEEF'", "X''", "X'00'"), (_b64("DEADBEEF"), "", "AA==")),
    Col("blob_", "BLOB", ("X'0001'", "X''", "REPEAT(X'FF', 300)"), ("AAE=", "", _b64("FF" * 300))),
    Col(
        "mblob",
        "MEDIUMBLOB",
        ("X'01'", "X''", "REPEAT(X'AB', 70000)"),
        ("AQ==", "", _b64("AB" * 70000)),
    ),
    Col("lblob", "LONGBLOB", ("X'02'", "X''", "X'0000'"), ("Ag==", "", "AAA=")),
    # -- character strings --
    Col("c5", "CHAR(5)", ("'ab'", "''", "'abcde'"), ("ab", "", "abcde"), server_text=True),
    Col(
        "vc",
        "VARCHAR(300) CHARACTER SET utf8mb4",
        ("'😀 ünïcödé'", "''", "REPEAT('é', 300)"),
        ("😀 ünïcödé", "", "é" * 300),
        server_text=True,
    ),
    Col("ttxt", "TINYTEXT", ("'tiny'", "''", "'x'"), ("tiny", "", "x"), server_text=True),
    Col(
        "txt",
        "TEXT CHARACTER SET utf8mb4",
        ("'line1\\nline2\\t\"quoted\"'", "''", "REPEAT('z', 60000)"),
        ('line1\nline2\t"quoted"', "", "z" * 60000),
        server_text=True,
    ),
    Col(
        "ltxt",
        "LONGTEXT CHARACTER SET utf8mb4",
        ("'long'", "''", "REPEAT('ü', 100000)"),
        ("long", "", "ü" * 100000),
        server_text=True,
    ),
    Col(
        "lat1",
        "VARCHAR(10) CHARACTER SET latin1",
        ("'café'", "X'81'", "''"),
        ("café", "\u0081", ""),
        server_text=True,
    ),
    Col(
        "u16",
        "VARCHAR(10) CHARACTER SET utf16",
        ("'héllo'", "''", "'😀'"),
        ("héllo", "", "😀"),
        server_text=True,
    ),
    Col(
        "ucs",
        "CHAR(4) CHARACTER SET ucs2",
        ("'abc'", "''", "'ž'"),
        ("abc", "", "ž"),
        server_text=True,
    ),
    # -- MariaDB types stored as BINARY(n), all-zero values included --
    Col(
        "uid",
        "UUID",
        (
            "'123e4567-e89b-12d3-a456-426614174000'",
            "'00000000-0000-0000-0000-000000000000'",
            "'6ccd780c-baba-1026-9564-5b8c656024db'",
        ),
        (
            "123e4567-e89b-12d3-a456-426614174000",
            "00000000-0000-0000-0000-000000000000",
            "6ccd780c-baba-1026-9564-5b8c656024db",
        ),
        server_text=True,
    ),
    Col(
        "ip4",
        "INET4",
        ("'192.168.0.1'", "'0.0.0.0'", "'10.0.0.0'"),
        ("192.168.0.1", "0.0.0.0", "10.0.0.0"),
        server_text=True,
    ),
    Col(
        "ip6",
        "INET6",
        ("'2001:db8::ff00:42:8329'", "'::'", "'::ffff:1.2.3.4'"),
        ("2001:db8::ff00:42:8329", "::", "::ffff:1.2.3.4"),
        server_text=True,
    ),
    # -- geometry: {"srid", "wkb"}; the expected WKB comes from the server below --
    Col(
        "geo",
        "GEOMETRY",
        (
            "ST_GeomFromText('POINT(1 2)')",
            "ST_GeomFromText('LINESTRING(0 0, 1 1, 2 0)', 4326)",
            "ST_GeomFromText('POLYGON((0 0, 1 0, 1 1, 0 0))')",
        ),
        (None, None, None),
    ),
]
COLUMNS_BY_NAME = {c.name: c for c in COLUMNS}


@dataclass
class Streamed:
    """What the module fixture read: one insert event per row id, plus server-side texts."""

    after: dict[int, dict[str, Any]]
    server_text: dict[int, dict[str, Any]]
    geometry: dict[int, tuple[int, str] | None]
    events: list[ChangeEvent]


@pytest.fixture(scope="module")
def streamed(
    mariadb_server: MariaDBServer, replication_user: ReplicationUser
) -> Iterator[Streamed]:
    if not mariadb_server.running:
        mariadb_server.start()
    db = f"t_types_{uuid.uuid4().hex[:6]}"
    config = SourceConfig(
        host=mariadb_server.host,
        port=mariadb_server.port,
        user=replication_user.name,
        password_env="CDC_TEST_PASSWORD",
        server_id=next(_SERVER_IDS),
        include_tables=[rf"{db}\..*"],
        heartbeat_seconds=1.0,
        reconnect_initial_seconds=0.1,
        reconnect_max_seconds=1.0,
    )
    with mariadb_server.database(db):
        start = BinlogSource(config, password=replication_user.password).current_position()
        columns = ", ".join(f"`{c.name}` {c.definition}" for c in COLUMNS)
        gen = "gen_v INT AS (ti + 1) VIRTUAL, gen_s INT AS (ti * 2) STORED"
        mariadb_server.execute(
            f"CREATE TABLE `{db}`.all_types (id INT PRIMARY KEY, {columns}, {gen})"
        )
        names = ", ".join(f"`{c.name}`" for c in COLUMNS)
        with mariadb_server.connect(db) as conn, conn.cursor() as cur:
            cur.execute("SET SESSION sql_mode = ''")  # zero and partial dates, '' in ENUM
            cur.execute("SET SESSION time_zone = '+00:00'")
            for row in range(3):
                literals = ", ".join(c.values[row] for c in COLUMNS)
                cur.execute(f"INSERT INTO all_types (id, {names}) VALUES ({row + 1}, {literals})")
            cur.execute("INSERT INTO all_types (id) VALUES (4)")
            texts = ", ".join(f"CAST(`{c.name}` AS CHAR)" for c in COLUMNS if c.server_text)
            cur.execute(f"SELECT id, {texts} FROM all_types ORDER BY id")
            text_names = [c.name for c in COLUMNS if c.server_text]
            server_text = {int(r[0]): dict(zip(text_names, r[1:], strict=True)) for r in cur}
            cur.execute("SELECT id, ST_SRID(geo), HEX(ST_AsBinary(geo)) FROM all_types")
            geometry = {int(r[0]): (int(r[1]), r[2]) if r[2] is not None else None for r in cur}
        source = BinlogSource(config, resume=start, password=replication_user.password)
        events = collect_events(
            source, lambda evs: sum(e.kind is EventKind.ROW for e in evs) >= 4, timeout=60
        )
        after = {}
        for event in events:
            if event.kind is EventKind.ROW:
                assert event.op is Op.INSERT
                assert event.after is not None
                row = json.loads(event.after)
                after[row["id"]] = row
        yield Streamed(after, server_text, geometry, events)


def _row_ids() -> list[int]:
    return [1, 2, 3]


@pytest.mark.parametrize("column", COLUMNS, ids=[c.definition for c in COLUMNS])
def test_column_round_trips(streamed: Streamed, column: Col) -> None:
    """Each value inserted comes back in its documented JSON representation; NULL is null."""
    assert set(streamed.after) == {1, 2, 3, 4}, "all four inserts must be streamed"
    got = [streamed.after[row][column.name] for row in _row_ids()]
    if column.name == "geo":
        expected: list[Any] = []
        for row in _row_ids():
            entry = streamed.geometry[row]
            assert entry is not None
            srid, wkb_hex = entry
            expected.append({"srid": srid, "wkb": _b64(wkb_hex)})
    else:
        expected = list(column.expected)
    assert got == expected
    assert streamed.after[4][column.name] is None


@pytest.mark.parametrize(
    "column",
    [c for c in COLUMNS if c.server_text],
    ids=[c.definition for c in COLUMNS if c.server_text],
)
def test_column_matches_server_text(streamed: Streamed, column: Col) -> None:
    """Where the server prints a canonical text form, the JSON string is exactly that text."""
    for row in _row_ids():
        assert streamed.after[row][column.name] == streamed.server_text[row][column.name], row


def test_generated_columns_are_captured(streamed: Streamed) -> None:
    """VIRTUAL and STORED generated columns are in FULL row images too."""
    assert [streamed.after[row]["gen_v"] for row in (1, 2, 3, 4)] == [2, -127, 128, None]
    assert [streamed.after[row]["gen_s"] for row in (1, 2, 3, 4)] == [2, -256, 254, None]


def test_row_images_are_compact_utf8_json(streamed: Streamed) -> None:
    """Images are compact JSON text with non-ASCII kept as is, and pk holds the key only."""
    event = next(e for e in streamed.events if e.kind is EventKind.ROW)
    assert event.after is not None
    assert ", " not in event.after[:200]
    assert '": ' not in event.after[:200]
    assert "😀" in event.after
    assert "\\u" not in event.after
    assert event.pk == '{"id":1}'
    assert event.db.startswith("t_types_")
    assert event.table == "all_types"


def test_timestamps_do_not_depend_on_the_local_time_zone(
    mariadb_server: MariaDBServer, replication_user: ReplicationUser
) -> None:
    """TIMESTAMP is UTC with Z whatever the session and the process time zones are."""
    db = f"t_tz_{uuid.uuid4().hex[:6]}"
    config = SourceConfig(
        host=mariadb_server.host,
        port=mariadb_server.port,
        user=replication_user.name,
        password_env="CDC_TEST_PASSWORD",
        server_id=next(_SERVER_IDS),
        include_tables=[rf"{db}\..*"],
        heartbeat_seconds=1.0,
    )
    saved = os.environ.get("TZ")
    os.environ["TZ"] = "America/New_York"
    time.tzset()
    try:
        with mariadb_server.database(db):
            start = BinlogSource(config, password=replication_user.password).current_position()
            with mariadb_server.connect(db) as conn, conn.cursor() as cur:
                cur.execute("CREATE TABLE t (id INT PRIMARY KEY, ts TIMESTAMP(3) NULL)")
                cur.execute("SET SESSION time_zone = '+05:30'")
                cur.execute("INSERT INTO t VALUES (1, '2024-06-01 12:00:00.250')")
            source = BinlogSource(config, resume=start, password=replication_user.password)
            events = collect_events(
                source, lambda evs: any(e.kind is EventKind.ROW for e in evs), timeout=30
            )
    finally:
        if saved is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = saved
        time.tzset()
    row = next(json.loads(e.after) for e in events if e.kind is EventKind.ROW and e.after)
    assert row["ts"] == "2024-06-01T06:30:00.250Z"
