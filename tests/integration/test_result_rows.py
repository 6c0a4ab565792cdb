"""The fast row reader gives exactly pymysql's rows, and leaves the connection as pymysql does.

Real MariaDB: every column type the side readers select (as they select it), NULLs, every
length form of the protocol (1, 2, 3 bytes, and a row over 16 MiB, sent in several packets),
an error the server sends after some rows, and a connection killed while rows arrive.
"""

from __future__ import annotations

import threading
from typing import Any

import pymysql
import pytest

from cdc_platform.source.reading.result_rows import fetch_rows
from cdc_platform.testing.processes import wait_for
from cdc_platform.testing.server_names import global_variable
from tests.conftest import MariaDBDatabase

pytestmark = pytest.mark.integration

COLUMNS = """id BIGINT PRIMARY KEY, ti TINYINT, u BIGINT UNSIGNED, d DECIMAL(30,10),
    f FLOAT, dbl DOUBLE, b BIT(12), dt DATETIME(6), ts TIMESTAMP(3) NULL, tm TIME(2), y YEAR,
    c CHAR(5), vc VARCHAR(300), bin VARBINARY(20), tx MEDIUMTEXT, bl LONGBLOB,
    e ENUM('b','a'), s SET('x','y'), j JSON, g POINT, l1 VARCHAR(300) CHARACTER SET latin1"""

ROWS = [
    "1, -128, 18446744073709551615, -12345678901234567890.0123456789, 1.5e-5, 1e300, "
    "b'101010101010', '2024-02-29 23:59:59.999999', '2038-01-19 03:14:07.123', '-838:59:59', "
    "2155, 'ab', REPEAT('é', 250), x'00ff10', REPEAT('x', 65536), REPEAT(x'00', 70000), "
    "'a', 'x,y', '{\"k\": [1, \"é\\\\n\"]}', ST_GeomFromText('POINT(1 2)'), 'Ä\\tq'",
    "2, " + ", ".join(["NULL"] * 20),
    "3, 0, 0, 0, 0, -0.0, b'0', '0000-00-00 00:00:00', NULL, '00:00:00', 0, '', REPEAT('z', 251), "
    "'', REPEAT('y', 65535), x'', 'b', '', '[]', NULL, ''",
    "4, 1, 1, 1, 3.4028234e38, 2.2250738585072014e-308, b'1', '1000-01-01', "
    "'1970-01-01 00:00:01', '12:00', 1901, 'çé', REPEAT('\"\\\\', 100), x'20', "
    "REPEAT('ü', 21846), REPEAT(x'ff', 16777216), "
    "'a', 'y', '\"text\"', ST_GeomFromText('POINT(-1.5 0)'), REPEAT('ÿ', 200)",
]

SELECT = (
    "SELECT id, ti, u, CAST(d AS CHAR), CAST(f AS DOUBLE), dbl, b, CAST(dt AS CHAR), "
    "CAST(ts AS CHAR), CAST(tm AS CHAR), y, c, vc, bin, tx, bl, e, CAST(s AS CHAR), j, g, "
    "CAST(l1 AS BINARY), CAST(tm AS CHAR), e + 0, id FROM t WHERE id >= %s ORDER BY id"
)


def pymysql_rows(conn: pymysql.connections.Connection[Any], sql: str, args: Any) -> list[Any]:
    with conn.cursor() as cur:
        cur.execute(sql, args)
        return list(cur.fetchall())


def test_every_type_and_length_reads_as_pymysql_reads_it(mariadb: MariaDBDatabase) -> None:
    db = mariadb
    # A new connection takes the larger packet size (a row over 16 MiB is inserted and read).
    # The rows stay out of the shared server's binlog: once the packet size is put back, an
    # event over 16 MiB there would stop the server's own binlog reads (BINLOG_GTID_POS of the
    # current file gave NULL, and a later test of the same worker failed).
    with global_variable(db.server, "max_allowed_packet", "67108864"):
        db.server.execute(
            "SET SESSION sql_log_bin = 0",
            f"CREATE TABLE t ({COLUMNS}) CHARACTER SET utf8mb4",
            *(f"INSERT INTO t VALUES ({row})" for row in ROWS),
            database=db.name,
        )
        with db.server.connect(db.name) as conn:
            expected = pymysql_rows(conn, SELECT, (0,))
            assert len(expected) == len(ROWS)
            assert len(expected[3][15]) == 16777216, "a row over 16 MiB: several packets"
            assert fetch_rows(conn, SELECT, (0,)) == expected
            assert fetch_rows(conn, SELECT, (2,)) == expected[1:]
            assert fetch_rows(conn, SELECT, (99,)) == []
            # The connection goes on as after pymysql's own read.
            assert fetch_rows(conn, "SELECT 1, '100%%'") == [(1, "100%")]
            assert pymysql_rows(conn, "SELECT 2", ()) == [(2,)]
            status = pymysql_rows(conn, "SHOW MASTER STATUS", ())
            assert fetch_rows(conn, "SHOW MASTER STATUS") == status


def test_an_error_after_some_rows_is_raised_and_the_connection_stays_usable(
    mariadb: MariaDBDatabase,
) -> None:
    # The scalar subquery fails only at row 3000: rows before it are already on the wire.
    sql = (
        "SELECT seq, REPEAT('r', 100), IF(seq = 3000, (SELECT 1 UNION SELECT 2), 0) "
        "FROM seq_1_to_5000"
    )
    with mariadb.server.connect(mariadb.name) as conn:
        with pytest.raises(pymysql.MySQLError) as theirs:
            pymysql_rows(conn, sql, ())
        with pytest.raises(pymysql.MySQLError) as ours:
            fetch_rows(conn, sql)
        assert type(ours.value) is type(theirs.value)
        assert ours.value.args == theirs.value.args
        assert fetch_rows(conn, "SELECT 3") == [(3,)]


def test_a_connection_killed_while_rows_arrive_is_lost(mariadb: MariaDBDatabase) -> None:
    # About 4 MB of rows reach the client before the server sleeps at row 4000.
    sql = "SELECT seq, REPEAT('k', 1000), IF(seq = 4000, SLEEP(30), 0) FROM seq_1_to_8000"
    with mariadb.server.connect(mariadb.name) as conn, mariadb.server.connect() as admin:
        thread_id = conn.thread_id()
        outcome: list[BaseException] = []

        def read() -> None:
            try:
                fetch_rows(conn, sql)
            except BaseException as exc:  # handed to the test thread
                outcome.append(exc)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()

        def sleeping() -> bool:
            with admin.cursor() as cur:
                cur.execute(
                    "SELECT STATE FROM information_schema.PROCESSLIST WHERE ID = %s", (thread_id,)
                )
                row = cur.fetchone()
            return row is not None and row[0] == "User sleep"

        wait_for(sleeping, "the read to stall on the server's sleep", timeout=30)
        with admin.cursor() as cur:
            cur.execute(f"KILL CONNECTION {int(thread_id)}")
        reader.join(timeout=30)
        assert not reader.is_alive(), "the read ended"
        assert len(outcome) == 1
        assert isinstance(outcome[0], pymysql.OperationalError), outcome
        assert not conn.open, "a connection lost mid-result is closed"
