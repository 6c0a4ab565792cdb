"""The private servers really are what the other integration tests assume."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pymysql
import pytest
from kazoo.client import KazooClient
from pyarrow.fs import FileType
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import WriteRowsEvent

from cdc_platform.testing.mariadb import MariaDBServer
from cdc_platform.testing.postgresql import PostgreSQLServer
from cdc_platform.testing.seaweedfs import SeaweedFSServer
from cdc_platform.testing.zookeeper import ZooKeeperServer, four_letter_word
from tests.conftest import MariaDBDatabase

pytestmark = pytest.mark.integration


def test_mariadb_has_binlog_row_full(mariadb: MariaDBDatabase) -> None:
    rows = dict(
        mariadb.server.query(
            "SHOW GLOBAL VARIABLES WHERE Variable_name IN "
            "('log_bin','binlog_format','binlog_row_image','binlog_row_metadata','gtid_strict_mode')"
        )
    )
    assert rows == {
        "log_bin": "ON",
        "binlog_format": "ROW",
        "binlog_row_image": "FULL",
        "binlog_row_metadata": "FULL",
        "gtid_strict_mode": "ON",
    }


def test_replication_user_has_only_the_cdc_grants(mariadb: MariaDBDatabase) -> None:
    user = mariadb.user
    with (
        pymysql.connect(
            host=mariadb.server.host,
            port=mariadb.server.port,
            user=user.name,
            password=user.password,
        ) as conn,
        conn.cursor() as cur,
    ):
        cur.execute("SHOW GRANTS")
        grants = " ".join(row[0] for row in cur.fetchall())
        assert "SELECT, REPLICATION SLAVE, REPLICATION CLIENT" in grants.replace(
            "BINLOG MONITOR", "REPLICATION CLIENT"
        )
        with pytest.raises(pymysql.err.OperationalError):
            cur.execute(f"CREATE TABLE `{mariadb.name}`.nope (id INT)")


def test_replication_user_reads_the_binlog(mariadb: MariaDBDatabase) -> None:
    server = mariadb.server
    file, pos = server.query("SHOW MASTER STATUS")[0][:2]
    server.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, name VARCHAR(20))",
        "INSERT INTO t VALUES (1, 'one'), (2, 'two')",
        database=mariadb.name,
    )
    stream = BinLogStreamReader(
        connection_settings={
            "host": server.host,
            "port": server.port,
            "user": mariadb.user.name,
            "passwd": mariadb.user.password,
        },
        server_id=4242,
        log_file=file,
        log_pos=pos,
        resume_stream=True,
        blocking=False,
        only_events=[WriteRowsEvent],
        only_schemas=[mariadb.name],
    )
    try:
        rows = [row["values"] for event in stream for row in event.rows]
    finally:
        stream.close()
    assert rows == [{"id": 1, "name": "one"}, {"id": 2, "name": "two"}]


def test_each_test_gets_a_fresh_database(mariadb: MariaDBDatabase) -> None:
    assert mariadb.server.query(f"SHOW TABLES FROM `{mariadb.name}`") == []


def test_zookeeper_ephemeral_node_dies_with_its_session(
    zk_hosts: str, zookeeper_server: ZooKeeperServer
) -> None:
    owner = KazooClient(hosts=zk_hosts, timeout=2.0)
    watcher = KazooClient(hosts=zk_hosts, timeout=2.0)
    owner.start(timeout=10)
    watcher.start(timeout=10)
    try:
        owner.create("/cdc/running", b"me", ephemeral=True, makepath=True)
        assert watcher.exists("/cdc/running") is not None
        gone = threading.Event()

        def on_change(data: bytes | None, stat: object) -> None:
            if data is None and stat is None:
                gone.set()

        watcher.DataWatch("/cdc/running", on_change)
        owner.stop()  # closing the session removes its ephemeral nodes
        assert gone.wait(timeout=10), "ephemeral node survived its session"
        assert watcher.exists("/cdc/running") is None
    finally:
        owner.close()
        watcher.stop()
        watcher.close()


def test_zookeeper_chroot_is_unique_per_test(zk_hosts: str) -> None:
    client = KazooClient(hosts=zk_hosts, timeout=2.0)
    client.start(timeout=10)
    try:
        assert client.get_children("/") == []
    finally:
        client.stop()
        client.close()


def _answers(
    server: MariaDBServer | ZooKeeperServer | PostgreSQLServer | SeaweedFSServer,
) -> bool:
    if isinstance(server, SeaweedFSServer):
        listed = server.filesystem().get_file_info(server.bucket)
        return bool(listed.type == FileType.Directory)
    if isinstance(server, MariaDBServer):
        return server.query("SELECT 1") == [(1,)]
    if isinstance(server, ZooKeeperServer):
        return "Mode: standalone" in four_letter_word(server.host, server.port, "srvr")
    server.execute("CREATE TABLE t (id INT)")  # in the test database, created on the retry
    return True


@pytest.mark.parametrize("kind", ["mariadb", "zookeeper", "postgresql", "seaweedfs"])
def test_a_first_start_on_a_port_taken_meanwhile_moves_to_another(
    kind: str, tmp_path: Path
) -> None:
    """The chosen port taken before the server binds it (another process won the race): the
    server starts on another port instead of failing the worker's whole session."""
    servers = {
        "mariadb": MariaDBServer,
        "zookeeper": ZooKeeperServer,
        "postgresql": PostgreSQLServer,
        "seaweedfs": SeaweedFSServer,
    }
    with socket.socket() as squatter:  # bound, not listening: a connection is refused
        squatter.bind(("127.0.0.1", 0))
        server = servers[kind](tmp_path / kind)
        server.port = squatter.getsockname()[1]  # as if free_port() had just returned it
        if isinstance(server, SeaweedFSServer):
            server.ports["s3"] = server.port  # one of its ports
        try:
            server.start()
            assert server.port != squatter.getsockname()[1]
            assert _answers(server)
        finally:
            server.stop()
