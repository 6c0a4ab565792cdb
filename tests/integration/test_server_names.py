"""Server-wide names and settings of the tests that share a MariaDB (XIDs, global variables):
what cdc_platform/testing/server_names.py and the per-test database rely on."""

from __future__ import annotations

import pymysql
import pytest

from cdc_platform.testing.server_names import (
    global_variable,
    unique_xid,
    wait_until_disconnected,
    xid_text,
)
from tests.conftest import MariaDBDatabase

pytestmark = pytest.mark.integration


def _prepare(db: MariaDBDatabase, xid: str) -> tuple[pymysql.connections.Connection[object], int]:
    conn = db.server.connect(db.name)
    with conn.cursor() as cur:
        cur.execute("SELECT CONNECTION_ID()")
        (thread,) = cur.fetchone()
        for statement in (f"XA START '{xid}'", "INSERT INTO t VALUES (1)", f"XA END '{xid}'"):
            cur.execute(statement)
        cur.execute(f"XA PREPARE '{xid}'")
    return conn, int(thread)


def test_a_prepared_xa_is_unknown_to_others_until_its_connection_has_ended(
    mariadb: MariaDBDatabase,
) -> None:
    """Why an ``XA COMMIT`` right after the preparing connection closed can fail with
    XAER_NOTA (issue 42, item 17): the server hands the transaction over only when it has
    ended that connection, which :func:`wait_until_disconnected` waits for."""
    db = mariadb
    db.server.execute("CREATE TABLE t (id INT PRIMARY KEY)", database=db.name)
    xid = unique_xid("handover")
    conn, thread = _prepare(db, xid)
    with pytest.raises(pymysql.err.OperationalError, match="XAER_NOTA"):
        db.server.execute(f"XA COMMIT '{xid}'", database=db.name)
    conn.close()
    wait_until_disconnected(db.server, thread)
    db.server.execute(f"XA COMMIT '{xid}'", database=db.name)
    assert db.server.query("SELECT id FROM t", database=db.name) == [(1,)]


def test_a_prepared_xa_left_by_a_test_is_rolled_back_before_its_database_is_dropped(
    mariadb: MariaDBDatabase,
) -> None:
    db = mariadb
    db.server.execute("CREATE TABLE t (id INT PRIMARY KEY)", database=db.name)
    xid = unique_xid("left")
    conn, thread = _prepare(db, xid)
    conn.close()
    wait_until_disconnected(db.server, thread)
    assert db.server.rollback_prepared_xa() == [xid.encode().hex()]
    assert db.server.query("XA RECOVER") == []
    assert db.server.query("SELECT id FROM t", database=db.name) == []


def test_unique_xids_differ_and_are_named_as_the_engine_names_them() -> None:
    first, second = unique_xid("p"), unique_xid("p")
    assert first != second
    assert xid_text("p") == "X'70',X'',1"


def test_a_global_variable_is_put_back_also_when_the_block_fails(
    mariadb: MariaDBDatabase,
) -> None:
    server = mariadb.server
    (before,) = server.query("SELECT @@GLOBAL.tx_isolation")[0]
    seen = []

    def fail_inside() -> None:
        with global_variable(server, "tx_isolation", "'READ-UNCOMMITTED'"):
            seen.extend(server.query("SELECT @@GLOBAL.tx_isolation"))
            raise RuntimeError("inside")

    with pytest.raises(RuntimeError, match="inside"):
        fail_inside()
    assert seen == [("READ-UNCOMMITTED",)]
    assert server.query("SELECT @@GLOBAL.tx_isolation") == [(before,)]
