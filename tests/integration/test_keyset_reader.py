"""The keyset reader every side writer shares (snapshot, repair, reconciliation, id watch).

Real MariaDB: each primary-key family whose driver value does not compare the way the column
orders (TIME beyond a day or negative, ENUM and SET, text in a charset the utf8mb4 session
cannot hold exactly, FLOAT and DOUBLE) is paged in small chunks, straight and through the
progress file's form, and every row must come exactly once; the repair's read by key must
find each row.
The connection's isolation and the translation of driver errors are shown here as well.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest
from deltalake import DeltaTable

from cdc_platform.backfill import table_copy
from cdc_platform.backfill.snapshot import SnapshotRunner
from cdc_platform.config.instance import SnapshotSettings
from cdc_platform.config.source import SourceConfig
from cdc_platform.errors import SourceTableChangedError, SourceTableMissingError
from cdc_platform.sink.destination_lake import DestinationLake
from cdc_platform.sink.term import WriteTerm
from cdc_platform.source.mysql import Connection, SourceServer
from cdc_platform.source.reading.row_keys import decode_key, encode_key
from cdc_platform.source.reading.row_reader import ChunkRows, read_chunk, read_keys
from cdc_platform.source.reading.table_description import SnapshotTable, describe_table
from cdc_platform.testing.destinations import PASSWORD_ENV, instance_config
from cdc_platform.testing.server_names import global_variable
from tests.conftest import MariaDBDatabase

pytestmark = pytest.mark.integration

KEY_FAMILIES: dict[str, tuple[str, list[str]]] = {
    "time_key": (
        "k TIME(2) PRIMARY KEY",
        [
            "'-838:59:59'",
            "'-25:00:00'",
            "'-24:00:00'",
            "'-01:30:00'",
            "'-00:30:00'",
            "'-00:00:00.5'",
            "'00:00:00'",
            "'00:30:00'",
            "'23:59:59.99'",
            "'24:00:00'",
            "'25:30:00.25'",
            "'838:59:59'",
        ],
    ),
    # Index order (b, a, c) is not text order (a, b, c).
    "enum_key": ("k ENUM('b','a','c') PRIMARY KEY", ["'a'", "'b'", "'c'"]),
    "enum_pair_key": (
        "k ENUM('b','a','c'), i INT, PRIMARY KEY (k, i)",
        [f"('{k}', {i})" for k in "abc" for i in (1, 2, 3)],
    ),
    # Bit-value order ('', y, x, (y,x), z, ...) is not text order.
    "set_key": (
        "k SET('y','x','z') PRIMARY KEY",
        ["''", "'y'", "'x'", "'y,x'", "'z'", "'y,z'", "'x,z'", "'y,x,z'"],
    ),
    # FLOAT is single precision: the server prints 6 digits ('123457' for 123456.789) and
    # a stored 1.1 is not the double 1.1 (1.1 < k, k NOT IN (1.1)); the subnormal 1e-40
    # and the largest float too. DOUBLE keys at the ends of their range beside them.
    "float_key": (
        "k FLOAT PRIMARY KEY",
        [
            "-3.4e38",
            "-1.1",
            "-0.1",
            "0",
            "1e-40",
            "0.1",
            "1.1",
            "2.5",
            "123456.789",
            "16777217",
            "3.4e38",
        ],
    ),
    "float_pair_key": (
        "k FLOAT, i INT, PRIMARY KEY (k, i)",
        [f"({k}, {i})" for k in ("-1.1", "0.1", "123456.789") for i in (1, 2)],
    ),
    "double_key": (
        "k DOUBLE PRIMARY KEY",
        [
            "-1.7976931348623157e308",
            "-0.1",
            "4.9e-324",
            "0.1",
            "0.30000000000000004",
            "1.1",
            "123456.789",
            "1e300",
        ],
    ),
    # 0x98 is no character of cp1251: the session's utf8mb4 text of every such key is '?'.
    "cp1251_key": (
        "k VARCHAR(10) CHARACTER SET cp1251 PRIMARY KEY",
        ["X'98'", "X'6198'", "X'6298'", "X'986198'", "'a'", "'b'", "X'C0'", "X'C098'"],
    ),
}


def _row(value: str) -> str:
    return value if value.startswith("(") else f"({value})"


@pytest.fixture
def source(mariadb: MariaDBDatabase) -> Iterator[Connection]:
    config = SourceConfig(
        host=mariadb.server.host,
        port=mariadb.server.port,
        user=mariadb.user.name,
        password_env=PASSWORD_ENV,
        server_id=2401,
    )
    conn = SourceServer(config, mariadb.user.password, purpose="snapshot").connect(30.0)
    conn.select_db(mariadb.name)
    try:
        yield conn
    finally:
        conn.close()


def _create(mariadb: MariaDBDatabase, table: str) -> int:
    columns, values = KEY_FAMILIES[table]
    mariadb.server.execute(
        f"CREATE TABLE {table} ({columns}, v INT AUTO_INCREMENT UNIQUE)",
        f"INSERT INTO {table} ({'k, i' if 'i INT' in columns else 'k'}) VALUES "
        + ", ".join(_row(v) for v in values),
        database=mariadb.name,
    )
    return len(values)


def _page(conn: Connection, spec: SnapshotTable, size: int, *, through_file: bool) -> list[int]:
    """Every row's `v` in chunks of ``size``; ``through_file`` carries the last key through
    the progress file's JSON form, as a resumed snapshot does."""
    seen: list[int] = []
    after: list[Any] | None = None
    while True:
        chunk = read_chunk(conn, spec, after, size)
        seen += [json.loads(image)["v"] for _, image in chunk.rows]
        assert len(seen) <= 100, "paging does not end"
        if len(chunk.rows) < size:
            return seen
        after = chunk.last_key
        if through_file:
            after = decode_key(json.loads(json.dumps(encode_key(after or []))))


@pytest.mark.parametrize("table", sorted(KEY_FAMILIES))
def test_every_key_family_pages_every_row_exactly_once(
    mariadb: MariaDBDatabase, source: Connection, table: str
) -> None:
    rows = _create(mariadb, table)
    spec = describe_table(source, mariadb.name, table)
    everything = list(range(1, rows + 1))
    for size in (1, 2, 3):
        for through_file in (False, True):
            seen = _page(source, spec, size, through_file=through_file)
            assert sorted(seen) == everything, (size, through_file, seen)
    # The repair's read by key: each raw key (as the reconciliation stores it) finds its row.
    keys = [
        decode_key(json.loads(json.dumps(encode_key(k))))
        for k in read_chunk(source, spec, None, rows).keys
    ]
    found = read_keys(source, spec, keys)
    assert sorted(json.loads(image)["v"] for _, image in found.rows) == everything


@pytest.mark.parametrize(
    ("table", "chunk_size"),
    [
        ("time_key", 2),
        ("enum_pair_key", 2),
        ("set_key", 2),
        ("cp1251_key", 2),
        # one row per chunk: a boundary row read again would stop the snapshot advancing
        ("float_key", 1),
        ("float_pair_key", 1),
        ("double_key", 1),
    ],
)
def test_a_snapshot_copies_every_row_of_each_key_family_once(
    mariadb: MariaDBDatabase,
    lake_root: Path,
    monkeypatch: pytest.MonkeyPatch,
    table: str,
    chunk_size: int,
) -> None:
    monkeypatch.setenv(PASSWORD_ENV, mariadb.user.password)
    rows = _create(mariadb, table)
    reads: list[int] = []

    def bounded_read_chunk(*args: Any) -> ChunkRows:
        reads.append(1)
        assert len(reads) <= rows + 2, "the snapshot does not advance"
        return read_chunk(*args)

    monkeypatch.setattr(table_copy, "read_chunk", bounded_read_chunk)
    layout = DestinationLake.at(lake_root, "d")
    uri = layout.change_log
    config = instance_config(
        mariadb.server, mariadb.user.name, [rf"{mariadb.name}\..*"], server_id=2402
    )
    result = SnapshotRunner(
        WriteTerm("d", config, layout),
        DestinationLake.at(lake_root, "d").snapshot_state,
        tables=[f"{mariadb.name}.{table}"],
        settings=SnapshotSettings(chunk_size=chunk_size),
    ).run()
    changes = DeltaTable(uri).to_pyarrow_table(columns=["op", "after"]).to_pylist()
    copied = sorted(json.loads(r["after"])["v"] for r in changes if r["op"] == "r")
    assert copied == list(range(1, rows + 1))
    assert result.rows_written == rows


def test_side_connections_read_only_committed_rows_whatever_the_global_isolation(
    mariadb: MariaDBDatabase, source: Connection
) -> None:
    """A source whose global isolation is READ UNCOMMITTED: a snapshot chunk must not copy
    a row whose transaction then rolls back (no binlog event would ever correct it)."""
    server, db = mariadb.server, mariadb.name
    server.execute("CREATE TABLE iso (id INT PRIMARY KEY, v INT)", database=db)
    server.execute("INSERT INTO iso VALUES (1, 1)", database=db)
    # Put back as it was (not as the test assumes it was), also when the test fails.
    with global_variable(server, "tx_isolation", "'READ-UNCOMMITTED'"):
        writer = server.connect(db, autocommit=False)
        try:
            with writer.cursor() as cur:
                cur.execute("INSERT INTO iso VALUES (2, 2)")
                cur.execute("UPDATE iso SET v = 100 WHERE id = 1")
            config = SourceConfig(
                host=server.host,
                port=server.port,
                user=mariadb.user.name,
                password_env=PASSWORD_ENV,
                server_id=2403,
            )
            # A connection opened while the global default is READ UNCOMMITTED.
            conn = SourceServer(config, mariadb.user.password, purpose="snapshot").connect(30.0)
            try:
                spec = describe_table(conn, db, "iso")
                chunk = read_chunk(conn, spec, None, 10)
                assert [json.loads(image) for _, image in chunk.rows] == [{"id": 1, "v": 1}]
            finally:
                conn.close()
        finally:
            writer.rollback()
            writer.close()


def test_driver_errors_of_the_keyset_reader_are_the_engines(
    mariadb: MariaDBDatabase, source: Connection
) -> None:
    """A column dropped since the table was described, a table dropped since: the engine's
    errors (one says to read the columns again, one that the table is gone), worded for the
    reader that opened the connection; never a raw pymysql error."""
    server, db = mariadb.server, mariadb.name
    server.execute("CREATE TABLE gone (id INT PRIMARY KEY, a INT, b INT)", database=db)
    server.execute("INSERT INTO gone VALUES (1, 1, 1)", database=db)
    spec = describe_table(source, db, "gone")
    server.execute("ALTER TABLE gone DROP COLUMN b", database=db)
    with pytest.raises(SourceTableChangedError, match=r"^snapshot: a table changed") as changed:
        read_chunk(source, spec, None, 10)
    assert not isinstance(changed.value.__cause__, pymysql.MySQLError)
    with pytest.raises(SourceTableChangedError):
        read_keys(source, spec, [[1]])
    server.execute("DROP TABLE gone", database=db)
    with pytest.raises(SourceTableMissingError, match=r"^snapshot: a table or database"):
        read_chunk(source, spec, [0], 10)
